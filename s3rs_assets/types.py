"""The one MySQL -> Arrow/parquet -> Redshift type mapping.

Every column a table has is described once by a `ColumnType`: the SQL expression the
reader selects (so that the JDBC driver never gets to reinterpret a value, e.g. TIME as a
timestamp), the Arrow type every parquet file is written with (so files of one table share
one schema whatever reader produced them), and the warehouse column type. The README's
type table is generated from `MAPPING_DOC`.

Exactness rules: DECIMAL keeps (p, s); DATETIME/TIMESTAMP keep microseconds and are stored
naive, in the source's time zone; BIGINT UNSIGNED does not fit BIGINT and becomes
DECIMAL(20,0) (so does BIT(64)); TINYINT(1) is MySQL's boolean; TIME can exceed 24 h and
stays text; MariaDB's UUID/INET6/INET4 travel as their canonical text; spatial values as
WKB (Redshift GEOMETRY, built with ST_GeomFromWKB by the merge); zero dates become
NULL and are counted (`zero_date_columns`, `zero_dates_expr`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from s3rs_assets.errors import SourceSchemaError
from s3rs_assets.identifiers import mysql_quote

if TYPE_CHECKING:  # imported where used: the CLI's reading commands never load pyarrow
    import pyarrow as pa

VARCHAR_MAX = 65535
#: DECIMAL(p,s) up to this precision is read by connectorx as its unscaled integer
#: (value * 10^s < 10^18 fits a BIGINT): exact, and faster than text parsed back.
UNSCALED_MAX_PRECISION = 18
#: MySQL counts VARCHAR(n) in characters, Redshift in bytes; utf8mb4 takes up to 4 per char.
UTF8MB4_BYTES = 4


@dataclass(frozen=True)
class SourceColumn:
    """A column as information_schema.COLUMNS describes it."""

    name: str
    data_type: str  # lower case, e.g. "decimal"
    column_type: str  # lower case, e.g. "decimal(18,4) unsigned"
    nullable: bool = True
    char_length: int | None = None
    precision: int | None = None
    scale: int | None = None
    #: CHARACTER_SET_NAME, lower case (None: not a text column, or not read): reconcile
    #: skips converting a column already in UTF-8; not part of equality (catalog detail)
    charset: str | None = field(default=None, compare=False)

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type


@dataclass(frozen=True)
class ColumnType:
    arrow_spec: tuple[Any, ...]  # ("decimal128", 20, 0): pyarrow's factory and arguments
    warehouse: str  # Redshift type; PostgreSQL accepts the same spelling unless noted
    select_cast: str | None = None  # MySQL CAST target applied when reading, if any

    @property
    def arrow(self) -> pa.DataType:
        """The parquet/Arrow type (pyarrow imported on first use, ~0.15 s)."""
        import pyarrow as pa

        name, *args = self.arrow_spec
        return getattr(pa, name)(*args)

    @property
    def spatial(self) -> bool:
        return self.warehouse == "GEOMETRY"

    @property
    def postgres(self) -> str:
        """PostgreSQL's type: binary values (and WKB geometries) as BYTEA."""
        if self.warehouse.startswith("VARBYTE") or self.spatial:
            return "BYTEA"
        return self.warehouse


def _varchar(col: SourceColumn) -> str:
    if col.char_length is None:
        return f"VARCHAR({VARCHAR_MAX})"
    return f"VARCHAR({min(max(col.char_length, 1) * UTF8MB4_BYTES, VARCHAR_MAX)})"


_TEXT = {"tinytext", "text", "mediumtext", "longtext", "json", "enum", "set"}
SPATIAL = {
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
}
#: MariaDB types carried as their text form, with its longest length in bytes
_TEXT_FORMS = {"uuid": 36, "inet6": 45, "inet4": 15}
#: Redshift VARBYTE length per binary type: up to 16 MB (its maximum; MEDIUMBLOB's size)
VARBYTE_MAX = 16_777_216
_BINARY = {
    "binary": VARCHAR_MAX,
    "varbinary": VARCHAR_MAX,
    "tinyblob": VARCHAR_MAX,
    "blob": VARCHAR_MAX,
    "mediumblob": VARBYTE_MAX,
    "longblob": VARBYTE_MAX,
}


