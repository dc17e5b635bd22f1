"""MySQL's clock and the safety bound: the exclusive upper end of a run's reads.

Everything here works with a least-privilege user holding only SELECT on the schema. The
one thing that needs more (PROCESS, to read information_schema.innodb_trx) degrades to a
lag-only safety bound and says so in `SafetyBound.note`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pymysql

from s3rs_assets.clock import lowest_reading_from, wall_clock, zone


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
