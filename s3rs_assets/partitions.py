"""Partitions: time windows of each table's cursor column, the current open window included.

`partition:` in tables.yaml picks Dagster's own definition: hourly, daily, weekly (weeks
start on Monday) or monthly. The first window starts at or before `start`, aligned to the
size, so no row after `start` falls outside every partition.

Windows are real instants (Dagster's, in `S3RS_SOURCE_TIMEZONE`), but the cursor column
holds wall-clock values (a DATETIME has no offset), so each window is turned into the
[start, end) of wall-clock values it holds (`clock.edge_reading`). Across a daylight-saving change:

* the skipped spring hour (02:00-03:00 in New York on 2024-03-10) is no real instant, yet a
  DATETIME can hold it: it belongs to the window before the gap (`...-01:00` spans the wall
  clock [01:00, 03:00));
* the repeated autumn hour (01:00-02:00 in New York on 2024-11-03) is two real hours, and
  Dagster has a partition for each (`2024-11-03-01:00` and `2024-11-03-01:00-0500`). A
  DATETIME in it cannot say which of the two it was, so it is read as the first (summer
  time): every row of the repeated hour belongs to the first partition, and the second one
  is a window of no wall-clock time, [02:00, 02:00), always complete and empty.

So the wall-clock windows of consecutive partitions are contiguous and never overlap, and
every value has exactly one partition (`key_for`).
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from s3rs_assets.clock import edge_reading, instant_of, source_timezone
from s3rs_assets.config import TableConfig
from s3rs_assets.partition_windows import Irregular, PlainPartitions

if TYPE_CHECKING:
    import dagster as dg


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


@functools.lru_cache(maxsize=1024)
def _shared(partition: str, start: datetime, tz: str) -> dg.TimeWindowPartitionsDefinition:
    """One definition object per shape (size, first window, zone), shared by every table of
    that shape: a fleet of 2,000 daily tables starting on a few dates holds a few objects,
    and Dagster compares and serializes each distinct one once."""
    import dagster as dg  # here: reading commands use time_windows() and skip Dagster

    # end_offset=1 adds the window that is still open, so today's rows are synced today.
    if partition == "hourly":
        return dg.HourlyPartitionsDefinition(start_date=start, end_offset=1, timezone=tz)
    if partition == "weekly":
        return dg.WeeklyPartitionsDefinition(
            start_date=start, end_offset=1, timezone=tz, day_offset=1
        )
    if partition == "monthly":
        return dg.MonthlyPartitionsDefinition(start_date=start, end_offset=1, timezone=tz)
    return dg.DailyPartitionsDefinition(start_date=start, end_offset=1, timezone=tz)


def _cached(table: TableConfig, tz: str) -> dg.TimeWindowPartitionsDefinition:
    return _shared(table.partition, first_window_start(table), tz)


def partitions_def(table: TableConfig) -> dg.TimeWindowPartitionsDefinition:
    """The table's partitions (one definition object per shape and time zone)."""
    return _cached(table, source_timezone())


@functools.lru_cache(maxsize=1024)
def _plain_shape(partition: str, start: datetime, tz: str) -> Any:
    try:
        return PlainPartitions(partition, start, tz)
    except Irregular:
        return _shared(partition, start, tz)


def _plain(table: TableConfig, tz: str) -> Any:
    return _plain_shape(table.partition, first_window_start(table), tz)


def time_windows(table: TableConfig) -> Any:
    """The same partitions as `partitions_def`, for `window`, `windows`, `key_for` and
    `partition_keys`, without importing Dagster (partition_windows.py) unless the zone's
    clock changes make only Dagster's own answer trustworthy. For code that only reads
    windows (the CLI's reading commands, watermark edits); assets and sensors take
    `partitions_def`."""
    return _plain(table, source_timezone())


def _zone(pdef: dg.TimeWindowPartitionsDefinition) -> ZoneInfo:
    return ZoneInfo(pdef.timezone or "UTC")


def window(pdef: dg.TimeWindowPartitionsDefinition, key: str) -> tuple[datetime, datetime]:
    """[start, end) of a partition as naive wall-clock values in the source time zone (see
    the module docstring for the daylight-saving changes)."""
    w = pdef.time_window_for_partition_key(key)
    tz = _zone(pdef)
    return edge_reading(w.start, tz), edge_reading(w.end, tz)


def key_for(pdef: dg.TimeWindowPartitionsDefinition, ts: datetime) -> str | None:
    """The partition whose wall-clock window holds the naive source-time `ts`, or None
    outside every partition."""
    tz = _zone(pdef)
    naive = ts if ts.tzinfo is None else ts.astimezone(tz).replace(tzinfo=None)
    key = pdef.get_partition_key_for_timestamp(instant_of(naive, tz).timestamp())
    first, last = pdef.get_first_partition_key(), pdef.get_last_partition_key()
    if first is None or last is None or key < first or key > last:
        return None  # keys of one definition sort like their windows
    start, end = window(pdef, key)
    while naive >= end:  # a window of no wall-clock time (the second of a repeated hour)
        nxt = pdef.get_next_partition_key(key)
        if nxt is None:
            return None
        key = nxt
        start, end = window(pdef, key)
    return key if start <= naive else None


def partition_keys(table: TableConfig) -> list[str]:
    return time_windows(table).get_partition_keys()


def _key_instant(pdef: dg.TimeWindowPartitionsDefinition, key: str, tz: ZoneInfo) -> datetime:
    """The instant a partition starts, parsed from its key: Dagster names the second of two
    windows starting at the same reading with its offset (`2024-11-03-01:00-0500`)."""
    try:
        return datetime.strptime(key, pdef.fmt).replace(tzinfo=tz)
    except ValueError:
        return datetime.strptime(key, pdef.fmt + "%z")


def windows(
    pdef: dg.TimeWindowPartitionsDefinition, keys: list[str] | None = None
) -> list[tuple[str, datetime, datetime]]:
    """(key, start, end) of consecutive partitions (default: all of them), oldest first, as
    wall-clock values like `window`.

    Parsed from the keys (each window ends where the next begins): 20 years of days cost
    milliseconds, where asking Dagster for each window costs half a second."""
    keys = pdef.get_partition_keys() if keys is None else keys
    if not keys:
        return []
    tz = _zone(pdef)
    starts = [edge_reading(_key_instant(pdef, k, tz), tz) for k in keys]
    ends = starts[1:] + [window(pdef, keys[-1])[1]]
    return list(zip(keys, starts, ends, strict=True))
