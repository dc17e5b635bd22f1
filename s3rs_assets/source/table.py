"""The table as MySQL's catalog describes it (`describe`), and its clock (`check_clock`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pymysql

from s3rs_assets.clock import is_utc, offsets, sample_instants, source_timezone
from s3rs_assets.config import TableConfig
from s3rs_assets.cursor import KeyColumns, SubRange
from s3rs_assets.errors import ConfigError, SourceSchemaError
from s3rs_assets.identifiers import check_identifier, mysql_quote, mysql_table
from s3rs_assets.types import (
    INTEGER_TYPES,
    TEMPORAL,
    SourceColumn,
    column_type,
    invalid_date,
    select_expr,
    zero_date_columns,
    zero_dates_expr,
)


@dataclass(frozen=True)
class SourceTable:
    """A configured table checked against MySQL's catalog."""

    schema: str
    table: str
    columns: list[SourceColumn]
    primary_key: tuple[str, ...]
    cursor: str
    cursor_indexed: bool
    #: the narrowest index whose first column is the cursor and whose name is a plain
    #: identifier (None: no such index; reads go without the hint)
    cursor_index: str | None = None
    #: the integer column that is the clustered (PRIMARY) index, when another index leads
    #: with the cursor: a sub-range's rows may then be read by a span of it (`with_key_spans`)
    span_column: str | None = None

    @property
    def read_from(self) -> str:
        """The FROM of a sub-range read: the table, held to its cursor index. A sub-range is
        a range of that index; past ~10 % of the table MariaDB's optimizer takes a full
        table scan instead (its cost model prices the clustered lookups above reading every
        row), so a read then costs the whole table, not its rows: a 100,000-row sub-range of
        the 1M-row bench table read 1M rows (mariadbd 3.2-3.7 -> 5.7-7.4 CPU-s per backup at
        chunk_rows 200k; drv27). With the index a read costs at most a lookup per row read."""
        if self.cursor_index is None:
            return self.qualified
        return f"{self.qualified} FORCE INDEX ({mysql_quote(self.cursor_index)})"

    def read_from_for(self, rows: SubRange) -> str:
        """`read_from`, or for a sub-range with a key span the table held to its primary
        key: where the rows' keys follow their cursor (ids given in insertion order, the
        common case), the span is about as many rows as the sub-range and lies in a few
        adjacent pages, read in order without a lookup per row (mariadbd 5.4 -> 3.3 CPU-s
        per 1M rows of the decimal bench table, `SELECT *`; 2026-11-28)."""
        if rows.span is None:
            return self.read_from
        return f"{self.qualified} FORCE INDEX (`PRIMARY`)"

    @property
    def keys(self) -> KeyColumns:
        """The keyset; its reads skip zero-in-date cursors, which no position can hold."""
        readable = f"NOT {invalid_date(mysql_quote(self.cursor))}"
        return KeyColumns(self.cursor, self.primary_key, readable)

    @property
    def cursor_is_date(self) -> bool:
        """A DATE cursor: its values are whole days, so the safety bound is too."""
        return any(c.name == self.cursor and c.data_type == "date" for c in self.columns)

    @property
    def qualified(self) -> str:
        return mysql_table(self.schema, self.table)

    def zero_date_columns(self) -> list[str]:
        """The columns whose zero dates `select_list` reads as NULL and counts."""
        return zero_date_columns(self.columns, (self.cursor, *self.primary_key))

    def select_list(self, reader: str = "jdbc") -> str:
        """What a reader selects: every carried column, then the zero-date count."""
        keys = (self.cursor, *self.primary_key)
        exprs = [select_expr(c, reader, key=c.name in keys, screened=c.name == self.cursor)
                 for c in self.columns]
        zero = zero_dates_expr(self.columns, keys)
        return ", ".join([*exprs, zero] if zero else exprs)


_COLUMNS_SQL = (
    "SELECT TABLE_NAME, COLUMN_NAME, LOWER(DATA_TYPE), LOWER(COLUMN_TYPE), IS_NULLABLE, "
    "CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, LOWER(CHARACTER_SET_NAME) "
    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN ({names}) "
    "ORDER BY TABLE_NAME, ORDINAL_POSITION"
)
_INDEXES_SQL = (
    "SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME FROM information_schema.STATISTICS "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN ({names}) ORDER BY TABLE_NAME, INDEX_NAME, "
    "SEQ_IN_INDEX"
)


def describe(conn: pymysql.connections.Connection, cfg: TableConfig) -> SourceTable:
    """Check the table, its cursor and primary key; raise SourceSchemaError naming the fault."""
    found = describe_many(conn, [cfg])[cfg.name]
    if isinstance(found, SourceSchemaError):
        raise found
    return found


