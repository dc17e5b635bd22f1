"""The source's clock: which zone cursor values are written in, and how MySQL is read.

Every MySQL session s3rs opens (pymysql, connectorx, Spark JDBC) is pinned to
`SESSION_TIME_ZONE` (UTC), whatever the server's default or the user's settings: TIMESTAMP
columns then read as UTC instants, DATETIME columns as the wall-clock values they hold, and
keyset comparisons on a TIMESTAMP cursor are exact (no ambiguous local hour).

Cursor values, partition windows and the safety bound are naive wall-clock times of
`S3RS_SOURCE_TIMEZONE` (default UTC). MySQL's clock (NOW(6), in UTC) is turned into that
zone here (`wall_clock`, `bound_wall_clock`) rather than by MySQL, so the server's own zone
cannot move the bound. What the server's zone can still move is the value MySQL stamps
into a DATETIME column (DEFAULT / ON UPDATE CURRENT_TIMESTAMP, NOW() in the application's
statements): source.check_clock compares it with S3RS_SOURCE_TIMEZONE before a run reads.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from s3rs_assets.errors import ConfigError

#: The time_zone of every MySQL session s3rs opens (an offset: needs no time zone tables).
SESSION_TIME_ZONE = "+00:00"
PIN_SQL = f"SET time_zone = '{SESSION_TIME_ZONE}'"
#: Longer than any daylight-saving shift (Troll: 2 h): the reach of `bound_wall_clock`.
_MAX_SHIFT = timedelta(hours=3)


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


def bound_wall_clock(utc: datetime, name: str | None = None) -> datetime:
    """The wall-clock bound below which no row written at or after the instant `utc` can
    be stamped: `wall_clock(utc)`, less the shift when the clocks go back within reach (in
    the repeated hour, rows written later carry earlier wall-clock values)."""
    tz = zone(name)
    at = utc.replace(tzinfo=UTC)
    shift = min(tz.utcoffset(at.astimezone(tz)), tz.utcoffset((at + _MAX_SHIFT).astimezone(tz)))
    return utc + (shift or timedelta(0))
