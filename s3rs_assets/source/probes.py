"""Index probes of the (cursor, pk) keyset: the first and last rows, chunk plans, and the
count of rows a run cannot read (`source_counts`)."""

from __future__ import annotations

import calendar
import math
from dataclasses import replace
from datetime import datetime

import pymysql

from s3rs_assets.cursor import ChunkPlan, KeySpan, SubRange, after, below, literal
from s3rs_assets.errors import IntegrityError
from s3rs_assets.identifiers import mysql_quote
from s3rs_assets.source.bound import SafetyBound
from s3rs_assets.source.table import SourceTable
from s3rs_assets.types import TEMPORAL, invalid_date
from s3rs_assets.watermark import Position, SourceCounts


def invalid_date_ranges(cursor: str, start: datetime, upper: datetime) -> str:
    """Where the values `types.invalid_date` names sort in [start, upper), as index ranges
    (up to 20 per year), so counting them costs no scan of the rows between: 'Y-00-..' just
    before 'Y-01-01', 'Y-M-00 ..' just before 'Y-M-01', and the days a month lacks
    ('Y-02-30', 'Y-04-31') after its last day's last instant and before 'Y-M+1-00'."""
    spans = []
    for y in range(start.year, upper.year + 1):
        spans.append((">=", f"{y:04d}-00-00", f"{y:04d}-01-01"))
        spans += [(">=", f"{y:04d}-{m:02d}-00", f"{y:04d}-{m:02d}-01") for m in range(1, 13)]
        spans += [(">", f"{y:04d}-{m:02d}-{last:02d} 23:59:59.999999", f"{y:04d}-{m + 1:02d}-00")
                  for m in range(1, 12) if (last := calendar.monthrange(y, m)[1]) < 31]
    ranges = " OR ".join(f"({cursor} {op} '{lo}' AND {cursor} < '{hi}')" for op, lo, hi in spans)
    return f"{cursor} >= {literal(start)} AND {cursor} < {literal(upper)} AND ({ranges})"


def source_counts(
    conn: pymysql.connections.Connection, src: SourceTable, start: datetime, bound: SafetyBound
) -> SourceCounts:
    """Count the rows this run cannot read (see `SourceCounts`), with index range scans:
    below `start` (NULL, zero dates, before start), the zero-in-date values and days a month
    lacks between `start` and the bound ('2026-11-00 10:00', '2026-02-30', which a lax
    sql_mode accepts and no position can hold: counted with the zero dates, never read), and
    from the bound up."""
    c = mysql_quote(src.cursor)
    bad = invalid_date(c)
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT SUM({c} IS NULL), SUM({bad}), SUM(NOT {bad} AND {c} < {literal(start)}) "
            f"FROM {src.qualified} WHERE {c} IS NULL OR {c} < {literal(start)}"
        )
        null, zero, before = (int(v or 0) for v in cur.fetchone())
        if start < bound.upper:
            cur.execute(
                f"SELECT COUNT(*) FROM {src.qualified} WHERE "
                f"{invalid_date_ranges(c, start, bound.upper)}"
            )
            zero += int(cur.fetchone()[0] or 0)
        now = literal(bound.server_now)
        cur.execute(
            f"SELECT SUM(NOT {bad}), SUM(NOT {bad} AND {c} > {now}), "
            f"MAX(IF({bad}, NULL, {c})), SUM({bad} AND {c} >= {literal(start)}) "
            f"FROM {src.qualified} WHERE {c} >= {literal(bound.upper)}"
        )
        above, future, latest, zero_above = cur.fetchone()
    future = int(future or 0)
    return SourceCounts(
        counted_at=bound.server_now,
        upper_bound=bound.upper,
        null_cursor=null,
        zero_date_cursor=zero + int(zero_above or 0),
        before_start=before,
        above_bound=int(above or 0),
        future=future,
        latest_future=latest if future else None,
    )


def first_row_sql(src: SourceTable, start: Position, upper: datetime) -> str:
    """The statement of `first_row` (also run batched: `scan.rows_at`)."""
    keys = src.keys
    return (
        f"SELECT {', '.join(keys.quoted)} FROM {src.qualified} WHERE {after(start, keys)} "
        f"AND {below(upper, keys)} ORDER BY {keys.order_by} LIMIT 1"
    )


