"""The code location `s3rs_assets.definitions`: its loader `defs`, built from the table list
(S3RS_TABLES, default tables.yaml).

Up to `names.per_table_jobs` tables, one `<schema>__<table>__sync` job per table; past it
none (each job is resolved against the whole asset graph: N jobs cost N^2), and the
sensors launch runs with an asset selection on Dagster's implicit asset job.

`defs` is a `dg.definitions` loader: the UI, the daemon, the code server and
`dagster job execute` get the whole location (`build_definitions`, built once per table
list and environment in a process). A run worker executing a run of one table gets that
table's definitions alone when they give the run the very job it was planned with
(`table_job.definitions_for_run`): its start-up does not grow with the fleet. A CLI run
reconstructs its table alone too (table_job.py).
"""

from __future__ import annotations

import os
from typing import Any

import dagster as dg
from dagster._core.definitions.definitions_load_context import (
    DefinitionsLoadContext,
    DefinitionsLoadType,
)
from dagster.components.definitions import LazyDefinitions

from s3rs_assets.assets import build_sync_job, build_table_assets
from s3rs_assets.catchup import catchup_job
from s3rs_assets.checks import build_reconcile_schedules
from s3rs_assets.config import TableConfig, load_tables
from s3rs_assets.env_resources import resources_from_env
from s3rs_assets.freshness import build_freshness_checks, build_freshness_schedule
from s3rs_assets.names import per_table_jobs
from s3rs_assets.sensors import build_sensors
from s3rs_assets.table_job import (
    ONE_TABLE_EVENT,
    WHOLE_LOCATION_EVENT,
    definitions_for_run,
    run_being_executed,
    sync_job,
    table_definitions,
)

__all__ = ["build_definitions", "defs", "sync_job", "table_definitions"]


def build_definitions(tables: list[TableConfig] | None = None) -> dg.Definitions:
    """The whole code location (every table), built afresh."""
    tables = load_tables() if tables is None else tables
    jobs = [build_sync_job(t) for t in tables] if per_table_jobs(len(tables)) else []
    return dg.Definitions(
        assets=[a for t in tables for a in build_table_assets(t)],
        asset_checks=build_freshness_checks(tables),  # `caught_up`: lag per table, one op
        jobs=[*jobs, catchup_job],
        sensors=build_sensors(tables, jobs),
        schedules=[*build_reconcile_schedules(tables), *build_freshness_schedule(tables)],
        resources=resources_from_env(tables=tables),
        # Every step of a run in one process: one SparkSession per run, not per step.
        executor=dg.in_process_executor,
    )


#: The whole location last built in this process and what it was built from: Dagster loads
#: a location several times in one process (a run worker: three times). Not runner.py's
#: `_BUILT`: that one holds the job of a run the CLI executes in its own process, for that
#: run only, reconstructed from `runner.sync_job` without loading this location.
_WHOLE: dict[str, Any] = {}
#: The definitions a run worker chose for its run, by run id (one entry per process).
_FOR_RUN: dict[str, dg.Definitions | None] = {}


def whole_location() -> dg.Definitions:
    """`build_definitions()`, again only when the table list or the S3RS_ environment
    (the resources) changed since the last build in this process."""
    tables = load_tables()
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("S3RS_"))
    if _WHOLE.get("tables") != tables or _WHOLE.get("env") != env:
        _WHOLE.clear()
        _WHOLE.update(tables=tables, env=env, defs=build_definitions(tables))
    return _WHOLE["defs"]


def location() -> dg.Definitions:
    """What Dagster gets for the code location in this process (see the module docstring)."""
    reconstructing = DefinitionsLoadContext.get().load_type is DefinitionsLoadType.RECONSTRUCTION
    worker = run_being_executed() if reconstructing else None
    if worker is None:  # the UI, the daemon, the code server: never less than the fleet
        return whole_location()
    run_id = worker.run.run_id
    if run_id not in _FOR_RUN:
        reduced, what = definitions_for_run(worker)
        _FOR_RUN.clear()
        _FOR_RUN[run_id] = reduced
        text = (
            f"{ONE_TABLE_EVENT} {what} alone"
            if reduced is not None
            else f"{WHOLE_LOCATION_EVENT}: {what}"
        )
        worker.instance.report_engine_event(text, worker.run)
    return _FOR_RUN[run_id] or whole_location()


#: Dagster's loader of the location; the whole location as an object is `whole_location()`.
defs = LazyDefinitions(load_fn=location, has_context_arg=False)