def describe_many(
    conn: pymysql.connections.Connection, cfgs: list[TableConfig]
) -> dict[str, SourceTable | SourceSchemaError]:
    """`describe` for many tables at two catalog queries per schema (not three per table):
    what a sensor tick or `s3rs status` over thousands of tables pays. Each table gets its
    SourceTable or the SourceSchemaError `describe` would raise."""
    by_schema: dict[str, list[TableConfig]] = {}
    for cfg in cfgs:
        by_schema.setdefault(cfg.schema, []).append(cfg)
    out: dict[str, SourceTable | SourceSchemaError] = {}
    with conn.cursor() as cur:
        for schema, group in by_schema.items():
            names = sorted({c.table for c in group})
            marks = ", ".join(["%s"] * len(names))
            cur.execute(_COLUMNS_SQL.format(names=marks), (schema, *names))
            columns: dict[str, list[tuple]] = {}
            for r in cur.fetchall():
                columns.setdefault(r[0].lower(), []).append(r[1:])
            cur.execute(_INDEXES_SQL.format(names=marks), (schema, *names))
            indexes: dict[str, list[tuple]] = {}
            for r in cur.fetchall():
                indexes.setdefault(r[0].lower(), []).append(r[1:])
            for cfg in group:
                key = cfg.table.lower()
                try:
                    out[cfg.name] = from_catalog(cfg, columns.get(key, []), indexes.get(key, []))
                except SourceSchemaError as e:
                    out[cfg.name] = e
    return out


def from_catalog(cfg: TableConfig, rows: list[tuple], indexes: list[tuple]) -> SourceTable:
    """The checks of `describe` on catalog rows already read: `rows` are (name, data type,
    column type, nullable, char length, precision, scale[, charset]) in ordinal order, `indexes` are
    (index name, position in index, column). Long on purpose: the catalog checks in the
    order an operator fixes them; each failure names its column."""
    if not rows:
        raise SourceSchemaError(
            f"table {cfg.name} does not exist in MySQL (or the user cannot SELECT it)"
        )
    columns = [
        SourceColumn(
            name=r[0],
            data_type=r[1],
            column_type=r[2],
            nullable=r[3] == "YES",
            char_length=r[4],
            precision=r[5],
            scale=r[6],
            charset=r[7] if len(r) > 7 else None,
        )
        for r in rows
    ]
    columns = _drop_excluded(cfg, columns)
    by_name = {c.name.lower(): c for c in columns}
    for c in columns:
        column_type(c)  # raises for a type we cannot carry
    cursor_col = by_name.get(cfg.cursor.lower())
    if cursor_col is None:
        temporal = [c.name for c in columns if c.data_type in TEMPORAL]
        raise SourceSchemaError(
            f"table {cfg.name} has no cursor column {cfg.cursor!r} "
            f"(its date/time columns: {', '.join(temporal) or 'none'})"
        )
    if cursor_col.data_type not in TEMPORAL:
        raise SourceSchemaError(
            f"table {cfg.name}: cursor column {cursor_col.name!r} is {cursor_col.column_type}, "
            "expected DATETIME, TIMESTAMP or DATE"
        )
    if cfg.primary_key:
        missing = [k for k in cfg.primary_key if k.lower() not in by_name]
        if missing:
            raise SourceSchemaError(
                f"table {cfg.name}: primary_key column(s) {missing} do not exist"
            )
        pk = tuple(by_name[k.lower()].name for k in cfg.primary_key)
        nullable = [k for k in pk if by_name[k.lower()].nullable]
        if nullable:
            raise SourceSchemaError(
                f"table {cfg.name}: primary_key column(s) {nullable} allow NULL, and a NULL "
                "key cannot be ordered or compared, so rows would be skipped at chunk "
                "boundaries: use NOT NULL columns (the table's primary key or a NOT NULL "
                "unique key)"
            )
    else:
        pk = tuple(
            col
            for name, _, col in sorted(
                (i for i in indexes if i[0] == "PRIMARY"), key=lambda i: i[1]
            )
        )
        if not pk:
            raise SourceSchemaError(
                f"table {cfg.name} has no primary key: set primary_key in tables.yaml to "
                "columns that identify a row"
            )
        hidden = [k for k in pk if k.lower() not in by_name]
        if hidden:
            raise SourceSchemaError(
                f"table {cfg.name}: exclude_columns names primary key column(s) {hidden}: "
                "s3rs needs the key to checkpoint and merge rows"
            )
    indexed = any(seq == 1 and col.lower() == cursor_col.name.lower() for _, seq, col in indexes)
    by_cursor = cursor_index(indexes, cursor_col.name)
    return SourceTable(cfg.schema, cfg.table, columns, pk, cursor_col.name, indexed, by_cursor,
                       span_column(indexes, by_cursor, by_name, cursor_col))


def span_column(
    indexes: list[tuple], by_cursor: str | None, by_name: dict[str, SourceColumn],
    cursor_col: SourceColumn,
) -> str | None:
    """The carried integer column that is the whole PRIMARY index, when a secondary index
    leads with the cursor (InnoDB keeps the primary key in every secondary index entry, so a
    sub-range's smallest and largest value of it are read from the cursor index alone).
    One column: a span of it then holds at most as many rows as values (a composite key's
    first column may hold the whole table in one value)."""
    if by_cursor is None or by_cursor == "PRIMARY":
        return None
    primary = [col for name, _, col in indexes if name == "PRIMARY"]
    col = by_name.get(primary[0].lower()) if len(primary) == 1 else None
    if col is None or col.name == cursor_col.name or col.data_type not in INTEGER_TYPES:
        return None
    return col.name


