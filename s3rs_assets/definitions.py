"""The Definitions object, built from the table list (S3RS_TABLES, default tables.yaml).

Up to `names.per_table_jobs` tables, one `<schema>__<table>__sync` job per table; past it
none (each job is resolved against the whole asset graph: N jobs cost N^2), and the
sensors launch runs with an asset selection on Dagster's implicit asset job. A CLI run
reconstructs its table alone (table_job.py).
"""

from __future__ import annotations

import dagster as dg

from s3rs_assets.assets import build_sync_job, build_table_assets
from s3rs_assets.catchup import catchup_job
from s3rs_assets.checks import build_reconcile_schedules
from s3rs_assets.config import load_tables
from s3rs_assets.env_resources import resources_from_env
from s3rs_assets.freshness import build_freshness_checks, build_freshness_schedule
from s3rs_assets.names import per_table_jobs
from s3rs_assets.sensors import build_sensors
from s3rs_assets.table_job import sync_job, table_definitions

__all__ = ["build_definitions", "defs", "sync_job", "table_definitions"]


def build_definitions() -> dg.Definitions:
    tables = load_tables()
    jobs = [build_sync_job(t) for t in tables] if per_table_jobs(len(tables)) else []
    return dg.Definitions(
        assets=[a for t in tables for a in build_table_assets(t)],
        asset_checks=build_freshness_checks(tables),  # `caught_up`: lag per table, one op
        jobs=[*jobs, catchup_job],
        sensors=build_sensors(tables, jobs),
        schedules=[*build_reconcile_schedules(tables), *build_freshness_schedule(tables)],
        resources=resources_from_env(),
        # Every step of a run in one process: one SparkSession per run, not per step.
        executor=dg.in_process_executor,
    )


defs = build_definitions()
