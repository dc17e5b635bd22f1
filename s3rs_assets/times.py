"""Durations and timestamps as operators and tables.yaml write them, parsed in one place.

Durations (`lag: 5m`, `--older-than 7d`) and relative times (`--timestamp 1week`) share one
unit table; months are calendar months and only make sense relative to a date, so a `lag`
cannot be given in months.
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime, timedelta

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
