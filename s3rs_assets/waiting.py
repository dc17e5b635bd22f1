"""Rows that wait at or above the safety bound: how many, and when they become readable.

A sync reads only below the bound (`source.safety_bound`): the earlier of MySQL's clock less
the table's `lag` and the start of the oldest transaction or statement that may still
commit rows stamped before now. Rows at or above it are *not yet* synced — neither lost nor
a mismatch. This module counts them and says when they become readable, so every command
tells the same story: `s3rs sync` with nothing to read says "1,000 rows wait, readable
from 15:29:10" instead of "nothing new"; `s3rs verify` and the `matches_mysql` check show
them apart from the comparison instead of calling them missing.

When a row with cursor value `c` becomes readable, on MySQL's clock: at `c + lag` (a DATE
cursor holds whole days, so the day after `c`, plus lag); and, when a transaction or
statement that started at or before `c` holds the bound back, not before it ends — a time
nobody can know, so the message names its MySQL thread instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from s3rs_assets.config import TableConfig
from s3rs_assets.identifiers import mysql_quote, mysql_table, split_qualified
from s3rs_assets.source import Blocker, SafetyBound, describe, safety_bound

#: windows per counting query (one CASE branch each), as verify batches them
BATCH = 100


def _show(ts: datetime | None) -> str:
    return ts.isoformat(sep=" ", timespec="microseconds") if ts else "-"


def show_lag(lag: timedelta) -> str:
    """`5m`, `30s`, `2h`, `1d`, as tables.yaml writes a lag."""
    seconds = int(lag.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True)
class Waiting:
    """The rows of a table at or above `upper`, and the bound that says when they come."""

    table: str
    rows: int
    first: datetime | None  # the smallest cursor value among them
    last: datetime | None  # the largest
    future: int  # dated after MySQL's clock
    upper: datetime
    bound: SafetyBound
    whole_days: bool = False

    @property
    def holder(self) -> Blocker | None:
        """The transaction or statement holding the bound back (below `NOW() - lag`)."""
        lagged = self.bound.server_now - self.bound.lag
        held = [b for b in self.bound.blockers if b.started < lagged]
        return min(held, key=lambda b: b.started, default=None)

    def readable_at(self, cursor: datetime) -> datetime:
        """MySQL-clock time from which a row with this cursor value is below the bound (lag
        only: a holding transaction may keep it later, see `holder`)."""
        if self.whole_days:
            day = datetime.combine(cursor.date(), datetime.min.time())
            return day + timedelta(days=1) + self.bound.lag
        return cursor + self.bound.lag

    def lines(self) -> list[str]:
        """What a person needs: how many wait, from when they are read, what holds them."""
        if not self.rows:
            return []
        lag = show_lag(self.bound.lag)
        rule = (
            f"the day after their date, plus lag {lag}" if self.whole_days
            else f"their cursor + lag {lag}"
        )
        text = (
            f"{self.table}: not yet: {self.rows:,} row(s) wait at or above the safety bound "
            f"{_show(self.upper)} (cursor {_show(self.first)} .. {_show(self.last)})"
        )
        if self.future:
            text += f", {self.future:,} of them dated after MySQL's clock"
        out = [text]
        first_at = self.readable_at(self.first) if self.first else None
        last_at = self.readable_at(self.last) if self.last else None
        out.append(
            f"{self.table}: they become readable from {_show(first_at)} ({rule}; the last at "
            f"{_show(last_at)}; MySQL's clock is now {_show(self.bound.server_now)}): "
            "the first sync after that reads them"
        )
        holder = self.holder
        if holder is not None:
            out.append(
                f"{self.table}: the bound is held back by an {holder.why} (MySQL thread "
                f"{holder.thread_id}) started at {_show(holder.started)}: rows stamped from "
                "then on wait until it commits or rolls back"
            )
        return out

    def as_json(self) -> dict[str, Any]:
        holder = self.holder
        return {
            "rows": self.rows,
            "first_cursor": _show(self.first) if self.first else None,
            "last_cursor": _show(self.last) if self.last else None,
            "future_rows": self.future,
            "safety_bound": _show(self.upper),
            "readable_from": _show(self.readable_at(self.first)) if self.first else None,
            "held_by_thread": holder.thread_id if holder else None,
        }


def waiting(
    conn: Any, table: TableConfig, bound: SafetyBound, upper: datetime | None = None
) -> Waiting:
    """Count `table`'s rows at or above `upper` (default the bound's own): one index range
    scan on the cursor. `bound` says when they become readable (its lag and blockers)."""
    upper = bound.upper if upper is None else upper
    schema, name = split_qualified(table.name, "table")
    c = mysql_quote(table.cursor)
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT COUNT(*), MIN({c}), MAX({c}), COALESCE(SUM({c} > %s), 0) "
            f"FROM {mysql_table(schema, name)} WHERE {c} >= %s",
            (bound.server_now, upper),
        )
        rows, first, last, future = cur.fetchone()
    whole_days = first is not None and not isinstance(first, datetime)
    if whole_days:  # a DATE cursor comes back as date
        first = datetime.combine(first, datetime.min.time())
        last = datetime.combine(last, datetime.min.time())
    return Waiting(table.name, int(rows), first, last, int(future), upper, bound, whole_days)


def waiting_now(conn: Any, table: TableConfig, upper: datetime) -> Waiting:
    """The rows at or above `upper` (the bound a plan, run or comparison stopped at), said
    with the bound taken now: its lag, and the transaction holding it back if any."""
    src = describe(conn, table)
    bound = safety_bound(conn, table.lag, whole_days=src.cursor_is_date)
    return waiting(conn, table, bound, upper=upper)


def count_windows(
    conn: Any, table: TableConfig, windows: Sequence[tuple[datetime, datetime]]
) -> list[int]:
    """MySQL's row count in each [start, end) window of the cursor (one query per BATCH
    windows): what a check or verify left out of its comparison, counted apart."""
    schema, name = split_qualified(table.name, "table")
    c = mysql_quote(table.cursor)
    out: list[int] = []
    for i in range(0, len(windows), BATCH):
        part = list(windows[i : i + BATCH])
        whens = " ".join(f"WHEN {c} >= %s AND {c} < %s THEN {j}" for j in range(len(part)))
        params: list[Any] = [v for w in part for v in w]
        params += [min(s for s, _ in part), max(e for _, e in part)]
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT CASE {whens} END AS p, COUNT(*) FROM {mysql_table(schema, name)} "
                f"WHERE {c} >= %s AND {c} < %s GROUP BY p",
                params,
            )
            got = {int(p): int(n) for p, n in cur.fetchall() if p is not None}
        out += [got.get(j, 0) for j in range(len(part))]
    return out
