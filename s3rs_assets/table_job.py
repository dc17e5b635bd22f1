"""One table's definitions alone: what `runner.execute` reconstructs for a run.

A run of one table builds that table's assets, checks and sync job and nothing else, so its
fixed cost does not grow with the fleet: `s3rs sync -t t` starts as fast with 2,000 tables
configured as with 10 (the table list is parsed once per file version, config.py). The
whole code location (definitions.py) is what the UI, the daemon and the sensors load.
"""

from __future__ import annotations

import dagster as dg

from s3rs_assets import catchup
from s3rs_assets.assets import build_sync_job, build_table_assets
from s3rs_assets.config import find_table, load_tables
from s3rs_assets.env_resources import resources_from_env
from s3rs_assets.names import job_name


def table_definitions(table: str) -> dg.Definitions:
    """The Definitions of one configured table (`schema.table`)."""
    cfg = find_table(load_tables(), table)
    return dg.Definitions(
        assets=build_table_assets(cfg),
        jobs=[build_sync_job(cfg)],
        resources=resources_from_env(),
        # Every step of a run in one process: one SparkSession per run, not per step.
        executor=dg.in_process_executor,
    )


def sync_job(table: str) -> dg.JobDefinition:
    """The resolved `<schema>__<table>__sync` job, for `dg.build_reconstructable_job`."""
    return table_definitions(table).resolve_job_def(job_name(table))


def catchup_job() -> dg.JobDefinition:
    """The `s3rs_catchup` job bound to its resources alone, for `dg.build_reconstructable_job`."""
    return dg.Definitions(
        jobs=[catchup.catchup_job],
        resources=resources_from_env(),
        executor=dg.in_process_executor,
    ).resolve_job_def(catchup.JOB_NAME)
