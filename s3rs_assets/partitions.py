"""Partitions: time windows of each table's cursor column, the current open window included.

`partition:` in tables.yaml picks Dagster's own definition: hourly, daily, weekly (weeks
start on Monday) or monthly. The first window starts at or before `start`, aligned to the
size, so no row after `start` falls outside every partition.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import dagster as dg

from s3rs_assets.clock import source_timezone
from s3rs_assets.config import TableConfig


def first_window_start(table: TableConfig) -> datetime:
    """`start` rounded down to the partition size."""
    s = table.start
    if table.partition == "hourly":
        return s.replace(minute=0, second=0, microsecond=0)
    day = s.replace(hour=0, minute=0, second=0, microsecond=0)
    if table.partition == "weekly":
        return day - timedelta(days=day.weekday())
    if table.partition == "monthly":
        return day.replace(day=1)
    return day


@functools.lru_cache(maxsize=256)
def _cached(table: TableConfig, tz: str) -> dg.TimeWindowPartitionsDefinition:
    start = first_window_start(table)
    # end_offset=1 adds the window that is still open, so today's rows are synced today.
    if table.partition == "hourly":
        return dg.HourlyPartitionsDefinition(start_date=start, end_offset=1, timezone=tz)
    if table.partition == "weekly":
        return dg.WeeklyPartitionsDefinition(
            start_date=start, end_offset=1, timezone=tz, day_offset=1
        )
    if table.partition == "monthly":
        return dg.MonthlyPartitionsDefinition(start_date=start, end_offset=1, timezone=tz)
    return dg.DailyPartitionsDefinition(start_date=start, end_offset=1, timezone=tz)


def partitions_def(table: TableConfig) -> dg.TimeWindowPartitionsDefinition:
    """The table's partitions (one definition object per table and time zone)."""
    return _cached(table, source_timezone())


def window(pdef: dg.TimeWindowPartitionsDefinition, key: str) -> tuple[datetime, datetime]:
    """[start, end) of a partition as naive datetimes in the source time zone."""
    w = pdef.time_window_for_partition_key(key)
    return w.start.replace(tzinfo=None), w.end.replace(tzinfo=None)


def key_for(pdef: dg.TimeWindowPartitionsDefinition, ts: datetime) -> str | None:
    """The partition holding the naive source-time `ts`, or None outside every partition."""
    aware = ts.replace(tzinfo=ZoneInfo(pdef.timezone)) if ts.tzinfo is None else ts
    key = pdef.get_partition_key_for_timestamp(aware.timestamp())
    first, last = pdef.get_first_partition_key(), pdef.get_last_partition_key()
    if first is None or last is None or key < first or key > last:
        return None  # keys of one definition sort like their windows
    return key


def partition_keys(table: TableConfig) -> list[str]:
    return partitions_def(table).get_partition_keys()


def windows(
    pdef: dg.TimeWindowPartitionsDefinition, keys: list[str] | None = None
) -> list[tuple[str, datetime, datetime]]:
    """(key, start, end) of consecutive partitions (default: all of them), oldest first.

    Parsed from the keys (each window ends where the next begins): 20 years of days cost
    milliseconds, where asking Dagster for each window costs half a second."""
    keys = pdef.get_partition_keys() if keys is None else keys
    if not keys:
        return []
    starts = [datetime.strptime(k, pdef.fmt) for k in keys]
    ends = starts[1:] + [window(pdef, keys[-1])[1]]
    return list(zip(keys, starts, ends, strict=True))
