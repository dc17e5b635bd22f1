"""The keyset itself, against real MariaDB: no row lost or read twice at any chunk size.

These tests read the sub-range predicates with pymysql; Spark receives the very same
predicate strings (test_extract.py runs them through Spark).
"""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s3rs_assets.cursor import after, at_or_before, literal, position_token
from s3rs_assets.source import describe, plan_chunk, plan_window
from s3rs_assets.watermark import Position
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import make_ties_table, mysql_ids, table_cfg, ties

DAY = datetime(2025, 3, 4)
UPPER = datetime(2025, 3, 5)


@pytest.fixture(scope="module")
def ties_table(mysql_db):
    import pymysql

    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True)
    make_ties_table(conn, "ties10k", ties(10_000, DAY, groups=5))
    src = describe(conn, table_cfg(mysql_db, "ties10k"))
    yield conn, src
    conn.close()


def walk(conn, src, chunk: int, parts: int, start: Position | None = None) -> list[int]:
    """Plan chunk after chunk and read each sub-range; return ids in read order."""
    pos = start or Position(c=DAY)
    seen: list[int] = []
    with conn.cursor() as cur:
        while (plan := plan_chunk(conn, src, pos, UPPER, chunk, parts)) is not None:
            assert plan.rows <= chunk
            assert sum(r.rows for r in plan.ranges) == plan.rows
            for r in plan.ranges:
                cur.execute(f"SELECT id FROM {src.qualified} WHERE {r.predicate(src.keys)}")
                got = [row[0] for row in cur.fetchall()]
                assert len(got) == r.rows, "the index said how many rows a sub-range holds"
                seen.extend(got)
            assert plan.ranges[0].start == pos and plan.ranges[-1].end == plan.end
            pos = plan.end
    return seen


@pytest.mark.parametrize(("chunk", "parts"), [(7, 1), (7, 3), (1000, 2), (2500, 4), (10_000, 2)])
def test_every_row_once_whatever_the_chunk(ties_table, chunk, parts):
    conn, src = ties_table
    seen = walk(conn, src, chunk, parts)
    assert len(seen) == len(set(seen)), "no row read twice"
    assert sorted(seen) == mysql_ids(conn, "ties10k")


def test_chunk_of_one_row_walks_a_tie_group(ties_table, mysql_db):
    conn, src = ties_table
    with conn.cursor() as cur:
        cur.execute("SELECT MIN(update_at) FROM ties10k")
        first = cur.fetchone()[0]
        cur.execute(f"SELECT id FROM ties10k WHERE update_at = {literal(first)}")
        group = sorted(r[0] for r in cur.fetchall())
    # stop the walk at the first group's end: UPPER is exclusive
    seen = []
    pos = Position(c=DAY)
    while (
        plan := plan_chunk(conn, src, pos, first.replace(microsecond=first.microsecond + 1), 1, 1)
    ) is not None:
        seen.append(plan.end.pk[0])
        pos = plan.end
    assert seen == group, "2000 rows sharing one timestamp, one per chunk, in pk order"


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chunk=st.integers(min_value=40, max_value=4000), parts=st.integers(min_value=1, max_value=6))
def test_every_row_once_hypothesis(ties_table, chunk, parts):
    conn, src = ties_table
    seen = walk(conn, src, chunk, parts)
    assert len(seen) == len(set(seen)) == 10_000


class _Counting:
    """A connection whose cursors count the statements they run."""

    def __init__(self, conn) -> None:
        self.conn, self.statements = conn, []

    def cursor(self):
        outer, cur = self, self.conn.cursor()
        real = cur.execute

        def execute(sql, *a):
            outer.statements.append(sql)
            return real(sql, *a)

        cur.execute = execute
        return cur


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    chunk=st.integers(min_value=1, max_value=4000),
    parts=st.integers(min_value=1, max_value=6),
    skip=st.integers(min_value=0, max_value=10_000),
    upper_row=st.integers(min_value=1, max_value=10_000),
)
def test_probed_plans_equal_the_window_plan(ties_table, chunk, parts, skip, upper_row):
    """plan_chunk's OFFSET probes find the seams and counts the one-query window plan
    finds, from any position (inside ties, near the bound, at the end), with one probe per
    full sub-range and, where the range runs out, one more probe and one window query."""
    conn, src = ties_table
    with conn.cursor() as cur:
        cur.execute("SELECT update_at, id FROM ties10k ORDER BY update_at, id")
        order = cur.fetchall()
    start = Position(c=DAY)
    if skip:
        start = Position(c=order[skip - 1][0], pk=[order[skip - 1][1]])
    upper = order[upper_row - 1][0]  # rows tied with it and after are above the bound
    counting = _Counting(conn)
    got = plan_chunk(counting, src, start, upper, chunk, parts)
    want = plan_window(conn, src, start, upper, chunk, parts)
    assert got == want
    if want is None:
        assert 1 <= len(counting.statements) <= 2  # a probe, then the window of the rest
        return
    windows = [s for s in counting.statements if " OVER " in s]
    if want.rows == chunk:  # a full chunk: one probe per sub-range, no window query
        assert len(counting.statements) == len(want.ranges) and not windows
    else:
        assert len(counting.statements) <= len(want.ranges) + 2 and len(windows) <= 1


