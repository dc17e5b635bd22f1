"""Sub-ranges read by a span of the primary key (`probes.key_spans`, issue 19).

Where ids follow the cursor (rows inserted in time order), a sub-range's rows lie in a
narrow span of the clustered index: reading that span costs ~40 % less MariaDB CPU than a
lookup per row through the cursor index. The span only says where the rows lie; the
predicate still names them. These tests read every sub-range both ways and compare, on a
table shaped so that some sub-ranges get a span and some do not (rows updated later, ids
far from their neighbours), with ties of many rows at every chunk boundary.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import dagster as dg
import psycopg
import pytest

from s3rs_assets.backup.extract import connectorx_query
from s3rs_assets.cursor import SubRange
from s3rs_assets.source import describe, plan_chunk
from s3rs_assets.source.probes import MIN_SPAN_ROWS, SPAN_PER_ROW
from s3rs_assets.watermark import Position
from s3rs_assets_tests.helpers import insert_rows, make_ties_table, resources, sync, table_cfg

DAY = datetime(2025, 3, 4)
UPPER = datetime(2025, 3, 5)
TIE = 250  # rows per timestamp: every chunk and sub-range boundary falls inside a tie
ROWS = 12_000


def shaped_rows() -> list[tuple[int, datetime]]:
    """`ROWS` ids in time order (ties of `TIE`); ids 1,000,001.. written at 01:30 (far from
    their neighbours' ids); below, `update_later` moves every 37th old id to 05:00."""
    rows = [(i, DAY + timedelta(hours=1, seconds=(i - 1) // TIE)) for i in range(1, ROWS + 1)]
    rows += [(1_000_000 + i, DAY + timedelta(minutes=90)) for i in range(1, 301)]
    return rows


def update_later(conn, name: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"UPDATE `{name}` SET update_at = %s WHERE MOD(id, 37) = 0 AND id < 1000000",
                    (DAY + timedelta(hours=5),))


@pytest.fixture
def spans_table(dropping_conn, mysql_db):
    conn = dropping_conn
    make_ties_table(conn, "spans12k", shaped_rows())
    conn.made.append("spans12k")
    update_later(conn, "spans12k")
    return conn, describe(conn, table_cfg(mysql_db, "spans12k"))


def read_ids(cur, sql: str) -> list[int]:
    cur.execute(sql)
    return sorted(r[0] for r in cur.fetchall())


@pytest.mark.parametrize(("chunk", "parts"), [(5000, 2), (4000, 1), (9000, 3), (12_500, 4)])
def test_a_span_reads_the_rows_the_cursor_index_reads(spans_table, chunk, parts):
    conn, src = spans_table
    assert src.span_column == "id"
    pos, seen, spanned, plain = Position(c=DAY), [], 0, 0
    with conn.cursor() as cur:
        while (plan := plan_chunk(conn, src, pos, UPPER, chunk, parts, read=True)) is not None:
            assert plan == replace(plan_chunk(conn, src, pos, UPPER, chunk, parts),
                                   ranges=plan.ranges)
            for r in plan.ranges:
                by_index = SubRange(r.start, r.end, r.rows)
                want = read_ids(cur, f"SELECT id FROM {src.read_from} "
                                     f"WHERE {by_index.predicate(src.keys)}")
                got = read_ids(cur, f"SELECT id FROM ({connectorx_query(src, r)}) AS q")
                assert got == want and len(got) == r.rows
                if r.span is None:
                    plain += 1 if r.rows >= MIN_SPAN_ROWS else 0
                    assert "PRIMARY" not in connectorx_query(src, r)
                else:
                    spanned += 1
                    assert (r.span.low, r.span.high) == (want[0], want[-1])
                    assert r.span.high - r.span.low + 1 <= SPAN_PER_ROW * r.rows
                    cur.execute("EXPLAIN " + connectorx_query(src, r))
                    cols = [d[0] for d in cur.description]
                    (row,) = [dict(zip(cols, x, strict=True)) for x in cur.fetchall()]
                    assert (row["type"], row["key"]) == ("range", "PRIMARY"), row
                seen.extend(got)
            pos = plan.end
    with conn.cursor() as cur:
        assert sorted(seen) == read_ids(cur, "SELECT id FROM spans12k")  # every row once
    assert spanned and plain, (spanned, plain)


def test_which_tables_have_a_span_column(dropping_conn, mysql_db):
    """Only a one-column integer PRIMARY key beside a cursor index: a composite key's first
    column may hold the whole table in one value; a cursor leading the PRIMARY key is read
    in its order already; without a cursor index the read takes no hint at all."""
    conn = dropping_conn
    tables = {
        "sp_int": ("id INT UNSIGNED NOT NULL PRIMARY KEY, update_at DATETIME NOT NULL, "
                   "KEY (update_at)", "id"),
        "sp_text": ("code VARCHAR(8) NOT NULL PRIMARY KEY, update_at DATETIME NOT NULL, "
                    "KEY (update_at)", None),
        "sp_pair": ("t INT NOT NULL, id INT NOT NULL, update_at DATETIME NOT NULL, "
                    "PRIMARY KEY (t, id), KEY (update_at)", None),
        "sp_lead": ("id INT NOT NULL, update_at DATETIME NOT NULL, "
                    "PRIMARY KEY (update_at, id)", None),
        "sp_noidx": ("id INT NOT NULL PRIMARY KEY, update_at DATETIME NOT NULL", None),
    }
    with conn.cursor() as cur:
        for name, (cols, _) in tables.items():
            cur.execute(f"CREATE TABLE `{name}` ({cols})")
            conn.made.append(name)
    for name, (_, want) in tables.items():
        pk = ["id"] if name == "sp_lead" else None
        src = describe(conn, table_cfg(mysql_db, name, primary_key=pk))
        assert src.span_column == want, name


def test_a_sync_by_spans_copies_the_table_exactly(
    spans_table, mysql_db, mysql_url, pg_url, s3_resource, spark_resource
):
    """Through Spark and connectorx: spanned and unspanned sub-ranges side by side, chunk
    boundaries inside ties; the warehouse then holds MySQL's rows, no more, no fewer."""
    conn, src = spans_table
    insert_rows(conn, "spans12k", [(2_000_000 + i, DAY + timedelta(hours=3)) for i in range(40)])
    cfg = table_cfg(mysql_db, "spans12k", chunk_rows=5000, target="dw_spans.spans12k")
    plan = plan_chunk(conn, src, Position(c=DAY), UPPER, 5000, 2, read=True)
    assert plan is not None and any(r.span for r in plan.ranges)
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    with dg.instance_for_test() as instance:
        result = sync(cfg, res, partition="2025-03-04", instance=instance)
        assert result.success
        said = [e.user_message for e in instance.all_logs(result.run_id)]
    assert any("sub-range(s) by primary key" in m for m in said)  # the run log tells
    with conn.cursor() as cur:
        cur.execute("SELECT id, update_at, amount, note FROM spans12k ORDER BY id")
        mine = [tuple(r) for r in cur.fetchall()]
    with psycopg.connect(pg_url) as pg:
        theirs = [tuple(r) for r in pg.execute(
            "SELECT id, update_at, amount, note FROM dw_spans.spans12k ORDER BY id").fetchall()]
    assert len(mine) == ROWS + 340 and theirs == mine