def cursor_index(indexes: list[tuple], cursor: str) -> str | None:
    """The index with `cursor` as its first column and the fewest columns (then by name):
    its (cursor, primary key) order is what the reads walk. `indexes`: (index name,
    position in index, column). Only a plain identifier's name (`read_from` quotes it)."""
    widths: dict[str, int] = {}
    for name, _, _ in indexes:
        widths[name] = widths.get(name, 0) + 1
    leading = [n for n, seq, col in indexes if seq == 1 and col.lower() == cursor.lower()]
    plain = [n for n in leading if _plain(n)]  # another name is read without the hint
    return min(plain, key=lambda n: (widths[n], n)) if plain else None


def _plain(name: str) -> bool:
    try:
        check_identifier(name)
    except ConfigError:
        return False
    return True


def check_clock(conn: pymysql.connections.Connection, src: SourceTable) -> str:
    """Compare MySQL's time zone with S3RS_SOURCE_TIMEZONE before a run reads anything.

    A mismatch that moves the safety bound or the partition windows raises ConfigError
    naming both: a TIMESTAMP cursor (read as UTC, clock.py) under a zone that is not UTC,
    and a DATETIME cursor MySQL stamps itself (DEFAULT / ON UPDATE CURRENT_TIMESTAMP, in the
    server's zone) under another zone. A DATETIME cursor the application writes is in the
    configured zone by definition: a different server zone is returned as a warning (it
    matters if the application writes NOW() into it). "" when the zones agree."""
    configured = source_timezone()
    cursor = next(c for c in src.columns if c.name == src.cursor)
    if cursor.data_type == "timestamp":
        if not is_utc(configured):
            raise ConfigError(
                f"table {src.schema}.{src.table}: cursor column {src.cursor!r} is a TIMESTAMP, "
                f"read as UTC instants, but S3RS_SOURCE_TIMEZONE is {configured!r}: partition "
                "windows and the safety bound would be off by that zone's offset. Set "
                "S3RS_SOURCE_TIMEZONE=UTC (TIMESTAMP cursors need no other zone)"
            )
        return ""
    with conn.cursor() as cur:
        cur.execute("SELECT @@global.time_zone, @@system_time_zone, UTC_TIMESTAMP()")
        server_tz, system_tz, now = cur.fetchone()
        instants = sample_instants(now)
        cur.execute(
            "SELECT "
            + ", ".join(
                "TIMESTAMPDIFF(SECOND, %s, CONVERT_TZ(%s, '+00:00', @@global.time_zone))"
                for _ in instants
            ),
            [v for t in instants for v in (t, t)],
        )
        server = [None if v is None else timedelta(seconds=int(v)) for v in cur.fetchone()]
        cur.execute(
            "SELECT LOWER(CONCAT(COALESCE(COLUMN_DEFAULT, ''), ' ', EXTRA)) "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "AND COLUMN_NAME = %s",
            (src.schema, src.table, src.cursor),
        )
        row = cur.fetchone()
    if server == offsets(configured, instants):
        return ""
    stamped = row is not None and "current_timestamp" in row[0]
    zones = (
        f"MySQL's @@time_zone is {server_tz!r} (@@system_time_zone {system_tz!r}) but "
        f"S3RS_SOURCE_TIMEZONE is {configured!r}"
    )
    if stamped:
        raise ConfigError(
            f"table {src.schema}.{src.table}: {zones}. Its cursor column {src.cursor!r} is "
            "stamped by MySQL (DEFAULT / ON UPDATE CURRENT_TIMESTAMP) in the server's zone, "
            "so the safety bound and the partition windows would be off by the difference "
            "and rows could be skipped. Set S3RS_SOURCE_TIMEZONE to the server's zone; "
            "nothing was read"
        )
    return (
        f"table {src.schema}.{src.table}: {zones}; the cursor column {src.cursor!r} is read "
        f"as {configured} wall-clock time. If the application writes it with NOW(), "
        "set S3RS_SOURCE_TIMEZONE to the server's zone"
    )


def _drop_excluded(cfg: TableConfig, columns: list[SourceColumn]) -> list[SourceColumn]:
    """`columns` without the table's `exclude_columns`; an excluded name MySQL does not
    know is a configuration error (a typo would otherwise copy the secret it meant to
    keep out). Excluded columns are not type-checked: excluding one is also how a column
    of a type s3rs cannot carry is left behind."""
    if not cfg.exclude_columns:
        return columns
    known = {c.name.lower() for c in columns}
    unknown = [n for n in cfg.exclude_columns if n.lower() not in known]
    if unknown:
        raise SourceSchemaError(
            f"table {cfg.name}: exclude_columns names column(s) {unknown} that the table does "
            f"not have (its columns: {', '.join(c.name for c in columns)})"
        )
    drop = {n.lower() for n in cfg.exclude_columns}
    return [c for c in columns if c.name.lower() not in drop]
