"""The Definitions object, built from the table list (S3RS_TABLES, default tables.yaml)."""

from __future__ import annotations

import dagster as dg

from s3rs_assets.assets import build_sync_job, build_table_assets
from s3rs_assets.catchup import catchup_job
from s3rs_assets.checks import build_reconcile_schedules
from s3rs_assets.config import load_tables
from s3rs_assets.env_resources import resources_from_env
from s3rs_assets.freshness import build_freshness_checks
from s3rs_assets.names import job_name
from s3rs_assets.sensors import build_sensors


def build_definitions() -> dg.Definitions:
    tables = load_tables()
    jobs = [build_sync_job(t) for t in tables]
    return dg.Definitions(
        assets=[a for t in tables for a in build_table_assets(t)],
        asset_checks=build_freshness_checks(tables),  # `caught_up`: lag per table, one op
        jobs=[*jobs, catchup_job],
        sensors=build_sensors(tables, jobs),
        schedules=build_reconcile_schedules(tables),
        resources=resources_from_env(),
        # Every step of a run in one process: one SparkSession per run, not per step.
        executor=dg.in_process_executor,
    )


defs = build_definitions()


def sync_job(table: str) -> dg.JobDefinition:
    """The resolved `<schema>__<table>__sync` job, for `dg.build_reconstructable_job`."""
    return defs.resolve_job_def(job_name(table))

