"""Partitions: time windows of each table's cursor column, the current open window included."""

from __future__ import annotations

import os
from datetime import datetime

import dagster as dg

from s3rs_assets.config import TableConfig

FMT = {"daily": "%Y-%m-%d", "hourly": "%Y-%m-%d-%H:%M"}


def source_timezone() -> str:
    """The time zone the cursor column's values are written in (S3RS_SOURCE_TIMEZONE)."""
    return os.environ.get("S3RS_SOURCE_TIMEZONE", "UTC")


def partitions_def(table: TableConfig) -> dg.TimeWindowPartitionsDefinition:
    # end_offset=1 adds the window that is still open, so today's rows are synced today.
    tz = source_timezone()
    if table.partition == "hourly":
        start = table.start.replace(minute=0, second=0, microsecond=0)
        return dg.HourlyPartitionsDefinition(start_date=start, end_offset=1, timezone=tz)
    start = table.start.replace(hour=0, minute=0, second=0, microsecond=0)
    return dg.DailyPartitionsDefinition(start_date=start, end_offset=1, timezone=tz)


def window(pdef: dg.TimeWindowPartitionsDefinition, key: str) -> tuple[datetime, datetime]:
    """[start, end) of a partition as naive datetimes in the source time zone."""
    w = pdef.time_window_for_partition_key(key)
    return w.start.replace(tzinfo=None), w.end.replace(tzinfo=None)


def partition_keys(table: TableConfig) -> list[str]:
    return partitions_def(table).get_partition_keys()
