"""What s3rs asks MySQL directly (pymysql, never Spark): table shape, clock, chunk plans.

Everything here works with a least-privilege user holding only SELECT on the schema. The
one thing that needs more (PROCESS, to read information_schema.innodb_trx) degrades to a
lag-only safety bound and says so in `SafetyBound.note`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pymysql

from s3rs_assets.clock import (
    is_utc,
    lowest_reading_from,
    offsets,
    sample_instants,
    source_timezone,
    wall_clock,
    zone,
)
from s3rs_assets.config import TableConfig
from s3rs_assets.cursor import ChunkPlan, KeyColumns, SubRange, after, below, literal
from s3rs_assets.errors import ConfigError, SourceSchemaError
from s3rs_assets.identifiers import mysql_quote, mysql_table
from s3rs_assets.types import (
    TEMPORAL,
    SourceColumn,
    column_type,
    select_expr,
    zero_dates_expr,
)
from s3rs_assets.watermark import Position, SourceCounts


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
    def cursor_is_date(self) -> bool:
        """A DATE cursor: its values are whole days, so the safety bound is too."""
        return any(c.name == self.cursor and c.data_type == "date" for c in self.columns)

    @property
    def qualified(self) -> str:
        return mysql_table(self.schema, self.table)

    def select_list(self, reader: str = "jdbc") -> str:
        """What a reader selects: every carried column, then the zero-date count."""
        keys = (self.cursor, *self.primary_key)
        exprs = [select_expr(c, reader, key=c.name in keys) for c in self.columns]
        zero = zero_dates_expr(self.columns, keys)
        return ", ".join([*exprs, zero] if zero else exprs)


def describe(conn: pymysql.connections.Connection, cfg: TableConfig) -> SourceTable:
    """Check the table, its cursor and primary key; raise SourceSchemaError naming the fault.
    Long on purpose: the catalog checks in the order an operator fixes them; each failure names
    its column."""
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
            hidden = [k for k in pk if k.lower() not in by_name]
            if hidden:
                raise SourceSchemaError(
                    f"table {cfg.name}: exclude_columns names primary key column(s) {hidden}: "
                    "s3rs needs the key to checkpoint and merge rows"
                )
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s AND COLUMN_NAME = %s AND SEQ_IN_INDEX = 1",
            (cfg.schema, cfg.table, cursor_col.name),
        )
        indexed = cur.fetchone()[0] > 0
    return SourceTable(cfg.schema, cfg.table, columns, pk, cursor_col.name, indexed)


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


@dataclass(frozen=True)
class Blocker:
    """A MySQL thread that may still commit rows stamped at or after `started`."""

    thread_id: int
    started: datetime
    why: str  # "open transaction" or "statement in flight"


@dataclass(frozen=True)
class SafetyBound:
    """The exclusive upper bound of this run's reads, on the MySQL server's clock."""

    server_now: datetime
    upper: datetime
    lag: timedelta
    trx_readable: bool
    blockers: tuple[Blocker, ...] = ()
    note: str = ""

    @property
    def oldest_trx(self) -> datetime | None:
        return min((b.started for b in self.blockers if b.why == _TRX), default=None)

    @property
    def oldest_statement(self) -> datetime | None:
        return min((b.started for b in self.blockers if b.why == _STATEMENT), default=None)

    def metadata(self) -> dict[str, Any]:
        def iso(ts: datetime | None) -> str | None:
            return ts.isoformat() if ts else None

        return {
            "server_now": self.server_now.isoformat(),
            "upper_bound": self.upper.isoformat(),
            "lag_seconds": self.lag.total_seconds(),
            "oldest_open_write_trx": iso(self.oldest_trx),
            "oldest_statement_in_flight": iso(self.oldest_statement),
            # thread ids only: statement text may hold values nobody should see in the UI
            "held_back_by_threads": sorted({b.thread_id for b in self.blockers
                                            if b.started < self.server_now - self.lag}),
            "innodb_trx_readable": self.trx_readable,
            "note": self.note,
        }


def server_utc(conn: pymysql.connections.Connection) -> datetime:
    """MySQL's clock as a naive UTC instant (UTC_TIMESTAMP: whatever the session's zone)."""
    with conn.cursor() as cur:
        cur.execute("SELECT UTC_TIMESTAMP(6)")
        return cur.fetchone()[0]


def server_now(conn: pymysql.connections.Connection) -> datetime:
    """MySQL's clock on the cursor values' clock: wall-clock time of S3RS_SOURCE_TIMEZONE."""
    return wall_clock(server_utc(conn))


_TRX, _STATEMENT = "open transaction", "statement in flight"
#: Transactions that may still commit rows stamped before now: those that wrote or locked
#: rows, wait for a lock, or have a statement in flight (MySQL fixes NOW() when a statement
#: starts, so a long INSERT ... SELECT or a scanning UPDATE writes "old" timestamps late).
#: Autocommit plain SELECTs (`trx_autocommit_non_locking`) and READ ONLY transactions can
#: never write: ignored, so such readers (reports, other syncs) do not hold the bound back.
#: A dump in an ordinary transaction (mysqldump --single-transaction) does, until it ends.
_OPEN_TRX_SQL = (
    "SELECT trx_mysql_thread_id, CONVERT_TZ(trx_started, 'SYSTEM', '+00:00') "
    "FROM information_schema.INNODB_TRX "
    "WHERE trx_mysql_thread_id <> CONNECTION_ID() AND ("
    "trx_rows_modified > 0 OR trx_rows_locked > 0 OR trx_state = 'LOCK WAIT' "
    "OR (trx_query IS NOT NULL AND trx_autocommit_non_locking = 0 AND trx_is_read_only = 0))"
)
#: Statements in flight that InnoDB does not list yet (an INSERT ... SELECT still evaluating
#: its derived table has no InnoDB transaction, but its NOW() is already fixed). The start is
#: UTC_TIMESTAMP(6) - TIME_MS (MariaDB; whole seconds on MySQL), less one second of margin.
_STATEMENTS_SQL = (
    "SELECT p.ID, "
    "TIMESTAMPADD(MICROSECOND, -CAST(p.{elapsed} AS SIGNED) - 1000000, UTC_TIMESTAMP(6)) "
    "FROM information_schema.PROCESSLIST p "
    "LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID "
    "WHERE p.ID <> CONNECTION_ID() AND p.COMMAND IN ('Query', 'Execute') "
    "AND p.USER NOT IN ('system user', 'event_scheduler') "
    "AND COALESCE(t.trx_autocommit_non_locking, 0) = 0 AND COALESCE(t.trx_is_read_only, 0) = 0"
)
_ELAPSED = ("TIME_MS * 1000", "TIME * 1000000")  # MariaDB, then MySQL


def blockers(conn: pymysql.connections.Connection) -> list[Blocker]:
    """Every other thread whose rows may still commit with a timestamp before now; their
    starts as naive UTC instants (innodb_trx shows the server's SYSTEM zone: converted).

    Raises pymysql's error 1227 without the PROCESS privilege (innodb_trx unreadable)."""
    with conn.cursor() as cur:
        cur.execute(_OPEN_TRX_SQL)
        found = [Blocker(int(r[0]), r[1], _TRX) for r in cur.fetchall()]
        for elapsed in _ELAPSED:
            try:
                cur.execute(_STATEMENTS_SQL.format(elapsed=elapsed))
            except pymysql.err.OperationalError as e:
                if e.args[0] != 1054:  # unknown column: MySQL has no TIME_MS
                    raise
                continue
            found += [Blocker(int(r[0]), r[1], _STATEMENT) for r in cur.fetchall()]
            break
    return found


def safety_bound(
    conn: pymysql.connections.Connection, lag: timedelta, *, whole_days: bool = False
) -> SafetyBound:
    """The earliest of MySQL's clock less `lag` and the start of every transaction or
    statement that may still commit rows stamped before now (`blockers`); with `whole_days`
    (a DATE cursor) rounded down to the start of that day, since a row written later today
    carries today's date: today's rows are read once the day is over, never half of them.

    What it protects: cursor values MySQL stamps itself (NOW(), CURRENT_TIMESTAMP, ON UPDATE
    CURRENT_TIMESTAMP) by transactions and statements on this server. What it cannot: values
    the application computes on its own clock, or replicated rows carrying the primary's
    timestamps, which may land below the bound long after it passed; `lag` must cover those
    (reconcile repairs what slips through).

    Taken in UTC and turned into wall-clock values of S3RS_SOURCE_TIMEZONE (clock.py), an
    hour earlier around the autumn change, when later rows repeat earlier wall-clock values.
    """
    now_utc = server_utc(conn)
    upper_utc = now_utc - lag
    found: list[Blocker] = []
    readable, note = True, ""
    try:
        found = blockers(conn)
    except pymysql.err.MySQLError as e:
        readable = False
        note = (
            "information_schema.innodb_trx is not readable by this user "
            f"({e.args[0]}: needs PROCESS); the bound uses the lag only"
        )
    oldest = min(found, key=lambda b: b.started, default=None)
    held = oldest is not None and oldest.started < upper_utc
    if held:
        upper_utc = oldest.started
    # Instants (UTC) become the cursor's wall-clock values of S3RS_SOURCE_TIMEZONE here.
    found = [Blocker(b.thread_id, wall_clock(b.started), b.why) for b in found]
    now = wall_clock(now_utc)
    upper = lowest_reading_from(upper_utc.replace(tzinfo=UTC), zone())
    if not held and upper < wall_clock(upper_utc):
        note = (
            "held at the start of the hour the clocks repeat (daylight saving) until its "
            "second occurrence is over"
        )
    if held:
        oldest = next(b for b in found if b.thread_id == oldest.thread_id and b.why == oldest.why)
        note = (
            f"held back by an {oldest.why} (MySQL thread {oldest.thread_id}) started at "
            f"{oldest.started.isoformat()}"
            if oldest.why == _TRX
            else f"held back by a {oldest.why} (MySQL thread {oldest.thread_id}) started at "
            f"{oldest.started.isoformat()}"
        )
    if whole_days:
        day = datetime.combine(upper.date(), time.min)
        if day < upper:
            upper = day
            note = "; ".join(
                n for n in (note, "rounded down to the start of the day (DATE cursor)") if n
            )
    return SafetyBound(now, upper, lag, readable, tuple(found), note)


def source_counts(
    conn: pymysql.connections.Connection, src: SourceTable, start: datetime, bound: SafetyBound
) -> SourceCounts:
    """Count the rows this run cannot read (see `SourceCounts`): two index range scans, one
    below `start` (NULL, zero dates, before start) and one from the bound up."""
    c = mysql_quote(src.cursor)
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT SUM({c} IS NULL), SUM({c} = 0), SUM({c} <> 0 AND {c} < {literal(start)}) "
            f"FROM {src.qualified} WHERE {c} IS NULL OR {c} < {literal(start)}"
        )
        null, zero, before = (int(v or 0) for v in cur.fetchone())
        now = literal(bound.server_now)
        cur.execute(
            f"SELECT COUNT(*), SUM({c} > {now}), MAX({c}) FROM {src.qualified} "
            f"WHERE {c} >= {literal(bound.upper)}"
        )
        above, future, latest = cur.fetchone()
    future = int(future or 0)
    return SourceCounts(
        counted_at=bound.server_now,
        upper_bound=bound.upper,
        null_cursor=null,
        zero_date_cursor=zero,
        before_start=before,
        above_bound=int(above or 0),
        future=future,
        latest_future=latest if future else None,
    )


