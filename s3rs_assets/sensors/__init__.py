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
from s3rs_assets.names import per_table_jobs
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

    Past `names.per_table_jobs` there are no per-table jobs: the two launching sensors
    target every asset instead, and Dagster sends their run requests (each with its
    table's asset and check selection, sensors/common.py) to the implicit asset job.
    """
    tables = list(tables)
    if per_table_jobs(len(tables)):
        sync_jobs = jobs_by_name(tables, jobs)
        return [
            build_watermark_guard(tables),
            build_stage_chain_sensor(tables, sync_jobs, default_status),
            build_new_data_sensor(tables, sync_jobs, default_status),
        ]
    return [
        build_watermark_guard(tables),
        _on_assets(build_stage_chain_sensor(tables, [], default_status)),
        _on_assets(build_new_data_sensor(tables, [], default_status)),
    ]


def _on_assets(sensor: dg.SensorDefinition) -> dg.SensorDefinition:
    """`sensor` targeting every asset rather than jobs. Dagster's `with_attributes` can
    only replace jobs, so this is the same copy with `asset_selection` set."""
    return dg.SensorDefinition.dagster_internal_init(
        name=sensor.name,
        evaluation_fn=sensor._raw_fn,  # noqa: SLF001 (as with_attributes does)
        minimum_interval_seconds=sensor.minimum_interval_seconds,
        description=sensor.description,
        job_name=None,
        jobs=None,
        job=None,
        default_status=sensor.default_status,
        asset_selection=dg.AssetSelection.all(),
        required_resource_keys=sensor._raw_required_resource_keys,  # noqa: SLF001
        tags=sensor.tags,
        metadata=sensor.metadata,
        target=None,
        owners=sensor.owners,
    )