def column_type(col: SourceColumn) -> ColumnType:
    """Map one MySQL column; raise SourceSchemaError for a type we cannot carry exactly."""
    t = col.data_type
    if t == "tinyint" and col.column_type.startswith("tinyint(1)"):
        return ColumnType(("bool_",), "BOOLEAN")
    if t == "bit":
        if col.column_type in ("bit(1)", "bit"):  # as a number: connectorx reads raw bytes
            return ColumnType(("bool_",), "BOOLEAN", select_cast="UNSIGNED")
        if col.column_type == "bit(64)":  # up to 2^64 - 1: BIGINT UNSIGNED's range
            return ColumnType(("decimal128", 20, 0), "DECIMAL(20,0)", select_cast="UNSIGNED")
        return ColumnType(("int64",), "BIGINT", select_cast="UNSIGNED")
    if t == "tinyint":
        return ColumnType(("int16",), "SMALLINT")
    if t == "smallint":
        return (
            ColumnType(("int32",), "INTEGER")
            if col.unsigned
            else ColumnType(("int16",), "SMALLINT")
        )
    if t in ("mediumint", "int", "integer"):
        if col.unsigned and t != "mediumint":
            return ColumnType(("int64",), "BIGINT")
        return ColumnType(("int32",), "INTEGER")
    if t == "bigint":
        if col.unsigned:
            return ColumnType(("decimal128", 20, 0), "DECIMAL(20,0)")
        return ColumnType(("int64",), "BIGINT")
    if t == "year":
        return ColumnType(("int16",), "SMALLINT", select_cast="UNSIGNED")
    if t == "decimal":
        p, s = col.precision or 10, col.scale or 0
        if p > 38:
            raise SourceSchemaError(
                f"column {col.name!r} is DECIMAL({p},{s}): Redshift holds at most 38 digits "
                "(list it in exclude_columns to sync the rest of the table)"
            )
        return ColumnType(("decimal128", p, s), f"DECIMAL({p},{s})")
    if t == "float":
        # MariaDB's text protocol (the JDBC reader's) prints FLOAT with 6 digits: 16777216
        # would arrive as 16777200. The exact DOUBLE it widens to narrows back exactly.
        return ColumnType(("float32",), "REAL", select_cast="DOUBLE")
    if t in ("double", "real"):
        return ColumnType(("float64",), "DOUBLE PRECISION")
    if t == "date":
        return ColumnType(("date32",), "DATE")
    if t in ("datetime", "timestamp"):
        return ColumnType(("timestamp", "us"), "TIMESTAMP")
    if t == "time":
        # "-838:59:59.000000" is 17 bytes
        return ColumnType(("string",), "VARCHAR(20)", select_cast="CHAR")
    if t in SPATIAL:  # WKB, as MySQL's ST_AsBinary writes it (the SRID is not carried)
        return ColumnType(("binary",), "GEOMETRY")
    if t in _TEXT_FORMS:  # MariaDB's UUID, INET6, INET4: their canonical text
        return ColumnType(("string",), f"VARCHAR({_TEXT_FORMS[t]})", select_cast="CHAR")
    if t in ("char", "varchar"):
        return ColumnType(("string",), _varchar(col))
    if t in _TEXT:
        return ColumnType(("string",), f"VARCHAR({VARCHAR_MAX})", select_cast=None)
    if t in _BINARY:
        return ColumnType(("binary",), f"VARBYTE({_BINARY[t]})")
    raise SourceSchemaError(
        f"column {col.name!r} has type {col.column_type!r}, which s3rs cannot map"
    )


TEMPORAL = ("datetime", "timestamp", "date")
#: integer types (MySQL's data_type); TINYINT(1) is a boolean, not one of them
INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "integer", "bigint")
#: the extra column a reader selects: how many of the row's non-key date columns MySQL
#: itself holds as NULL (the zero dates are the other NULLs read there: `zero_dates_expr`)
ZERO_DATES_COLUMN = "s3rs_null_dates"


def invalid_date(q: str) -> str:
    """True for MySQL's zero date and zero-in-date values ('2024-00-15', '2024-02-00'),
    which a lax sql_mode lets in, and a day its month lacks ('2024-02-30', which
    ALLOW_INVALID_DATES lets in): no other database can hold them, and connectorx panics on
    them. LAST_DAY only for days past the 28th (MariaDB stops an AND at its first false)."""
    return (f"(MONTH({q}) = 0 OR DAYOFMONTH({q}) = 0 OR "
            f"(DAYOFMONTH({q}) > 28 AND DAYOFMONTH({q}) > DAYOFMONTH(LAST_DAY({q}))))")


