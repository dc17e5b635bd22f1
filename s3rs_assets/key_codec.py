"""One form for primary-key values: tagged JSON for the record, `canonical` for comparisons.

A position's key values are what pymysql returns: int, str, Decimal, date, datetime,
timedelta (TIME), bytes. JSON holds only text and numbers, so a record read back would hold
a DATE key as "2026-01-01" while the run holds `date(2026, 1, 1)`, and the two positions
would differ (a WatermarkConflict every other sync). So every value JSON cannot hold as
itself is written tagged and read back as the same Python value:

    bytes      {"$hex": "00ff"}                       (kept from schema 2: readable)
    date       {"$date": "2026-01-01"}
    datetime   {"$datetime": "2026-01-01 10:00:00.000005"}
    TIME       {"$time": "-838:59:59.000000"}         (a timedelta, as MySQL writes it)
    Decimal    {"$decimal": "12.3400"}                 (the exact digits, scale kept)

Records written before the tags (schema 2) hold such values as untagged strings (pydantic's
ISO text). They still load, and `canonical` maps a native value and its old string to the
same form, so positions compare equal whichever way they were read.

No Dagster, no Spark: the record and Spark tasks import this.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

BYTES_TAG = "$hex"
DATE_TAG = "$date"
DATETIME_TAG = "$datetime"
TIME_TAG = "$time"
DECIMAL_TAG = "$decimal"
TAGS = (BYTES_TAG, DATE_TAG, DATETIME_TAG, TIME_TAG, DECIMAL_TAG)

# pydantic's JSON of a datetime / timedelta inside list[Any] (records of schema 2)
_ISO_DATETIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?$")
_ISO_DURATION = re.compile(r"^-?P(?=\d|T\d)")
_MYSQL_TIME = re.compile(r"^(-?)(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?$")


def time_text(value: timedelta | time) -> str:
    """A TIME value as MySQL writes it, always with microseconds: '-838:59:59.000000'."""
    if isinstance(value, time):
        return f"{value:%H:%M:%S.%f}"
    micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign, micros = ("-", -micros) if micros < 0 else ("", micros)
    secs, us = divmod(micros, 1_000_000)
    return f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}.{us:06d}"


def parse_time(text: str) -> timedelta:
    """The inverse of `time_text` (pymysql returns TIME as a timedelta)."""
    m = _MYSQL_TIME.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a TIME value")
    sign, h, mi, s, frac = m.groups()
    td = timedelta(hours=int(h), minutes=int(mi), seconds=int(s),
                   microseconds=int((frac or "").ljust(6, "0")))
    return -td if sign else td


def encode(value: Any) -> Any:
    """A key value as the record's JSON holds it: itself, or tagged (module docstring)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {BYTES_TAG: bytes(value).hex()}
    if isinstance(value, datetime):  # before date: a datetime is a date
        return {DATETIME_TAG: f"{value:%Y-%m-%d %H:%M:%S.%f}"}
    if isinstance(value, date):
        return {DATE_TAG: value.isoformat()}
    if isinstance(value, timedelta | time):
        return {TIME_TAG: time_text(value)}
    if isinstance(value, Decimal):
        return {DECIMAL_TAG: str(value)}
    return value


def decode(value: Any) -> Any:
    """The inverse of `encode`; an untagged value (schema 2 strings too) comes back as is."""
    if not (isinstance(value, dict) and len(value) == 1):
        return value
    (tag, text), = value.items()
    if tag not in TAGS:
        return value
    if not isinstance(text, str):
        raise ValueError(f"{tag} key value is not text")
    try:
        if tag == BYTES_TAG:
            return bytes.fromhex(text)
        if tag == DATETIME_TAG:
            return datetime.fromisoformat(text)
        if tag == DATE_TAG:
            return date.fromisoformat(text)
        if tag == TIME_TAG:
            return parse_time(text)
        return Decimal(text)
    except (ValueError, InvalidOperation):
        what = "hexadecimal" if tag == BYTES_TAG else f"a valid {tag[1:]}"
        raise ValueError(f"{tag} key value is not {what}") from None


def canonical(value: Any) -> Any:
    """A value to compare key values by (equality and hashing, not order): native values
    and their schema-2 JSON strings map to the same form, so a position read from an old
    record equals the run's own. Ints and plain strings are themselves."""
    if isinstance(value, bool | int | float) or value is None:
        return value
    if isinstance(value, str):
        return _canonical_text(value)
    if isinstance(value, dict):
        try:
            decoded = decode(value)
        except ValueError:
            return repr(sorted(value.items()))
        return repr(sorted(value.items())) if decoded is value else canonical(decoded)
    tagged = encode(value)
    if isinstance(tagged, dict):
        (tag, text), = tagged.items()
        return text if tag != BYTES_TAG else f"0x{text}"
    return repr(value)


def _canonical_text(text: str) -> str:
    """A schema-2 string of a DATETIME or TIME key in the tagged text (DATE and DECIMAL
    strings already are: pydantic wrote `isoformat()` and `str(Decimal)`)."""
    if _ISO_DATETIME.match(text):
        return f"{datetime.fromisoformat(text):%Y-%m-%d %H:%M:%S.%f}"
    if _ISO_DURATION.match(text):
        from pydantic import TypeAdapter

        try:
            return time_text(TypeAdapter(timedelta).validate_python(text))
        except ValueError:
            return text
    return text


def canonical_key(values: list[Any] | tuple[Any, ...] | None) -> tuple[Any, ...]:
    """`canonical` of each value of a composite key (None: the empty key)."""
    return () if values is None else tuple(canonical(v) for v in values)
