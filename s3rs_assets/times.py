"""Durations and timestamps as operators and tables.yaml write them, parsed in one place.

Durations (`lag: 5m`, `--older-than 7d`) and relative times (`--timestamp 1week`) share one
unit table; months are calendar months and only make sense relative to a date, so a `lag`
cannot be given in months.
"""

from __future__ import annotations

import calendar
import math
import os
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from s3rs_assets.errors import ConfigError
from s3rs_assets.watermark import iso

_ABSOLUTE_FORMATS = (
    "%Y-%m-%d %H:%M:%S.%f",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S.%f",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
)
_RELATIVE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]+)\s*(?:ago)?\s*$")
_UNITS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), timedelta(seconds=1)),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), timedelta(minutes=1)),
    **dict.fromkeys(("h", "hr", "hour", "hours"), timedelta(hours=1)),
    **dict.fromkeys(("d", "day", "days"), timedelta(days=1)),
    **dict.fromkeys(("w", "week", "weeks"), timedelta(weeks=1)),
}
_MONTHS = ("mo", "mon", "month", "months")
TIMESTAMP_HELP = (
    "'YYYY-MM-DD HH:MM:SS[.ffffff]' (or 'YYYY-MM-DD') in the source's time zone, or a time "
    "before now such as 2h, 7d, 1week, 1month"
)


def _months_before(now: datetime, n: int) -> datetime:
    index = now.year * 12 + now.month - 1 - n
    year, month = divmod(index, 12)
    day = min(now.day, calendar.monthrange(year, month + 1)[1])
    return now.replace(year=year, month=month + 1, day=day)


def parse_relative(text: str, now: datetime, what: str = "time") -> datetime | None:
    """`7d`, `1week`, `1month`, `2h` before `now`; None when `text` is not relative."""
    m = _RELATIVE.match(text or "")
    if not m:
        return None
    n, unit = int(m.group(1)), m.group(2).lower()
    if unit in _MONTHS:
        return _months_before(now, n)
    if unit not in _UNITS:
        raise ConfigError(
            f"invalid {what} {text!r}: unknown unit {unit!r} (use s, m, h, d, week or month)"
        )
    return now - n * _UNITS[unit]


def parse_timestamp_syntax(text: str) -> datetime | None:
    """The absolute timestamp in `text`; None if it is relative; ConfigError if neither."""
    value = (text or "").strip()
    if _RELATIVE.match(value):
        return None
    first_error = None
    for fmt in _ABSOLUTE_FORMATS:
        try:
            return datetime.strptime(value, fmt)
        except ValueError as e:
            first_error = first_error or e
    if re.match(r"^\d{4}-\d{1,2}-\d{1,2}", value):
        # The date has the right shape but is not a date (2024-02-30): say why.
        try:
            datetime.strptime(value[:10], "%Y-%m-%d")
            why = "time part not understood"
        except ValueError as e:
            why = str(e)
        raise ConfigError(f"invalid timestamp {text!r}: {why}; expected {TIMESTAMP_HELP}")
    raise ConfigError(f"invalid timestamp {text!r}: expected {TIMESTAMP_HELP}")


def resolve_timestamp(text: str, source_now: datetime) -> datetime:
    """Absolute or relative `text` as a naive source-clock timestamp, not after `source_now`."""
    ts = parse_timestamp_syntax(text)
    if ts is None:
        ts = parse_relative(text, source_now, "timestamp")
    if ts > source_now:
        raise ConfigError(
            f"timestamp {iso(ts)} is in the future of the source clock ({iso(source_now)}): "
            "a watermark there would skip rows not written yet"
        )
    return ts


def parse_age(text: str, option: str) -> timedelta:
    """`--older-than 7d` (also 12h, 2week, 1month); ConfigError naming the option."""
    now = datetime(2000, 3, 31)  # any fixed date: months count as calendar months from here
    ts = parse_relative(text, now, option) if text else None
    if ts is None:
        raise ConfigError(
            f"invalid {option} {text!r}: expected an age such as 12h, 7d, 2week or 1month"
        )
    return now - ts


_DURATION = re.compile(r"^\s*(\d+)\s*([a-zA-Z]+)\s*$")


def parse_duration(value: object, what: str = "duration") -> timedelta:
    """`30s`, `5m`, `2h`, `7d`, `1week` (or a number of seconds) as a timedelta."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return timedelta(seconds=value)
    m = _DURATION.match(value) if isinstance(value, str) else None
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise ConfigError(f"invalid {what} {value!r}: expected e.g. '30s', '5m', '2h', '7d'")
    return int(m.group(1)) * _UNITS[unit]


# ------------------------------------------------------------------ wall clock and instants
# A DATETIME cursor holds a wall-clock reading of S3RS_SOURCE_TIMEZONE, no offset. Around a
# daylight-saving change a reading is skipped (spring) or repeated (autumn); these functions
# are the one place that maps between readings and real instants.


def source_timezone() -> str:
    """The time zone the cursor column's values are written in (S3RS_SOURCE_TIMEZONE)."""
    return os.environ.get("S3RS_SOURCE_TIMEZONE", "UTC")


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


def wall_clock(instant: datetime, tz: ZoneInfo) -> datetime:
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
    gap (so it falls in the window before the gap, as `wall_clock` has it)."""
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
