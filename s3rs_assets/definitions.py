"""The Definitions object, built from the table list (S3RS_TABLES, default tables.yaml)."""

from __future__ import annotations

import os

import dagster as dg

from s3rs_assets.assets import build_sync_job, build_table_assets
from s3rs_assets.checks import build_reconcile_schedules
from s3rs_assets.config import load_tables
from s3rs_assets.io_manager import S3RSIOManager
from s3rs_assets.names import job_name
from s3rs_assets.resources import (
    DEFAULT_JDBC_JARS,
    MySQLResource,
    S3Resource,
    SparkResource,
    spark_defaults,
)
from s3rs_assets.sensors import build_sensors
from s3rs_assets.warehouse import WarehouseResource


def build_definitions() -> dg.Definitions:
    tables = load_tables()
    s3 = S3Resource(
        bucket=dg.EnvVar("S3RS_S3_BUCKET"),
        prefix=os.environ.get("S3RS_S3_PREFIX", "s3rs"),
    )
    jobs = [build_sync_job(t) for t in tables]
    return dg.Definitions(
        assets=[a for t in tables for a in build_table_assets(t)],
        jobs=jobs,
        sensors=build_sensors(tables, jobs),
        schedules=build_reconcile_schedules(tables),
        resources={
            "mysql": MySQLResource(url=dg.EnvVar("S3RS_MYSQL_URL")),
            "s3": s3,
            "spark": SparkResource(
                spark_config=spark_defaults(
                    os.environ.get("S3RS_SPARK_MASTER", "local[*]"),
                    os.environ.get("S3RS_SPARK_JARS", DEFAULT_JDBC_JARS),
                )
            ),
            "warehouse": WarehouseResource(
                url=dg.EnvVar("S3RS_REDSHIFT_URL"),
                iam_role=os.environ.get("S3RS_REDSHIFT_IAM_ROLE") or None,
            ),
            "s3rs_io_manager": S3RSIOManager(s3=s3),
        },
        # Every step of a run in one process: one SparkSession per run, not per step.
        executor=dg.in_process_executor,
    )


defs = build_definitions()


def sync_job(table: str) -> dg.JobDefinition:
    """The resolved `<schema>__<table>__sync` job, for `dg.build_reconstructable_job`."""
    return defs.resolve_job_def(job_name(table))

