"""A code location of many tables (issue 18): costs counted, not timed.

No database: the definitions are built from a generated tables.yaml, the sensor is
evaluated against an ephemeral Dagster instance with a runless materialization.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.definitions.op_definition import OpDefinition
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)

from s3rs_assets import config
from s3rs_assets.checks import RECONCILE_ALL_SCHEDULE
from s3rs_assets.names import (
    ASSET_JOB,
    BACKUP_CHECK_NAME,
    CHECK_NAME,
    STAGE_CHAIN,
    TABLE_JOBS_MAX_ENV,
    asset_key,
    job_name,
)

SCHEMAS = 5


def write_fleet(path: Path, n: int) -> Path:
    """`n` tables in `SCHEMAS` schemas; every tenth one of another partition size."""
    sizes = ["daily", "hourly", "weekly", "monthly"]
    lines = ["tables:"]
    for i in range(n):
        size = sizes[(i // 10) % 4] if i % 10 == 0 else "daily"
        lines += [
            f"  - name: fleet_s{i % SCHEMAS}.t{i:04d}",
            f"    partition: {size}",
            "    start: '2024-01-01'",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def counts(monkeypatch) -> Counter:
    """Op definitions built and asset jobs resolved while the test runs."""
    seen: Counter = Counter()
    op_init, resolve = OpDefinition.__init__, UnresolvedAssetJobDefinition.resolve

    def counting_init(self, *args, **kwargs):
        seen["ops"] += 1
        op_init(self, *args, **kwargs)

    def counting_resolve(self, *args, **kwargs):
        seen["resolutions"] += 1
        return resolve(self, *args, **kwargs)

    monkeypatch.setattr(OpDefinition, "__init__", counting_init)
    monkeypatch.setattr(UnresolvedAssetJobDefinition, "resolve", counting_resolve)
    return seen


def _one_table_run_costs(tmp_path, monkeypatch, counts: Counter, n: int) -> Counter:
    monkeypatch.setenv("S3RS_TABLES", str(write_fleet(tmp_path / f"fleet{n}.yaml", n)))
    from s3rs_assets.table_job import sync_job

    counts.clear()
    job = sync_job("fleet_s3.t0003")
    assert job.name == job_name("fleet_s3.t0003")
    assert {k for k in job.asset_layer.asset_graph.get_all_asset_keys()} == {
        asset_key("fleet_s3.t0003", "s3_parquet"),
        asset_key("fleet_s3.t0003", "redshift_table"),
    }
    return Counter(counts)


def test_a_one_table_run_builds_the_same_whatever_the_fleet(tmp_path, monkeypatch, counts):
    """What `runner.execute` reconstructs: one table's ops and one job, 10 or 300 tables."""
    small = _one_table_run_costs(tmp_path, monkeypatch, counts, 10)
    large = _one_table_run_costs(tmp_path, monkeypatch, counts, 300)
    assert small == large
    assert small["resolutions"] == 1
    assert small["ops"] <= 5  # two assets, three checks


def _location(tmp_path, monkeypatch, n: int) -> dg.RepositoryDefinition:
    monkeypatch.setenv("S3RS_TABLES", str(write_fleet(tmp_path / f"loc{n}.yaml", n)))
    from s3rs_assets.definitions import build_definitions

    return build_definitions().get_repository_def()


def test_past_the_threshold_no_job_grows_with_the_fleet(tmp_path, monkeypatch, counts):
    """Jobs resolved against the whole graph: a constant number, not one per table."""
    monkeypatch.setenv(TABLE_JOBS_MAX_ENV, "5")
    resolved = []
    for n in (10, 300):
        counts.clear()
        repo = _location(tmp_path, monkeypatch, n)
        names = {j.name for j in repo.get_all_jobs()}
        resolved.append(counts["resolutions"])
        assert ASSET_JOB in names
        assert not any(name.endswith("__sync") for name in names)
        # one reconcile schedule for the fleet, and the `caught_up` checks' schedule
        assert sorted(s.name for s in repo.schedule_defs) == sorted(
            [RECONCILE_ALL_SCHEDULE, "s3rs_caught_up_schedule"])
        assert len(repo.assets_defs_by_key) == 2 * n
        # the UI's groups: one per MySQL schema, not one per table
        groups = {a.group_names_by_key[k] for k, a in repo.assets_defs_by_key.items()}
        assert groups == {f"fleet_s{i}" for i in range(SCHEMAS)}
    assert resolved[0] == resolved[1]


def test_under_the_threshold_each_table_keeps_its_sync_job(tmp_path, monkeypatch):
    repo = _location(tmp_path, monkeypatch, 3)
    names = {j.name for j in repo.get_all_jobs()}
    assert {job_name(f"fleet_s{i}.t{i:04d}") for i in range(3)} <= names
    assert len(repo.schedule_defs) == 3 + 1  # a reconcile schedule per table, caught_up


def test_tables_sharing_a_shape_share_their_partitions(tmp_path, monkeypatch):
    from s3rs_assets.partitions import partitions_def

    tables = config.load_tables(write_fleet(tmp_path / "shape.yaml", 40))
    pdefs = {id(partitions_def(t)) for t in tables}
    assert len(pdefs) == 4  # daily, hourly, weekly, monthly


def test_the_table_list_is_parsed_once_per_file_version(tmp_path, monkeypatch):
    path = write_fleet(tmp_path / "cached.yaml", 20)
    parsed = Counter()
    real = config._parse_tables

    def counting(p):
        parsed["n"] += 1
        return real(p)

    monkeypatch.setattr(config, "_parse_tables", counting)
    first = config.load_tables(path)
    assert config.load_tables(path) == first
    assert parsed["n"] == 1
    write_fleet(path, 21)  # a new version of the file: read again
    assert len(config.load_tables(path)) == 21
    assert parsed["n"] == 2


def test_a_sensor_request_for_one_table_among_many_selects_that_table(tmp_path, monkeypatch):
    """Past the threshold the stage chain sends one table's load to the implicit asset job
    with that table's asset and its sync check only (not `reconciled`)."""
    monkeypatch.setenv(TABLE_JOBS_MAX_ENV, "5")
    repo = _location(tmp_path, monkeypatch, 300)
    changed = "fleet_s2.t0042"
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(
            dg.AssetMaterialization(asset_key(changed, "s3_parquet"), partition="2024-02-01")
        )
        sensor = repo.get_sensor_def(STAGE_CHAIN)
        ctx = dg.build_sensor_context(instance=instance, repository_def=repo)
        result = sensor.evaluate_tick(ctx)
    assert len(result.run_requests) == 1
    req = result.run_requests[0]
    assert req.job_name == ASSET_JOB
    assert req.asset_selection == [asset_key(changed, "redshift_table")]
    assert req.asset_check_keys == [
        dg.AssetCheckKey(asset_key(changed, "redshift_table"), CHECK_NAME)
    ]
    assert BACKUP_CHECK_NAME not in {k.name for k in req.asset_check_keys}
    assert req.partition_key == "2024-02-01"