def null_if_invalid(col: SourceColumn) -> str:
    """A DATE/DATETIME/TIMESTAMP value, NULL where it is no real date: adding a zero
    interval is NULL for the zero date and zero-in-date values (as `invalid_date` says)
    and keeps the column's type and fraction. One function per value instead of three and
    a test: -0.5 s of MariaDB CPU per 1M rows of four date columns (2026-11-28). A day its
    month lacks ('2024-02-30', which only ALLOW_INVALID_DATES lets in) is NULL here too and
    counted with the zero dates (connectorx panicked on it before); the row hashes' TO_SECONDS
    is not NULL for it, so `reconcile --columns all` names that row."""
    unit = "DAY" if col.data_type == "date" else "SECOND"
    return f"({mysql_quote(col.name)} + INTERVAL 0 {unit})"


def select_expr(
    col: SourceColumn, reader: str = "jdbc", key: bool = False, screened: bool = False
) -> str:
    """The expression `reader` selects for `col`, aliased back to its own name.

    JDBC gets TIME/YEAR/BIT cast so the driver cannot turn them into timestamps or dates.
    connectorx (which forces every decimal into one precision and scale and fails on
    others) gets DECIMAL(p<=18,s) as its unscaled BIGINT `value * 10^s` (MySQL's DECIMAL
    arithmetic is exact; `decimal_from_unscaled` rebuilds the value) and wider DECIMAL as
    text, cast back to the exact DECIMAL(p,s) in Arrow, which refuses any loss. Zero dates
    and zero-in-date values are read as NULL by both readers (connectorx panics on them, the
    JDBC driver would roll '2024-00-15' over to 2023-12-15) and counted (`zero_dates_expr`);
    connectorx's non-key columns through `null_if_invalid`, the cursor and key columns
    through `invalid_date`, the test `KeyColumns.readable` keeps a cursor's such rows out of
    every read with. A column the read's predicate already screens (`screened`: the cursor,
    which `readable` tests) is read bare: the test once per row is enough (-0.3 s of MariaDB
    CPU per 1M rows; 2026-11-28).
    Key columns (`key`) stay bare for JDBC: its predicates apply to the select list and must
    hit the index. Spatial columns are read as WKB.
    """
    q = mysql_quote(col.name)
    if screened and col.data_type in TEMPORAL:
        return q
    if col.data_type in SPATIAL:
        return f"ST_AsBinary({q}) AS {q}"
    if col.data_type in TEMPORAL and reader == "connectorx" and not key:
        return f"{null_if_invalid(col)} AS {q}"
    if col.data_type in TEMPORAL and not (key and reader == "jdbc"):
        return f"IF({invalid_date(q)}, NULL, {q}) AS {q}"
    if reader == "connectorx" and reads_unscaled(col):
        scale = "1" + "0" * (col.scale or 0)  # an integer literal: DECIMAL arithmetic
        return f"CAST({q} * {scale} AS SIGNED) AS {q}"
    if reader == "connectorx" and col.data_type in ("decimal", "time", "year"):
        return f"CAST({q} AS CHAR) AS {q}"
    cast = column_type(col).select_cast
    return f"CAST({q} AS {cast}) AS {q}" if cast else q


def reads_unscaled(col: SourceColumn) -> bool:
    """connectorx reads this DECIMAL as its unscaled integer (see `select_expr`)."""
    return col.data_type == "decimal" and (col.precision or 10) <= UNSCALED_MAX_PRECISION


def decimal_from_unscaled(values: pa.Array | pa.ChunkedArray, typ: pa.Decimal128Type) -> pa.Array:
    """Integer unscaled values (v * 10^s) as decimal128(p, s) holding v, exactly: the
    128-bit two's complement of each value (low word, sign-extended high word). MySQL types
    `CAST(... AS SIGNED)` of a narrow DECIMAL as INT, so connectorx hands int32 (or
    narrower) for small precisions: widened to int64 first, which is exact."""
    import numpy as np
    import pyarrow as pa

    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if not pa.types.is_integer(arr.type) or arr.type == pa.uint64():
        raise TypeError(f"unscaled decimal values must be signed integers, got {arr.type}")
    if arr.type != pa.int64():
        arr = arr.cast(pa.int64())
    low = arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    words = np.empty((len(low), 2), dtype=np.int64)
    words[:, 0] = low
    words[:, 1] = low >> 63
    validity = arr.is_valid().buffers()[1] if arr.null_count else None
    return pa.Array.from_buffers(typ, len(arr), [validity, pa.py_buffer(words)])