def last_row_sql(src: SourceTable, since: datetime, upper: datetime) -> str:
    """The statement of `last_row` (also run batched: `scan.rows_at`)."""
    keys = src.keys
    desc = ", ".join(f"{q} DESC" for q in keys.quoted)
    return (
        f"SELECT {', '.join(keys.quoted)} FROM {src.qualified} WHERE {mysql_quote(src.cursor)} "
        f">= {literal(since)} AND {below(upper, keys)} ORDER BY {desc} LIMIT 1"
    )


def first_row(
    conn: pymysql.connections.Connection, src: SourceTable, start: Position, upper: datetime
) -> Position | None:
    """The smallest (cursor, pk) after `start` and below `upper`: one index-only probe, so a
    run jumps over any stretch of empty partitions at the cost of one query."""
    with conn.cursor() as cur:
        cur.execute(first_row_sql(src, start, upper))
        row = cur.fetchone()
    return None if row is None else Position(c=row[0], pk=list(row[1:]))


def last_row(
    conn: pymysql.connections.Connection, src: SourceTable, since: datetime, upper: datetime
) -> Position | None:
    """The greatest (cursor, pk) at or after `since` and below `upper` (one index probe)."""
    with conn.cursor() as cur:
        cur.execute(last_row_sql(src, since, upper))
        row = cur.fetchone()
    return None if row is None else Position(c=row[0], pk=list(row[1:]))


def plan_chunk(
    conn: pymysql.connections.Connection,
    src: SourceTable,
    start: Position,
    upper: datetime,
    rows: int,
    parts: int,
    read: bool = False,
) -> ChunkPlan | None:
    """Find the next chunk's end and its sub-range seams with index-only probes; with `read`
    also what a backup needs before reading it: the key spans it reads its large sub-ranges
    by (`with_key_spans`) and the refusal of dates no warehouse holds in a key column
    (`refuse_invalid_key_dates`).

    The chunk is the next `rows` rows after `start` (fewer where the range runs out), cut
    into sub-ranges of `step` rows; the seams are the inclusive ends of disjoint
    sub-ranges covering it. Each seam is one `LIMIT 1 OFFSET step-1` probe from the seam
    before it (`nth_row`): an index range walk, no temporary table, no sort. Where fewer
    than a sub-range's rows remain, the rest (under `step` rows) is numbered by
    `plan_window`. The seams are those `plan_window` finds for the whole chunk (every
    `step`-th row and the last), at about a quarter of its MySQL CPU (100,000-row chunks of
    the decimal bench table: 0.025 CPU-s a chunk against 0.092).
    """
    step = max(1, math.ceil(rows / parts))
    ranges: list[SubRange] = []
    lo, done = start, 0
    while done < rows:
        want = min(step, rows - done)
        end = nth_row(conn, src, lo, upper, want)
        if end is None:  # fewer than `want` rows left: the last of them, and how many
            tail = plan_window(conn, src, lo, upper, want - 1, 1)
            if tail is not None:
                ranges.extend(tail.ranges)
                done += tail.rows
            break
        ranges.append(SubRange(lo, end, want))
        lo, done = end, done + want
    if not ranges:
        return None
    plan = ChunkPlan(start=start, end=ranges[-1].end, rows=done, ranges=tuple(ranges))
    if not read:
        return plan
    refuse_invalid_key_dates(conn, src, plan, upper)
    return with_key_spans(conn, src, plan)


