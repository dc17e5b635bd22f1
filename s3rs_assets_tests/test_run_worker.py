"""A run launched by Dagster (the daemon's sensors, the UI) builds its table alone in its
run worker (issue 18): counted, not timed, against a real instance in a temp dir.

No database: the fleet is a generated tables.yaml; the runs are created as the sensor daemon
creates them (`_create_sensor_run`: the code location's subset job, its execution plan
snapshot) and executed by Dagster's run worker `core_execute_run`, in this process to count
what it builds, and through the instance's run launcher (a gRPC code server and its run
subprocess, as the daemon and the UI launch) once. The steps themselves fail (no MySQL):
what is checked is what the worker built before its first step.
"""

from __future__ import annotations

import time
from collections import Counter

import dagster as dg
import pytest
from dagster._grpc.impl import core_execute_run
from dagster._utils.hosted_user_process import recon_job_from_origin

from s3rs_assets import definitions, table_job
from s3rs_assets.freshness import CHECK as CAUGHT_UP
from s3rs_assets.names import (
    ASSET_JOB,
    CODE_LOCATION,
    STAGE_CHAIN,
    TABLE_JOBS_MAX_ENV,
    asset_key,
    job_name,
)
from s3rs_assets.table_job import ONE_TABLE_EVENT, WHOLE_LOCATION_EVENT
from s3rs_assets_tests import test_fleet
from s3rs_assets_tests.conftest import REPO
from s3rs_assets_tests.daemon_runs import code_location, create_run, started_steps
from s3rs_assets_tests.test_fleet import write_fleet

# `_worker` closes Dagster's run iterator at the first step's start; Dagster's step
# generators then yield once more while closing ("generator ignored GeneratorExit"), which
# Python reports as unraisable: the expected end of a run cut short here, not a fault
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")

TABLE = "fleet_s3.t0003"
counts = test_fleet.counts  # the fixture: op definitions and job resolutions built