def zero_date_columns(columns: list[SourceColumn], keys: tuple[str, ...]) -> list[str]:
    """The non-key date columns whose zero (or zero-in-date) values are read as NULL and
    counted (`zero_dates_expr`)."""
    return [c.name for c in columns if c.data_type in TEMPORAL and c.name not in keys]


def zero_dates_expr(columns: list[SourceColumn], keys: tuple[str, ...]) -> str | None:
    """How many of the row's `zero_date_columns` MySQL holds as NULL, as `ZERO_DATES_COLUMN`;
    None when the table has no such column. The reader reads zero dates as NULL too (the
    `invalid_date` IF of `select_expr`), so a batch's zero dates are the NULLs read in those
    columns minus this column's sum (`count_zero_dates`): reported, never silent.

    Why not count them with the same IF again: that check ran twice per date column and row
    on the MySQL server; `IS NULL` costs next to nothing (a 50,000-row read of the bench
    table took 12 % less). NOT NULL columns hold no NULL and add no term (MySQL's `IS NULL`
    even matches '0000-00-00' in a NOT NULL date column, in a WHERE clause)."""
    names = zero_date_columns(columns, keys)
    if not names:
        return None
    nullable = {c.name for c in columns if c.nullable}
    terms = [f"({mysql_quote(n)} IS NULL)" for n in names if n in nullable]
    return f"({' + '.join(terms) or '0'}) AS {mysql_quote(ZERO_DATES_COLUMN)}"


def count_zero_dates(table: pa.Table, date_columns: Sequence[str]) -> int:
    """The zero dates a batch read as NULL: the NULLs in its `date_columns` (the
    `zero_date_columns` of its select list) minus the NULLs MySQL holds there
    (`ZERO_DATES_COLUMN`); 0 when the batch has no such column."""
    if ZERO_DATES_COLUMN not in table.column_names:
        return 0
    import pyarrow as pa
    import pyarrow.compute as pc

    read_nulls = sum(table.column(n).null_count for n in date_columns)
    held = pc.sum(table.column(ZERO_DATES_COLUMN).cast(pa.int64())).as_py() or 0
    return int(read_nulls - held)


def arrow_schema(columns: list[SourceColumn]) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([pa.field(c.name, column_type(c).arrow, nullable=True) for c in columns])


#: (MySQL type, parquet/Arrow type, Redshift type) rows for the README.
MAPPING_DOC: list[tuple[str, str, str]] = [
    ("TINYINT(1), BIT(1)", "bool", "BOOLEAN"),
    ("TINYINT, SMALLINT", "int16", "SMALLINT"),
    ("SMALLINT UNSIGNED, MEDIUMINT, INT", "int32", "INTEGER"),
    ("INT UNSIGNED, BIGINT, BIT(2..63)", "int64", "BIGINT"),
    ("BIGINT UNSIGNED, BIT(64)", "decimal128(20,0)", "DECIMAL(20,0)"),
    ("DECIMAL(p,s), p <= 38", "decimal128(p,s)", "DECIMAL(p,s)"),
    ("FLOAT / DOUBLE", "float32 / float64", "REAL / DOUBLE PRECISION"),
    ("DATE", "date32", "DATE"),
    (
        "DATETIME(n), TIMESTAMP(n)",
        "timestamp[us] (naive: DATETIME as its wall clock, TIMESTAMP as UTC)",
        "TIMESTAMP",
    ),
    ("TIME(n)", "string ('-838:59:59.000000')", "VARCHAR(20)"),
    ("YEAR", "int16", "SMALLINT"),
    ("CHAR(n), VARCHAR(n)", "string", "VARCHAR(min(4n, 65535)) (bytes)"),
    ("TEXT, JSON, ENUM, SET", "string", "VARCHAR(65535)"),
    ("UUID, INET6, INET4 (MariaDB)", "string (canonical text)", "VARCHAR(36 / 45 / 15)"),
    ("BINARY, VARBINARY, TINYBLOB, BLOB", "binary", "VARBYTE(65535) (BYTEA on PostgreSQL)"),
    ("MEDIUMBLOB, LONGBLOB", "binary", "VARBYTE(16777216) (BYTEA on PostgreSQL)"),
    (
        "GEOMETRY, POINT, POLYGON, … (spatial)",
        "binary (WKB of ST_AsBinary)",
        "GEOMETRY (BYTEA holding the WKB on PostgreSQL)",
    ),
]
