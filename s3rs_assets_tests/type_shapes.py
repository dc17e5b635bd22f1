"""Hypothesis strategies for a column of every type the type map knows (`types.column_type`).

`extra_columns()` draws a few columns of random MySQL types with their parameters
(DECIMAL(p,s) for every p, s; DATETIME(n); BIT(n); CHAR(n); ...); each `Col` draws SQL
literals for its values — NULL, extremes, zero dates where the type allows them, utf8mb4
text, WKB points — and says how to read the value back from both sides so that equal means
exact: `mysql_expr` is what MySQL holds as s3rs carries it (a zero date as NULL, a TIME as
its text, a geometry as WKB) and `norm` maps both sides' Python values to one form.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
from hypothesis import strategies as st
from pymysql.converters import escape_string

from s3rs_assets.key_codec import time_text


@dataclass(frozen=True)
class Col:
    """One extra column: its DDL, a strategy of SQL literals, how to read and compare it."""

    kind: str
    ddl: str
    literals: st.SearchStrategy = field(compare=False, repr=False)
    expr: str = "{q}"  # MySQL expression giving the value as s3rs carries it
    norm: Callable[[Any], Any] = field(default=lambda v: v, compare=False, repr=False)

    def mysql_expr(self, name: str) -> str:
        return self.expr.format(q=f"`{name}`")


def _ints(lo: int, hi: int) -> st.SearchStrategy:
    return (st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]) | st.integers(lo, hi)).map(str)


def _text(s: str) -> str:
    return f"'{escape_string(s)}'"


def _bytes(b: bytes) -> str:
    return f"X'{b.hex()}'"


def _bytes_norm(v: Any) -> Any:
    return None if v is None else bytes(v)


def _int_norm(v: Any) -> Any:
    return None if v is None else int(v)


def _float32(v: Any) -> Any:
    return None if v is None else np.float32(v).item()


def _invalid(q: str) -> str:
    return f"IF(MONTH({q}) = 0 OR DAYOFMONTH({q}) = 0, NULL, {q})"


#: characters of utf8mb4 text: every plane, no NUL (PostgreSQL text cannot hold it)
CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
TEXT = st.text(CHARS, max_size=12)


def _decimal(p: int, s: int) -> Col:
    top = 10**p - 1

    def lit(unscaled: int) -> str:
        return format(Decimal(unscaled).scaleb(-s), "f")

    vals = st.sampled_from([top, -top, 1, -1, 0]) | st.integers(-top, top)
    return Col(f"decimal({p},{s})", f"DECIMAL({p},{s})", vals.map(lit),
               norm=lambda v: None if v is None else (v, v.as_tuple().exponent))


def _datetime(kind: str, n: int) -> Col:
    lo, hi = ((datetime(1970, 1, 2), datetime(2038, 1, 18)) if kind == "TIMESTAMP"
              else (datetime(1000, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)))
    step = 10 ** (6 - n)

    def lit(d: datetime) -> str:
        d = d.replace(microsecond=d.microsecond - d.microsecond % step)
        return f"'{d:%Y-%m-%d %H:%M:%S.%f}'"

    zeros = ["'0000-00-00 00:00:00'"] + (
        [] if kind == "TIMESTAMP" else ["'2024-00-15 10:00:00'", "'2024-02-00 01:02:03'"])
    vals = st.datetimes(lo, hi).map(lit) | st.sampled_from([lit(lo), lit(hi), *zeros])
    null = " NULL" if kind == "TIMESTAMP" else ""
    return Col(f"{kind.lower()}({n})", f"{kind}({n}){null}", vals, expr=_invalid("{q}"))


def _time(n: int) -> Col:
    step = 10 ** (6 - n)
    most = 838 * 3600 + 59 * 60 + 59

    def lit(us: int) -> str:
        us -= us % step if us >= 0 else -((-us) % step)
        return f"'{time_text(timedelta(microseconds=us))}'"

    vals = (st.sampled_from([most * 10**6, -most * 10**6, 0, -500_000])
            | st.integers(-most * 10**6, most * 10**6)).map(lit)
    return Col(f"time({n})", f"TIME({n})", vals, expr="CAST({q} AS CHAR)")


def _bit(n: int) -> Col:
    to = (lambda v: None if v is None else bool(v)) if n == 1 else _int_norm
    return Col(f"bit({n})", f"BIT({n})", _ints(0, 2**n - 1).map(lambda v: f"b'{int(v):b}'"),
               expr="CAST({q} AS UNSIGNED)", norm=to)


def _json() -> st.SearchStrategy:
    leaf = st.none() | st.booleans() | st.integers(-10**6, 10**6) | TEXT
    tree = st.recursive(leaf, lambda c: st.lists(c, max_size=3)
                        | st.dictionaries(TEXT, c, max_size=3), max_leaves=6)
    return tree.map(lambda v: _text(json.dumps(v, ensure_ascii=False)))


def _point() -> st.SearchStrategy:
    coord = st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False)
    return st.tuples(coord, coord).map(
        lambda xy: f"ST_GeomFromText('POINT({xy[0]!r} {xy[1]!r})')")


@st.composite
def column(draw) -> Col:
    """One column of a random type the type map knows, with random parameters."""
    kind = draw(st.sampled_from(KINDS))
    return KIND_BUILDERS[kind](draw)


KIND_BUILDERS: dict[str, Callable[[Any], Col]] = {
    "bool": lambda d: Col("tinyint(1)", "TINYINT(1)", _ints(-128, 127),
                          norm=lambda v: None if v is None else bool(v)),
    "bit": lambda d: _bit(d(st.sampled_from([1, 2, 12, 63, 64]))),
    "tinyint": lambda d: Col("tinyint", "TINYINT", _ints(-128, 127)),
    "tinyint_u": lambda d: Col("tinyint u", "TINYINT UNSIGNED", _ints(0, 255)),
    "smallint": lambda d: Col("smallint", "SMALLINT", _ints(-2**15, 2**15 - 1)),
    "smallint_u": lambda d: Col("smallint u", "SMALLINT UNSIGNED", _ints(0, 2**16 - 1)),
    "mediumint": lambda d: Col("mediumint", "MEDIUMINT", _ints(-2**23, 2**23 - 1)),
    "mediumint_u": lambda d: Col("mediumint u", "MEDIUMINT UNSIGNED", _ints(0, 2**24 - 1)),
    "int": lambda d: Col("int", "INT", _ints(-2**31, 2**31 - 1)),
    "int_u": lambda d: Col("int u", "INT UNSIGNED", _ints(0, 2**32 - 1)),
    "bigint": lambda d: Col("bigint", "BIGINT", _ints(-2**63, 2**63 - 1)),
    "bigint_u": lambda d: Col("bigint u", "BIGINT UNSIGNED", _ints(0, 2**64 - 1),
                              norm=_int_norm),
    "year": lambda d: Col("year", "YEAR", st.sampled_from(["0", "1901", "2155"])
                          | st.integers(1901, 2155).map(str), expr="CAST({q} AS UNSIGNED)"),
    "decimal": lambda d: (lambda p: _decimal(p, d(st.integers(0, p))))(d(st.integers(1, 38))),
    "float": lambda d: Col("float", "FLOAT", st.floats(
        width=32, allow_nan=False, allow_infinity=False, allow_subnormal=False).map(repr),
        expr="CAST({q} AS DOUBLE)", norm=_float32),
    "double": lambda d: Col("double", "DOUBLE", st.floats(
        allow_nan=False, allow_infinity=False).map(repr)),
    "date": lambda d: Col("date", "DATE", st.dates(date(1000, 1, 1), date(9999, 12, 31))
                          .map(lambda v: f"'{v}'")
                          | st.sampled_from(["'0000-00-00'", "'2024-00-00'", "'2024-02-00'",
                                             "'9999-12-31'", "'1000-01-01'"]),
                          expr=_invalid("{q}")),
    "datetime": lambda d: _datetime("DATETIME", d(st.integers(0, 6))),
    "timestamp": lambda d: _datetime("TIMESTAMP", d(st.integers(0, 6))),
    "time": lambda d: _time(d(st.integers(0, 6))),
    "char": lambda d: (lambda n: Col(f"char({n})", f"CHAR({n})",
                                     st.text(CHARS, max_size=n).map(_text)))(
        d(st.integers(1, 8))),
    "varchar": lambda d: (lambda n: Col(f"varchar({n})", f"VARCHAR({n})",
                                        st.text(CHARS, max_size=n).map(_text)))(
        d(st.integers(1, 30))),
    "text": lambda d: Col("text", d(st.sampled_from(["TINYTEXT", "TEXT", "MEDIUMTEXT",
                                                     "LONGTEXT"])), TEXT.map(_text)),
    "json": lambda d: Col("json", "JSON", _json()),
    "enum": lambda d: Col("enum", "ENUM('a','b c','','é🚚')",
                          st.sampled_from(["'a'", "'b c'", "''", "'é🚚'"])),
    "set": lambda d: Col("set", "SET('x','y','z')",
                         st.sampled_from(["''", "'x'", "'x,z'", "'x,y,z'"])),
    "uuid": lambda d: Col("uuid", "UUID", st.uuids().map(lambda u: f"'{u}'"),
                          expr="CAST({q} AS CHAR)"),
    "inet6": lambda d: Col("inet6", "INET6", st.ip_addresses(v=6).map(lambda a: f"'{a}'"),
                           expr="CAST({q} AS CHAR)"),
    "inet4": lambda d: Col("inet4", "INET4", st.ip_addresses(v=4).map(lambda a: f"'{a}'"),
                           expr="CAST({q} AS CHAR)"),
    "binary": lambda d: (lambda n: Col(f"binary({n})", f"BINARY({n})",
                                       st.binary(max_size=n).map(_bytes),
                                       norm=_bytes_norm))(d(st.integers(1, 16))),
    "varbinary": lambda d: (lambda n: Col(f"varbinary({n})", f"VARBINARY({n})",
                                          st.binary(max_size=n).map(_bytes),
                                          norm=_bytes_norm))(d(st.integers(1, 16))),
    "blob": lambda d: Col("blob", d(st.sampled_from(["TINYBLOB", "BLOB", "MEDIUMBLOB",
                                                     "LONGBLOB"])),
                          st.binary(max_size=40).map(_bytes), norm=_bytes_norm),
    "point": lambda d: Col("point", d(st.sampled_from(["POINT", "GEOMETRY"])), _point(),
                           expr="ST_AsBinary({q})", norm=_bytes_norm),
}
KINDS = sorted(KIND_BUILDERS)


def with_null(col: Col) -> st.SearchStrategy:
    """A value of `col` as a SQL literal, NULL one time in five or so."""
    return st.just("NULL") | col.literals | col.literals | col.literals | col.literals
