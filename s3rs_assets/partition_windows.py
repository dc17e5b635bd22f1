"""A table's partitions without Dagster: the keys and windows of the
`TimeWindowPartitionsDefinition` that partitions.py builds (hourly, daily, weekly from
Monday, monthly; `end_offset=1`), computed in plain Python.

Why: commands that only read (`s3rs watermark get/list`, `verify`) need the windows but not
Dagster, whose import alone costs about a second. The assets, sensors and runs keep using
Dagster's definition; `test_partitions` checks that both give the same keys and windows
across zones with daylight-saving changes (skipped and repeated hours, midnights that do
not exist, a skipped day). The object answers the few questions partitions.py asks of a
definition, under the same names, so `window`, `windows` and `key_for` serve both.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

HOURLY_FMT = "%Y-%m-%d-%H:%M"
DAILY_FMT = "%Y-%m-%d"


@dataclass(frozen=True)
class TimeWindow:
    """[start, end) as aware instants in the partitions' zone, like Dagster's."""

    start: datetime
    end: datetime


def _next_reading(size: str, reading: datetime) -> datetime:
    if size == "hourly":
        return reading + timedelta(hours=1)
    if size == "daily":
        return reading + timedelta(days=1)
    if size == "weekly":
        return reading + timedelta(days=7)
    year, month = divmod(reading.month, 12)
    return reading.replace(year=reading.year + year, month=month + 1)


class Irregular(Exception):
    """The zone changes its clocks where this plain version and Dagster's cron iteration
    may not agree (a window start the clocks skip or repeat, other than an hourly start in
    a whole-hour change, e.g. midnight in Santiago, Lord Howe's half hour): callers use
    Dagster's definition instead."""


def _instants(size: str, reading: datetime, tz: ZoneInfo) -> list[datetime]:
    """The instants at which a window starting at the naive wall-clock `reading` starts,
    as Dagster's cron iteration has them: both occurrences of a repeated hourly reading,
    none for an hourly reading the clocks skip; Irregular for anything else."""
    first = reading.replace(tzinfo=tz, fold=0)
    second = reading.replace(tzinfo=tz, fold=1)
    shift = first.utcoffset() - second.utcoffset()  # type: ignore[operator]
    if not shift:
        return [first]
    if size != "hourly" or abs(shift) != timedelta(hours=1):
        raise Irregular(f"{tz.key}: the clocks change at {reading} by {shift}")
    exists = first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == reading
    return [first, second] if exists else []


class PlainPartitions:
    """The partitions of one table: `start` is the naive wall-clock start of the first
    window (partitions.first_window_start), `timezone` the source zone."""

    def __init__(self, size: str, start: datetime, timezone: str) -> None:
        """Raises Irregular (see there) when the windows up to now cannot be trusted to
        equal Dagster's."""
        self.size = size
        self.timezone = timezone
        self.fmt = HOURLY_FMT if size == "hourly" else DAILY_FMT
        self._tz = ZoneInfo(timezone)
        self._reading = start  # the next wall-clock start to turn into instants
        self._starts: list[datetime] = []  # window starts found so far (aware, ascending)
        self._stamps: list[float] = []
        self._keys: list[str] = []
        self._index: dict[str, int] = {}
        self._lock = threading.Lock()
        self._count()

    def _key(self, instant: datetime) -> str:
        local = instant.astimezone(self._tz)
        if self.size == "hourly" and local.fold == 1:  # second of a repeated hour
            return local.strftime(self.fmt + "%z")
        return local.strftime(self.fmt)

    def _extend_past(self, stamp: float) -> None:
        """Find window starts until one lies after `stamp` (so the window holding it is
        known, with its end)."""
        with self._lock:
            while not self._stamps or self._stamps[-1] <= stamp:
                for instant in _instants(self.size, self._reading, self._tz):
                    ts = instant.timestamp()
                    key = self._key(instant)
                    self._index[key] = len(self._keys)
                    self._starts.append(instant.astimezone(self._tz))
                    self._stamps.append(ts)
                    self._keys.append(key)
                self._reading = _next_reading(self.size, self._reading)

    def _count(self) -> int:
        """Windows up to the one open now (end_offset=1)."""
        now = datetime.now(UTC).timestamp()
        self._extend_past(now)
        return bisect.bisect_right(self._stamps, now)

    def get_partition_keys(self) -> list[str]:
        return self._keys[: self._count()]

    def get_first_partition_key(self) -> str | None:
        return self._keys[0] if self._count() else None

    def get_last_partition_key(self) -> str | None:
        n = self._count()
        return self._keys[n - 1] if n else None

    def get_next_partition_key(self, key: str) -> str | None:
        i = self._index.get(key)
        if i is None:
            return None
        return self._keys[i + 1] if i + 1 < self._count() else None

    def time_window_for_partition_key(self, key: str) -> TimeWindow:
        self._count()
        i = self._index.get(key)
        if i is None:
            raise ValueError(f"{key!r} is not a partition key of this table")
        self._extend_past(self._stamps[i])
        return TimeWindow(self._starts[i], self._starts[i + 1])

    def get_partition_key_for_timestamp(self, timestamp: float) -> str:
        """The key of the window holding `timestamp` (the first one's for earlier ones, the
        one after the last for later ones)."""
        self._count()
        timestamp = min(timestamp, self._stamps[-1])
        return self._keys[max(bisect.bisect_right(self._stamps, timestamp) - 1, 0)]
