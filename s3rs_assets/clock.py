"""The source's clock: which zone cursor values are written in, and how MySQL is read.

Every MySQL session s3rs opens (pymysql, connectorx, Spark JDBC) is pinned to
`SESSION_TIME_ZONE` (UTC), whatever the server's default or the user's settings: TIMESTAMP
columns then read as UTC instants, DATETIME columns as the wall-clock values they hold, and
keyset comparisons on a TIMESTAMP cursor are exact (no ambiguous local hour).

Cursor values, partition windows and the safety bound are naive wall-clock times of
`S3RS_SOURCE_TIMEZONE` (default UTC). MySQL's clock (NOW(6), in UTC) is turned into that
zone here (`wall_clock`, `lowest_reading_from`) rather than by MySQL, so the server's own zone
cannot move the bound. What the server's zone can still move is the value MySQL stamps
into a DATETIME column (DEFAULT / ON UPDATE CURRENT_TIMESTAMP, NOW() in the application's
statements): source.check_clock compares it with S3RS_SOURCE_TIMEZONE before a run reads.
"""

from __future__ import annotations

import math
import os
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from s3rs_assets.errors import ConfigError

#: The time_zone of every MySQL session s3rs opens (an offset: needs no time zone tables).
SESSION_TIME_ZONE = "+00:00"
PIN_SQL = f"SET time_zone = '{SESSION_TIME_ZONE}'"


def source_timezone() -> str:
    """The time zone the cursor column's values are written in (S3RS_SOURCE_TIMEZONE)."""
    return os.environ.get("S3RS_SOURCE_TIMEZONE", "UTC")


def zone(name: str | None = None) -> ZoneInfo:
    name = name or source_timezone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"S3RS_SOURCE_TIMEZONE={name!r} is not a time zone (use an IANA name such as "
            "UTC or Europe/Berlin)"
        ) from None


def is_utc(name: str | None = None) -> bool:
    """True when the zone is UTC all year (UTC, Etc/UTC, GMT, ...)."""
    tz = zone(name)
    return all(tz.utcoffset(t) == timedelta(0) for t in sample_instants())


#: Offsets that name UTC (Spark and Java accept them as zones; zoneinfo does not).
_UTC_OFFSETS = ("Z", "+00:00", "-00:00", "UTC+00:00", "GMT+00:00")


def names_utc(name: str | None) -> bool:
    """True for a zone name or offset that is UTC all year ("UTC", "Etc/GMT", "Z",
    "+00:00"); False for any other, an unknown name or None included."""
    if not name:
        return False
    if name.strip().upper() in _UTC_OFFSETS:
        return True
    try:
        return is_utc(name)
    except ConfigError:
        return False


def sample_instants(now: datetime | None = None) -> list[datetime]:
    """Naive UTC instants that tell zones apart: now and the middle of every month of this
    year (so zones differing only in daylight-saving rules differ in some sample)."""
    now = now or datetime.now(UTC).replace(tzinfo=None)
    return [now.replace(microsecond=0)] + [datetime(now.year, m, 15, 12) for m in range(1, 13)]


def offsets(name: str, instants: list[datetime]) -> list[timedelta]:
    tz = zone(name)
    return [tz.utcoffset(t.replace(tzinfo=UTC).astimezone(tz)) or timedelta(0) for t in instants]


def wall_clock(utc: datetime, name: str | None = None) -> datetime:
    """A naive UTC instant as the naive wall-clock time of the source zone."""
    return utc.replace(tzinfo=UTC).astimezone(zone(name)).replace(tzinfo=None)


# ------------------------------------------------------------------ wall clock and instants
# A DATETIME cursor holds a wall-clock reading of S3RS_SOURCE_TIMEZONE, no offset. Around a
# daylight-saving change a reading is skipped (spring) or repeated (autumn); these functions
# are the one place that maps between readings and real instants.


def _offset_change(lo: datetime, hi: datetime, tz: ZoneInfo) -> datetime:
    """The first instant of (lo, hi] (UTC, aware) whose UTC offset differs from lo's (the
    offset changes once in between), to the second."""
    before = lo.astimezone(tz).utcoffset()
    a, b = math.floor(lo.timestamp()), math.ceil(hi.timestamp())
    while b - a > 1:
        mid = (a + b) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == before:
            a = mid
        else:
            b = mid
    return datetime.fromtimestamp(b, UTC)


def edge_reading(instant: datetime, tz: ZoneInfo) -> datetime:
    """The wall-clock bound of a window edge at `instant`: the smallest wall-clock value
    whose (first) instant is not before it. That is the clock reading, except inside the
    second occurrence of a repeated hour, whose values all belong to the first: there the
    end of the repeated interval (the reading just before the clocks went back)."""
    local = instant.astimezone(tz)
    if local.fold == 0:  # zoneinfo marks the second occurrence of an ambiguous reading
        return local.replace(tzinfo=None)
    first = local.replace(tzinfo=None).replace(tzinfo=tz, fold=0)
    change = _offset_change(first.astimezone(UTC), instant.astimezone(UTC), tz)
    return (change + first.utcoffset()).replace(tzinfo=None)


def instant_of(ts: datetime, tz: ZoneInfo) -> datetime:
    """The real instant a naive wall-clock value stands for: the first of two in a repeated
    hour; for a value in a skipped hour, the instant just as far past the hour before the
    gap (so it falls in the window before the gap, as `edge_reading` has it)."""
    aware = ts.replace(tzinfo=tz, fold=0)
    if aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != ts:  # in a gap
        aware = ts.replace(tzinfo=tz, fold=1)
    return aware


#: Longer than any step back of a clock (one hour in most zones, 30 minutes on Lord Howe).
_LOOKAHEAD = timedelta(hours=3)


def lowest_reading_from(instant: datetime, tz: ZoneInfo) -> datetime:
    """The lowest wall-clock reading from `instant` (aware) on: the reading itself, except in
    the first occurrence of a repeated hour, where the clocks will go back to the start of
    it. A bound on wall-clock cursors must not pass that, or rows written in the second
    occurrence land below a cursor that already passed them."""
    here = instant.astimezone(tz)
    ahead = (instant + _LOOKAHEAD).astimezone(tz)
    reading = here.replace(tzinfo=None)
    if ahead.utcoffset() >= here.utcoffset():
        return reading  # the clocks do not go back in the next hours
    change = _offset_change(instant.astimezone(UTC), (instant + _LOOKAHEAD).astimezone(UTC), tz)
    return min(reading, (change + ahead.utcoffset()).replace(tzinfo=None))