@pytest.fixture
def instance(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    with dg.instance_for_test(temp_dir=str(home)) as inst:
        yield inst


def _fresh_process() -> None:
    """Forget the locations this process built, as a new run worker process starts."""
    definitions._WHOLE.clear()  # noqa: SLF001
    definitions._FOR_RUN.clear()  # noqa: SLF001


def _fleet(tmp_path, monkeypatch, n: int, jobs_max: int | None = 5) -> None:
    # services nobody listens on: the steps start, then fail at once
    monkeypatch.setenv("S3RS_MYSQL_URL", "mysql://root@127.0.0.1:9/none")
    monkeypatch.setenv("S3RS_REDSHIFT_URL", "postgresql://nobody@127.0.0.1:9/none")
    monkeypatch.setenv("S3RS_S3_BUCKET", "s3rs-no-bucket")
    monkeypatch.setenv("S3RS_S3_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("S3RS_TABLES", str(write_fleet(tmp_path / f"fleet{n}.yaml", n)))
    if jobs_max is None:
        monkeypatch.delenv(TABLE_JOBS_MAX_ENV, raising=False)
    else:
        monkeypatch.setenv(TABLE_JOBS_MAX_ENV, str(jobs_max))
    _fresh_process()


def _sensor_request(instance, table: str = TABLE) -> dg.RunRequest:
    """The stage chain's request after `table`'s backup materialized a partition."""
    instance.report_runless_asset_event(
        dg.AssetMaterialization(asset_key(table, "s3_parquet"), partition="2024-02-01")
    )
    repo = definitions.whole_location().get_repository_def()
    ctx = dg.build_sensor_context(instance=instance, repository_def=repo)
    (req,) = repo.get_sensor_def(STAGE_CHAIN).evaluate_tick(ctx).run_requests
    return req


def _worker(instance, run: dg.DagsterRun) -> list[dg.EventLogEntry]:
    """Dagster's run worker on `run`, in this process, up to its first step's start (the
    step itself would only fail and retry); the run's events so far."""
    _fresh_process()
    recon = recon_job_from_origin(run.job_code_origin)
    events = core_execute_run(recon, run, instance, inject_env_vars=False)
    try:
        for event in events:
            if event.event_type_value == "STEP_START":
                break
    finally:
        events.close()
    return list(instance.all_logs(run.run_id))


def _texts(events) -> list[str]:
    return [e.message or "" for e in events]


def _launched_run(tmp_path, monkeypatch, instance, counts, n: int, jobs_max: int | None):
    _fleet(tmp_path, monkeypatch, n, jobs_max)
    location = code_location(instance, REPO)
    run = create_run(instance, location, _sensor_request(instance))
    counts.clear()
    events = _worker(instance, run)
    return run, events, Counter(counts)


@pytest.mark.parametrize("jobs_max", [5, None], ids=["asset-job", "sync-jobs"])
def test_a_launched_run_builds_its_table_alone_whatever_the_fleet(
    tmp_path, monkeypatch, instance, counts, jobs_max
):
    """10 or 300 tables: the worker builds the same few ops, and runs the planned steps."""
    seen = []
    for n in (10, 300):
        run, events, built = _launched_run(tmp_path, monkeypatch, instance, counts, n, jobs_max)
        if jobs_max is None and n > 100:
            assert run.job_name == ASSET_JOB  # past the default threshold: no sync jobs
        elif jobs_max is None:
            assert run.job_name == job_name(TABLE)
        assert f"{ONE_TABLE_EVENT} {TABLE} alone" in _texts(events)
        planned = instance.get_execution_plan_snapshot(run.execution_plan_snapshot_id)
        started = started_steps(events)
        assert started and started <= {s.key for s in planned.steps}
        seen.append(built)
    assert seen[0]["ops"] == seen[1]["ops"] <= 5  # two assets, three checks at most
    # the table's own sync job at most (10 tables under the default threshold: it is the
    # run's job; past it the run is on the implicit asset job)
    assert seen[0]["resolutions"] <= 1 and seen[1]["resolutions"] <= 1
    if jobs_max is not None:
        assert seen[0]["resolutions"] == seen[1]["resolutions"]


def test_a_run_of_the_fleet_or_of_two_tables_loads_the_whole_location(
    tmp_path, monkeypatch, instance, counts
):
    _fleet(tmp_path, monkeypatch, 20)
    location = code_location(instance, REPO)
    other = "fleet_s1.t0011"
    both = [asset_key(TABLE, "redshift_table"), asset_key(other, "redshift_table")]
    req = dg.RunRequest(job_name=ASSET_JOB, asset_selection=both, asset_check_keys=[])
    events = _worker(instance, create_run(instance, location, req))
    assert f"{WHOLE_LOCATION_EVENT}: the run selects 2 tables' assets" in _texts(events)
    assert started_steps(events) <= {"__".join(k.path) for k in both}
    assert started_steps(events)


def test_a_run_with_the_fleet_wide_check_loads_the_whole_location(tmp_path, monkeypatch, instance):
    """`caught_up` is one op over every table: a run selecting it is planned against the
    fleet's op, which one table's definitions do not have."""
    _fleet(tmp_path, monkeypatch, 20)
    location = code_location(instance, REPO)
    key = asset_key(TABLE, "redshift_table")
    req = dg.RunRequest(
        job_name=ASSET_JOB,
        asset_selection=[key],
        asset_check_keys=[dg.AssetCheckKey(key, CAUGHT_UP)],
    )
    events = _worker(instance, create_run(instance, location, req))
    assert (
        f"{WHOLE_LOCATION_EVENT}: the run selects checks that are not {TABLE}'s own ({CAUGHT_UP})"
    ) in _texts(events)
    assert started_steps(events)


def test_a_table_job_unlike_the_planned_one_is_never_used(tmp_path, monkeypatch, instance):
    """The guard: if one table's definitions drift from the location's (here a resource the
    location does not have), the run worker loads the whole location."""
    _fleet(tmp_path, monkeypatch, 20)
    location = code_location(instance, REPO)
    run = create_run(instance, location, _sensor_request(instance))
    real = table_job.resources_from_env
    extra = {"extra": dg.ResourceDefinition.none_resource()}
    monkeypatch.setattr(table_job, "resources_from_env", lambda **kw: {**real(**kw), **extra})
    events = _worker(instance, run)
    texts = _texts(events)
    differs = f"{TABLE}'s job differs from the one the run was planned with"
    assert f"{WHOLE_LOCATION_EVENT}: {differs}" in texts
    assert started_steps(events)  # and the run still runs, on the whole location


def test_processes_without_a_run_get_the_whole_location(tmp_path, monkeypatch):
    _fleet(tmp_path, monkeypatch, 12)
    repo = definitions.defs().get_repository_def()
    assert len(repo.assets_defs_by_key) == 24
    assert definitions.defs() is definitions.defs()  # built once per table list


@pytest.mark.slow
def test_the_instance_run_launcher_starts_a_worker_of_one_table(tmp_path, monkeypatch, instance):
    """The daemon's and the UI's way: DefaultRunLauncher -> the code server (a gRPC
    subprocess) -> its run subprocess, which loads `s3rs_assets.definitions` fresh."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import ModuleTarget

    _fleet(tmp_path, monkeypatch, 300)
    target = ModuleTarget("s3rs_assets.definitions", "defs", str(REPO), CODE_LOCATION)
    with WorkspaceProcessContext(instance, target) as ctx:
        workspace = ctx.create_request_context()
        location = workspace.get_code_location(CODE_LOCATION)
        run = create_run(instance, location, _sensor_request(instance))
        instance.launch_run(run.run_id, workspace)
        deadline = time.monotonic() + 240
        while not started_steps(instance.all_logs(run.run_id)):
            assert not instance.get_run_by_id(run.run_id).is_finished, "no step started"
            assert time.monotonic() < deadline, "no step started in time"
            time.sleep(0.5)
        instance.run_launcher.terminate(run.run_id)  # the step would only fail and retry
        while not instance.get_run_by_id(run.run_id).is_finished:
            assert time.monotonic() < deadline, "the run did not stop"
            time.sleep(0.5)
    events = list(instance.all_logs(run.run_id))
    assert f"{ONE_TABLE_EVENT} {TABLE} alone" in _texts(events), _texts(events)
    assert started_steps(events)
