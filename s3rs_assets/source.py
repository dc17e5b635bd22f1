"""What s3rs asks MySQL directly (pymysql, never Spark): table shape, clock, chunk plans.

Everything here works with a least-privilege user holding only SELECT on the schema. The
one thing that needs more (PROCESS, to read information_schema.innodb_trx) degrades to a
lag-only safety bound and says so in `SafetyBound.note`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pymysql

from s3rs_assets.config import TableConfig
from s3rs_assets.cursor import ChunkPlan, KeyColumns, SubRange, after, below, literal
from s3rs_assets.errors import SourceSchemaError
from s3rs_assets.identifiers import mysql_quote, mysql_table
from s3rs_assets.types import SourceColumn, column_type, select_expr
from s3rs_assets.watermark import Position

TEMPORAL = ("datetime", "timestamp", "date")


@dataclass(frozen=True)
class SourceTable:
    """A configured table checked against MySQL's catalog."""

    schema: str
    table: str
    columns: list[SourceColumn]
    primary_key: tuple[str, ...]
    cursor: str
    cursor_indexed: bool

    @property
    def keys(self) -> KeyColumns:
        return KeyColumns(self.cursor, self.primary_key)

    @property
    def qualified(self) -> str:
        return mysql_table(self.schema, self.table)

    def select_list(self, reader: str = "jdbc") -> str:
        return ", ".join(select_expr(c, reader) for c in self.columns)


def describe(conn: pymysql.connections.Connection, cfg: TableConfig) -> SourceTable:
    """Check the table, its cursor and primary key; raise SourceSchemaError naming the fault."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, LOWER(DATA_TYPE), LOWER(COLUMN_TYPE), IS_NULLABLE, "
            "CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
            "ORDER BY ORDINAL_POSITION",
            (cfg.schema, cfg.table),
        )
        rows = cur.fetchall()
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
            )
            for r in rows
        ]
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
        else:
            cur.execute(
                "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
                (cfg.schema, cfg.table),
            )
            pk = tuple(r[0] for r in cur.fetchall())
            if not pk:
                raise SourceSchemaError(
                    f"table {cfg.name} has no primary key: set primary_key in tables.yaml to "
                    "columns that identify a row"
                )
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND COLUMN_NAME = %s AND SEQ_IN_INDEX = 1",
            (cfg.schema, cfg.table, cursor_col.name),
        )
        indexed = cur.fetchone()[0] > 0
    return SourceTable(cfg.schema, cfg.table, columns, pk, cursor_col.name, indexed)


@dataclass(frozen=True)
class SafetyBound:
    """The exclusive upper bound of this run's reads, on the MySQL server's clock."""

    server_now: datetime
    upper: datetime
    lag: timedelta
    oldest_trx: datetime | None
    trx_readable: bool
    note: str = ""

    def metadata(self) -> dict[str, Any]:
        return {
            "server_now": self.server_now.isoformat(),
            "upper_bound": self.upper.isoformat(),
            "lag_seconds": self.lag.total_seconds(),
            "oldest_open_write_trx": self.oldest_trx.isoformat() if self.oldest_trx else None,
            "innodb_trx_readable": self.trx_readable,
            "note": self.note,
        }


def server_now(conn: pymysql.connections.Connection) -> datetime:
    with conn.cursor() as cur:
        cur.execute("SELECT NOW(6)")
        return cur.fetchone()[0]


def safety_bound(conn: pymysql.connections.Connection, lag: timedelta) -> SafetyBound:
    """min(NOW(6) - lag, start of the oldest open transaction that has written rows).

    Transactions that have not written anything yet are ignored: whatever they write later
    is stamped after this moment, so they cannot land below the bound, and a long
    read-only snapshot (a dump, a report) would otherwise stall every sync.
    """
    now = server_now(conn)
    upper = now - lag
    oldest, readable, note = None, True, ""
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT MIN(trx_started) FROM information_schema.innodb_trx "
                "WHERE trx_mysql_thread_id <> CONNECTION_ID() "
                "AND (trx_rows_modified > 0 OR trx_rows_locked > 0)"
            )
            oldest = cur.fetchone()[0]
    except pymysql.err.MySQLError as e:
        readable = False
        note = (
            "information_schema.innodb_trx is not readable by this user "
            f"({e.args[0]}: needs PROCESS); the bound uses the lag only"
        )
    if oldest is not None and oldest < upper:
        upper = oldest
        note = f"held back by an open transaction started at {oldest.isoformat()}"
    return SafetyBound(now, upper, lag, oldest, readable, note)


@dataclass
class Anomalies:
    """Rows no partition will ever read; reported, never silently dropped."""

    null_cursor: int = 0
    zero_date_cursor: int = 0
    before_start: int = 0
    notes: list[str] = field(default_factory=list)

    def metadata(self) -> dict[str, int]:
        return {
            "null_cursor_rows": self.null_cursor,
            "zero_date_cursor_rows": self.zero_date_cursor,
            "rows_before_start": self.before_start,
        }


def anomalies(conn: pymysql.connections.Connection, src: SourceTable, start: datetime) -> Anomalies:
    c = mysql_quote(src.cursor)
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT SUM({c} IS NULL), SUM({c} = 0), SUM({c} <> 0 AND {c} < {literal(start)}) "
            f"FROM {src.qualified} WHERE {c} IS NULL OR {c} < {literal(start)}"
        )
        null, zero, before = (int(v or 0) for v in cur.fetchone())
    return Anomalies(null, zero, before)


def plan_chunk(
    conn: pymysql.connections.Connection,
    src: SourceTable,
    start: Position,
    upper: datetime,
    rows: int,
    parts: int,
) -> ChunkPlan | None:
    """Find the next chunk's end and its sub-range seams with one index-only query.

    The inner query walks the (cursor, pk) index from `start` for at most `rows` entries;
    the window functions number them, and we keep every `step`-th row and the last one.
    Those rows are the inclusive ends of disjoint sub-ranges covering the chunk.
    """
    keys = src.keys
    names = keys.quoted
    step = max(1, math.ceil(rows / parts))
    cols = ", ".join(names)
    sql = (
        f"SELECT {cols}, rn, total FROM ("
        f"SELECT {cols}, ROW_NUMBER() OVER (ORDER BY {keys.order_by}) AS rn, "
        f"COUNT(*) OVER () AS total FROM ("
        f"SELECT {cols} FROM {src.qualified} "
        f"WHERE {after(start, keys)} AND {below(upper, keys)} "
        f"ORDER BY {keys.order_by} LIMIT {int(rows)}) AS head) AS numbered "
        f"WHERE rn % {step} = 0 OR rn = total ORDER BY rn"
    )
    with conn.cursor() as cur:
        cur.execute(sql)
        seams = cur.fetchall()
    if not seams:
        return None
    ranges: list[SubRange] = []
    lo, lo_rn = start, 0
    for row in seams:
        end = Position(c=row[0], pk=list(row[1 : 1 + len(src.primary_key)]))
        rn = int(row[-2])
        ranges.append(SubRange(lo, end, rn - lo_rn))
        lo, lo_rn = end, rn
    return ChunkPlan(start=start, end=ranges[-1].end, rows=lo_rn, ranges=tuple(ranges))


def count_between(
    conn: pymysql.connections.Connection, src: SourceTable, start: Position, upper: datetime
) -> int:
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT COUNT(*) FROM {src.qualified} WHERE {after(start, src.keys)} "
            f"AND {below(upper, src.keys)}"
        )
        return int(cur.fetchone()[0])