def first_row(
    conn: pymysql.connections.Connection, src: SourceTable, start: Position, upper: datetime
) -> Position | None:
    """The smallest (cursor, pk) after `start` and below `upper`: one index-only probe, so a
    run jumps over any stretch of empty partitions at the cost of one query."""
    keys = src.keys
    cols = ", ".join(keys.quoted)
    sql = (
        f"SELECT {cols} FROM {src.qualified} WHERE {after(start, keys)} "
        f"AND {below(upper, keys)} ORDER BY {keys.order_by} LIMIT 1"
    )
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    return None if row is None else Position(c=row[0], pk=list(row[1:]))


def last_row(
    conn: pymysql.connections.Connection, src: SourceTable, since: datetime, upper: datetime
) -> Position | None:
    """The greatest (cursor, pk) at or after `since` and below `upper` (one index probe)."""
    keys = src.keys
    cols = ", ".join(keys.quoted)
    desc = ", ".join(f"{q} DESC" for q in keys.quoted)
    sql = (
        f"SELECT {cols} FROM {src.qualified} WHERE {mysql_quote(src.cursor)} >= "
        f"{literal(since)} AND {below(upper, keys)} ORDER BY {desc} LIMIT 1"
    )
    with conn.cursor() as cur:
        cur.execute(sql)
        row = cur.fetchone()
    return None if row is None else Position(c=row[0], pk=list(row[1:]))


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