def test_resume_from_the_middle_of_a_tie(ties_table):
    conn, src = ties_table
    first = walk(conn, src, 3333, 2)[:3333]
    with conn.cursor() as cur:
        cur.execute(f"SELECT update_at FROM ties10k WHERE id = {first[-1]}")
        c = cur.fetchone()[0]
    rest = walk(conn, src, 1000, 3, start=Position(c=c, pk=[first[-1]]))
    assert sorted(first + rest) == mysql_ids(conn, "ties10k")


def test_predicates_are_lexicographic_and_escaped():
    from s3rs_assets.cursor import KeyColumns

    keys = KeyColumns("update_at", ("shop", "id"))
    pos = Position(c=datetime(2025, 1, 2, 3, 4, 5, 6), pk=["o'; DROP TABLE x; --", 5])
    sql = after(pos, keys)
    assert sql == (
        "(`update_at` > '2025-01-02 03:04:05.000006' OR (`update_at` = "
        "'2025-01-02 03:04:05.000006' AND ((`shop` > 'o\\'; DROP TABLE x; --' OR (`shop` = "
        "'o\\'; DROP TABLE x; --' AND (`id` > 5))))))"
    )
    assert at_or_before(pos, keys).count("<=") == 1
    assert (
        after(Position(c=datetime(2025, 1, 1)), keys)
        == "`update_at` >= '2025-01-01 00:00:00.000000'"
    )


def test_position_tokens_are_deterministic_and_key_safe():
    a = Position(c=datetime(2025, 1, 2, 3, 4, 5, 6), pk=[42])
    assert position_token(a) == "20250102T030405000006_42"
    assert position_token(Position(c=datetime(2025, 1, 2))) == "20250102T000000000000_start"
    odd = position_token(Position(c=datetime(2025, 1, 2), pk=["a/b/../c"]))
    assert "/" not in odd and ".." not in odd
    assert odd == position_token(Position(c=datetime(2025, 1, 2), pk=["a/b/../c"]))


def test_sub_range_reads_walk_the_cursor_index(ties_table):
    """A quarter of the table per sub-range: without the hint MariaDB may scan the whole
    table for each (a read would cost the table, not its rows); the read's FROM holds it to
    the cursor index, and reads the same rows."""
    from s3rs_assets.backup.extract import connectorx_query, jdbc_subquery

    conn, src = ties_table
    assert src.cursor_index == "update_at"
    plan = plan_chunk(conn, src, Position(c=DAY), UPPER, 10_000, 4, read=True)
    assert plan is not None and len(plan.ranges) == 4
    # ids interleave across the timestamps: each quarter spans ~4 ids per row, no key span
    assert src.span_column == "id" and [r.span for r in plan.ranges] == [None] * 4
    with conn.cursor() as cur:
        for r in plan.ranges:
            pred = r.predicate(src.keys)
            hinted = connectorx_query(src, r)
            assert f"FORCE INDEX (`{src.cursor_index}`)" in hinted
            # the JDBC reader's form: Spark's predicate around the derived table
            jdbc = f"SELECT * FROM {jdbc_subquery(src)} WHERE {pred}"
            for query in (hinted, jdbc):
                cur.execute("EXPLAIN " + query)
                cols = [d[0] for d in cur.description]
                rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
                assert [(r["type"], r["key"]) for r in rows] == [("range", "update_at")], rows
            cur.execute(f"SELECT id FROM {src.read_from} WHERE {pred}")
            with_hint = sorted(x[0] for x in cur.fetchall())
            cur.execute(f"SELECT id FROM {src.qualified} WHERE {pred}")
            assert with_hint == sorted(x[0] for x in cur.fetchall())
            assert len(with_hint) == r.rows


def test_the_cursor_index_is_the_narrowest_plain_one(mysql_db):
    from s3rs_assets.source.table import cursor_index

    idx = [("PRIMARY", 1, "id"), ("wide", 1, "update_at"), ("wide", 2, "amount"),
           ("narrow", 1, "Update_At"), ("odd-name", 1, "update_at"), ("other", 1, "note")]
    assert cursor_index(idx, "update_at") == "narrow"
    assert cursor_index([("odd-name", 1, "update_at")], "update_at") is None  # no hint
    assert cursor_index([("other", 1, "note")], "update_at") is None
    # the cursor leading the primary key: FORCE INDEX (`PRIMARY`) is valid SQL
    import pymysql

    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS pk_cursor")
            cur.execute("CREATE TABLE pk_cursor (update_at DATETIME(6) NOT NULL, id INT NOT NULL,"
                        " PRIMARY KEY (update_at, id))")
            cur.execute("INSERT INTO pk_cursor VALUES ('2025-03-04 01:00:00', 1)")
        src = describe(conn, table_cfg(mysql_db, "pk_cursor", primary_key=["id"]))
        assert src.cursor_index == "PRIMARY" and src.cursor_indexed
        with conn.cursor() as cur:
            cur.execute(f"SELECT id FROM {src.read_from} WHERE update_at >= '2025-03-04'")
            assert cur.fetchall() == ((1,),)
    finally:
        conn.close()