def refuse_invalid_key_dates(
    conn: pymysql.connections.Connection, src: SourceTable, plan: ChunkPlan, upper: datetime
) -> None:
    """Raise IntegrityError, before anything of the chunk is read, when a row of it holds
    a date no other database can hold ('0000-00-00', '2025-00-15', '2025-02-30': a lax
    sql_mode lets them in) in a DATE/DATETIME/TIMESTAMP primary-key column: connectorx
    would read it as NULL, which no key may be (the load then failed on a NOT NULL
    violation that named neither the row nor the cause), and the JDBC driver rolls
    '2025-00-15' over to another date, a silently wrong key. When the key is the table's
    PRIMARY key (in every InnoDB index entry) the count walks the cursor index and reads no
    row. Tables without such a column pay nothing."""
    cols = [c.name for c in src.columns if c.name in src.primary_key and c.data_type in TEMPORAL]
    if not cols:
        return
    keys = src.keys
    chunk = SubRange(plan.start, plan.end, plan.rows).predicate(keys)
    test = " OR ".join(invalid_date(mysql_quote(c)) for c in cols)
    count = f"SELECT COUNT(*), MIN({keys.quoted[0]}) FROM {src.read_from} WHERE "
    with conn.cursor() as cur:
        cur.execute(f"{count}{chunk} AND ({test})")
        if not cur.fetchone()[0]:
            return
        # the message counts them up to the bound (a walk of the rest, once, on failure)
        cur.execute(f"{count}{after(plan.start, keys)} AND {below(upper, keys)} AND ({test})")
        n, first = cur.fetchone()
    if n:
        names = ", ".join(cols)
        raise IntegrityError(
            f"{src.schema}.{src.table}: {n} row(s) from {src.cursor} {first} on hold a date no "
            f"warehouse can hold in primary-key column(s) {names} ('0000-00-00', a zero month "
            "or day, or a day its month lacks such as '2025-02-30'), so their key cannot be "
            "copied; nothing from there on was read. Correct those rows in MySQL (SELECT "
            f"... WHERE {test} finds them), or set primary_key in tables.yaml to columns "
            "without such dates: the next sync goes on from where this one stopped"
        )


#: a sub-range is read by its key span when the span holds at most this many key values
#: per row planned: scanning the clustered rows between costs less than a lookup per row
#: up to ~3 (every row of the span read and tested against the predicate), so 2 leaves room
SPAN_PER_ROW = 2
#: and when it holds this many rows: below, the lookups it saves (2-3 us a row) cost less
#: than the probe's round trip, and a small increment's plan stays one query
MIN_SPAN_ROWS = 2_000


def with_key_spans(
    conn: pymysql.connections.Connection, src: SourceTable, plan: ChunkPlan
) -> ChunkPlan:
    """`plan` with each large sub-range given its rows' smallest and largest `span_column`
    value, where that span is narrow (`SPAN_PER_ROW`): one query for the plan, from the
    cursor index alone (`SourceTable.read_from_for` then reads the span).

    Reading by the span reads the same rows: the predicate still names them, and a row
    that joins the sub-range after this probe and outside the span is one written below the
    safety bound after planning, which the read would miss by a moment anyway (a straggler:
    `matches_mysql` counts it, reconcile copies it)."""
    col = src.span_column
    if col is None:
        return plan
    large = [i for i, r in enumerate(plan.ranges) if r.rows >= MIN_SPAN_ROWS]
    if not large:
        return plan
    q = mysql_quote(col)
    sql = " UNION ALL ".join(
        f"SELECT {i}, MIN({q}), MAX({q}) FROM {src.read_from} "
        f"WHERE {plan.ranges[i].predicate(src.keys)}"
        for i in large
    )
    with conn.cursor() as cur:
        cur.execute(sql)
        found = {int(i): (lo, hi) for i, lo, hi in cur.fetchall() if lo is not None}
    ranges = list(plan.ranges)
    for i, (lo, hi) in found.items():
        r = ranges[i]
        if int(hi) - int(lo) + 1 <= SPAN_PER_ROW * r.rows:
            ranges[i] = replace(r, span=KeySpan(col, int(lo), int(hi)))
    return replace(plan, ranges=tuple(ranges))


def nth_row(
    conn: pymysql.connections.Connection, src: SourceTable, start: Position, upper: datetime,
    n: int,
) -> Position | None:
    """The `n`-th row after `start` and below `upper` in (cursor, pk) order, None when there
    are fewer: one index range walk of `n` entries."""
    keys = src.keys
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT {', '.join(keys.quoted)} FROM {src.qualified} "
            f"WHERE {after(start, keys)} AND {below(upper, keys)} "
            f"ORDER BY {keys.order_by} LIMIT 1 OFFSET {int(n) - 1}"
        )
        row = cur.fetchone()
    return None if row is None else Position(c=row[0], pk=list(row[1:]))


def plan_window(
    conn: pymysql.connections.Connection,
    src: SourceTable,
    start: Position,
    upper: datetime,
    rows: int,
    parts: int,
) -> ChunkPlan | None:
    """`plan_chunk` in one query: the inner query walks the (cursor, pk) index from `start`
    for at most `rows` entries; the window functions number them, and we keep every
    `step`-th row and the last one. MySQL numbers them in a temporary table: `plan_chunk`
    uses it only for the rest of a range shorter than one sub-range (and tests compare the
    two)."""
    if rows < 1:
        return None
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
