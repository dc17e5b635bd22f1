"""The (cursor, primary key) keyset: predicates, chunk plans and S3 key tokens.

A table's position is a row's `(c, pk)` tuple, compared lexicographically. Extraction of a
chunk reads exactly the rows with `start < (c, pk) <= end`, where `end` is the N-th row
after `start` found beforehand by an index-only query; so the rows of a chunk are known
before they are read, can be split into disjoint sub-ranges read in parallel, and a crash
re-reads at most the chunk in flight. A plain `c > watermark` would lose every row sharing
the boundary timestamp; `(c, pk) > (c0, pk0)` loses none.

A `Position` with `pk=None` stands for "before every row at `c`" (the start of a
partition window), so `after()` becomes `c >= c0`.

All predicates are SQL text with literals escaped by pymysql (identifiers validated and
quoted by `identifiers`), because Spark's JDBC `predicates` take text, not parameters.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from pymysql.converters import escape_item

from s3rs_assets.identifiers import mysql_quote
from s3rs_assets.key_codec import canonical, encode, time_text
from s3rs_assets.watermark import Position


def literal(value: Any) -> str:
    """A MySQL literal for a cursor or key value."""
    if isinstance(value, datetime):
        return f"'{value:%Y-%m-%d %H:%M:%S.%f}'"
    if isinstance(value, date):
        return f"'{value:%Y-%m-%d}'"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, timedelta):  # TIME, with its sign and microseconds
        return f"'{time_text(value)}'"
    if isinstance(value, bytes | bytearray):
        # a hex literal is a binary string: compared byte by byte, like BINARY/VARBINARY keys
        return f"X'{bytes(value).hex()}'"
    return escape_item(value, "utf8mb4")


@dataclass(frozen=True)
class KeyColumns:
    """The cursor column followed by the primary-key columns, as quoted SQL names.

    `readable` is a condition every keyset read adds (`below`, `SubRange.predicate`): rows
    whose cursor no position can hold (MySQL's zero-in-date values, '2026-11-00', which sort
    between real dates) are never planned nor read; `source.source_counts` counts them."""

    cursor: str
    pk: tuple[str, ...]
    readable: str = ""

    @property
    def names(self) -> list[str]:
        return [self.cursor, *self.pk]

    @property
    def quoted(self) -> list[str]:
        return [mysql_quote(n) for n in self.names]

    @property
    def order_by(self) -> str:
        return ", ".join(self.quoted)


def _lex(cols: list[str], vals: list[Any], strict: bool) -> str:
    """(cols) > (vals) when strict, else (cols) <= (vals), expanded so indexes are used."""
    head, *rest = cols
    v = literal(vals[0])
    if not rest:
        return f"{head} > {v}" if strict else f"{head} <= {v}"
    inner = _lex(rest, vals[1:], strict)
    op = ">" if strict else "<"
    return f"({head} {op} {v} OR ({head} = {v} AND ({inner})))"


def after(pos: Position, keys: KeyColumns) -> str:
    """Rows strictly after `pos` (or from `pos.c` on, when `pos.pk` is None)."""
    q = keys.quoted
    if pos.pk is None:
        return f"{q[0]} >= {literal(pos.c)}"
    return _lex(q, [pos.c, *pos.pk], strict=True)


def at_or_before(pos: Position, keys: KeyColumns) -> str:
    """Rows up to and including `pos`."""
    return _lex(keys.quoted, [pos.c, *pos.pk], strict=False)


def below(upper: datetime, keys: KeyColumns) -> str:
    """Rows before `upper` that a position can hold (`KeyColumns.readable`)."""
    bound = f"{keys.quoted[0]} < {literal(upper)}"
    return f"{bound} AND {keys.readable}" if keys.readable else bound


@dataclass(frozen=True)
class KeySpan:
    """The smallest and largest value of the table's primary key (one integer column,
    `SourceTable.span_column`) among a sub-range's rows, as planned
    (`probes.with_key_spans`)."""

    column: str
    low: int
    high: int


@dataclass(frozen=True)
class SubRange:
    """Rows in (start, end]; `rows` is how many the index said there are. With a `span`,
    the read walks the primary key from `span.low` to `span.high` (`SourceTable.read_from_for`)
    instead of the cursor index: the predicate still names the rows, the span only says
    where they lie."""

    start: Position
    end: Position
    rows: int
    span: KeySpan | None = None

    def predicate(self, keys: KeyColumns) -> str:
        where = f"{after(self.start, keys)} AND {at_or_before(self.end, keys)}"
        if keys.readable:
            where = f"{where} AND {keys.readable}"
        if self.span is not None:
            col = mysql_quote(self.span.column)
            where = f"{where} AND {col} >= {int(self.span.low)} AND {col} <= {int(self.span.high)}"
        return where


@dataclass(frozen=True)
class ChunkPlan:
    start: Position
    end: Position
    rows: int
    ranges: tuple[SubRange, ...]


def position_token(pos: Position) -> str:
    """A deterministic, S3-safe name for a position (used in object keys)."""
    ts = f"{pos.c:%Y%m%dT%H%M%S%f}"
    if pos.pk is None:
        return f"{ts}_start"
    if all(isinstance(v, int) and v >= 0 for v in pos.pk):
        return f"{ts}_" + "-".join(str(v) for v in pos.pk)
    # canonical: the same token whether the position was read from MySQL or a record
    text = json.dumps([encode(v) if isinstance(v, bytes) else canonical(v) for v in pos.pk])
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    return f"{ts}_h{digest}"
