"""Launching syncs through Dagster from Python (the CLI, the demo, tests). What to launch
is decided in `work.py`.

Runs go through `execute_job` on the job reconstructed from `s3rs_assets.table_job` (the
run's table alone: its start-up does not grow with the fleet), in this process: they are
recorded in the Dagster instance (so they show in the UI with their
metadata), and several tables synced by one command share one SparkSession.

Dagster is imported where a run is executed or the instance opened, not with this module:
`s3rs sync` plans without it and an unchanged table never loads it (test_imports.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from s3rs_assets.errors import ConfigError
from s3rs_assets.partitions import partitions_def
from s3rs_assets.work import SyncPlan

if TYPE_CHECKING:
    import dagster as dg

#: where a run's job is reconstructed from: `sync_job` below (table_job.sync_job, built once
#: per `execute`)
DEFINITIONS_MODULE = "s3rs_assets.runner"
#: tables whose run this process is starting or executing, and their jobs once built:
#: Dagster reconstructs a run's job from its pointer four times per run (to check it, to
#: plan, to run, for the step context), each a full build of the table's assets, checks
#: and job (~50-100 ms). Not definitions.py's `_WHOLE`/`_FOR_RUN`: those hold what Dagster
#: loads as the code location (checked against the table list and environment at each
#: load, which this per-run job need not read); this holds one table's job only while this
#: process executes its run, so a changed configuration is rebuilt at the next run.
_EXECUTING: set[str] = set()
_BUILT: dict[str, Any] = {}


def environment_defaults() -> None:
    """One planned-materialization event per asset for a range run, not one per partition:
    a run over 1,000 partitions then costs ~50 s less on SQLite (Dagster's own switch; the
    UI's webserver and the daemon need it in their environment too: scripts/env.sh sets
    it). Set at import, and again by an `s3rs server` worker taking its client's
    environment."""
    os.environ.setdefault("DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS", "1")


environment_defaults()


def sync_job(table: str) -> dg.JobDefinition:
    """`table_job.sync_job(table)`, built once for a run this process executes (what the
    runs' pointers name: re-executed from the UI, it builds)."""
    job = _BUILT.get(table)
    if job is None:
        from s3rs_assets.table_job import sync_job as build

        job = build(table)
        if table in _EXECUTING:
            _BUILT[table] = job
    return job


def check_home() -> None:
    """DAGSTER_HOME is set (ConfigError otherwise), checked without importing Dagster."""
    if not os.environ.get("DAGSTER_HOME"):
        raise ConfigError(
            "DAGSTER_HOME is not set: point it at the Dagster instance directory the UI uses "
            "(the demo uses .local/dagster_home; `source scripts/env.sh` sets it)"
        )


def instance() -> dg.DagsterInstance:
    check_home()
    import dagster as dg

    return dg.DagsterInstance.get()


def for_threads(inst: dg.DagsterInstance) -> dg.DagsterInstance:
    """Make `inst` safe for runs executed side by side in threads of this process
    (`s3rs sync --parallel`).

    Dagster 1.13 calls `logging.config.dictConfig` at the start of every run, to collect the
    handlers of dagster.yaml's `python_logs.dagster_handler_config`, even when none is
    configured. dictConfig closes every logging handler of the process while holding
    logging's module lock, so a run starting while another thread's run emits an event
    deadlocks: seen here, the starting run held logging's lock waiting for the other run's
    event-log handler, whose thread held it waiting for logging's lock. Without such
    handlers that call yields nothing, so this instance skips it; with them configured,
    side-by-side runs are refused. No public API exists to turn the call off.

    Dagster also captures a run's stdout and stderr for the UI by pointing the process's
    file descriptors 1 and 2 at the run's log file (`dup2`) and starting `tail -F`
    processes that copy it back: process-wide state, so two runs in threads swap each
    other's descriptors. Seen here: the command's later output went into one run's log
    file, its `tail` processes outlived the command and held its stdout open (a caller
    reading that pipe waited for ever), and both runs ended a minute late (62 s spent
    after their checks). Runs in threads capture nothing: their steps' output is the
    command's own, each line naming its table; their events and metadata are stored as
    always (the UI's stdout/stderr tab of such a run is empty).
    """
    if inst.get_python_log_dagster_handler_config():
        raise ConfigError(
            "`s3rs sync --parallel` cannot run with python_logs.dagster_handler_config in "
            "dagster.yaml (Dagster reconfigures logging at every run start, which deadlocks "
            "runs in threads): remove it or sync with --parallel 1"
        )
    inst.get_yaml_python_handlers = lambda: []  # type: ignore[method-assign]
    inst.compute_log_manager.capture_logs = _no_capture  # type: ignore[method-assign]
    return inst


@contextmanager
def _no_capture(log_key: Sequence[str]) -> Iterator[Any]:
    """`ComputeLogManager.capture_logs` that leaves the process's descriptors alone."""
    from dagster._core.storage.compute_log_manager import CapturedLogContext

    yield CapturedLogContext(log_key=log_key)


def execute(
    plan: SyncPlan,
    inst: dg.DagsterInstance,
    limit: int | None = None,
    extra_tags: dict[str, str] | None = None,
    loggers: dict | None = None,
) -> dg.ExecuteJobResult:
    """Run `plan` in this process; `loggers` overrides the run's Dagster loggers config."""
    import dagster as dg

    name = plan.table.name
    _EXECUTING.add(name)
    _BUILT.pop(name, None)  # built afresh for each run: the configuration may have changed
    try:
        return _execute_job(dg, plan, name, inst, limit, extra_tags, loggers)
    finally:
        _EXECUTING.discard(name)
        _BUILT.pop(name, None)


def _execute_job(
    dg: Any,
    plan: SyncPlan,
    name: str,
    inst: dg.DagsterInstance,
    limit: int | None,
    extra_tags: dict[str, str] | None,
    loggers: dict | None,
) -> dg.ExecuteJobResult:
    from s3rs_assets.names import (
        REPOSITORY_LABEL,
        REPOSITORY_TAG,
        asset_key,
        run_tags,
        sync_check_keys,
    )

    # Reconstructable (not the job object itself): execute_job records the run with a
    # pointer to the code, as `dagster job execute` would.
    recon = dg.build_reconstructable_job(
        DEFINITIONS_MODULE,
        "sync_job",
        reconstructable_args=(name,),
        reconstructor_working_directory=os.getcwd(),
    )
    run_config: dict = {}
    if limit is not None and "backup" in plan.stages:
        op = "__".join(asset_key(plan.table, "s3_parquet").path)
        run_config = {"ops": {op: {"config": {"limit": limit}}}}
    if loggers:
        run_config["loggers"] = loggers
    keys = partitions_def(plan.table).get_partition_keys_in_range(
        dg.PartitionKeyRange(plan.start, plan.end)
    )
    tags = {
        **run_tags(plan.table, keys),  # the table and its partitions, as every launcher
        REPOSITORY_TAG: REPOSITORY_LABEL,  # linked to the code location in the UI
        **(extra_tags or {}),
    }
    # Both stages: the whole sync job, whose checks leave out `reconciled` (a full compare).
    # One stage: the job subset to that asset and its sync checks. `execute_job`'s own
    # `asset_selection` would bring back every check of the asset, `reconciled` included
    # (found on a load-only run: a whole-table reconcile against a later bound than the
    # run's, reporting rows the run had not read yet as missing).
    if set(plan.stages) != {"backup", "load"}:
        names = {"backup": "s3_parquet", "load": "redshift_table"}
        assets = {asset_key(plan.table, names[s]) for s in plan.stages}
        recon = recon.get_subset(
            asset_selection=assets,
            asset_check_selection={k for k in sync_check_keys(plan.table) if k.asset_key in assets},
        )
    return dg.execute_job(recon, instance=inst, run_config=run_config, tags=tags)
