"""Sensors: the watermark guard, stage chaining and new-data syncs (never Spark).

Three sensors, built by `build_sensors(tables)` from the table list. They talk to MySQL
through pymysql (`MySQLResource.connect`), to S3 through boto3 and to Dagster through the
instance; none of them imports pyspark, so a daemon tick costs milliseconds, not a JVM.
Each one ends in a `SkipReason` that names what it checked, so the UI shows why nothing ran.

* `guard.py`: `s3rs_watermark_guard`, validates and restores every watermark;
* `chain.py`: `s3rs_stage_chain`, loads what the backups materialized;
* `new_data.py`: `s3rs_new_data`, syncs tables with rows past the watermark.
"""


from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dagster as dg

from s3rs_assets.config import TableConfig
from s3rs_assets.sensors.chain import build_stage_chain_sensor, jobs_by_name
from s3rs_assets.sensors.guard import build_watermark_guard
from s3rs_assets.sensors.new_data import build_new_data_sensor


def build_sensors(
    tables: Sequence[TableConfig],
    jobs: Sequence[Any] | None = None,
    *,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> list[dg.SensorDefinition]:
    """The three sensors for `tables`.

    `jobs` are the `<schema>__<table>__sync` jobs given to `Definitions` (the same objects:
    Dagster refuses two definitions of one job name); missing ones are built here, and
    Definitions picks up a sensor's jobs by itself. `default_status` applies to the two
    sensors that launch runs; the watermark guard only repairs and reports, so it runs by
    default.
    """
    tables = list(tables)
    sync_jobs = jobs_by_name(tables, jobs)
    return [
        build_watermark_guard(tables),
        build_stage_chain_sensor(tables, sync_jobs, default_status),
        build_new_data_sensor(tables, sync_jobs, default_status),
    ]
