"""Zero-in-date cursor values, and days a month lacks, never stop a table (issue 16 item 6).

MariaDB's default sql_mode accepts '2025-03-00 10:00:00' (and '2025-00-15', '0000-00-00').
pymysql returns such a value as a string, so a position built from it failed validation and
every sync of the table stopped before reading anything; ALLOW_INVALID_DATES lets in
'2025-02-29' and '2025-04-31', on which connectorx panicked. Now the keyset reads skip them
(`KeyColumns.readable`) and `source_counts` counts them with the zero dates: the rest of
the table syncs exactly and the count shows in the metadata, the warnings and
`watermark get`.
"""

from __future__ import annotations

from datetime import datetime

import dagster as dg
import psycopg
import pytest

from s3rs_assets.cli.watermark import render_record
from s3rs_assets.io_manager import store_for
from s3rs_assets.names import metadata_facts
from s3rs_assets.source import describe, first_row, plan_chunk
from s3rs_assets.source.probes import invalid_date_ranges
from s3rs_assets.watermark import Position
from s3rs_assets_tests.helpers import resources, sync, table_cfg

#: cursor values no position can hold, in every place they sort: before the start, between
#: two real days of a synced window, between two months, at the end of a year, a day its
#: month lacks inside the window (2025 is no leap year), before it and after it
ZERO_IN_DATE = ["0000-00-00", "2025-00-15", "2025-03-00 10:00:00", "2025-03-00", "2025-02-00",
                "2025-13-00", "2025-02-29 10:00:00", "2025-02-31", "2024-02-30",
                "2025-04-31 23:00:00"]
#: MySQL's own test for them, independent of `types.invalid_date`
INVALID = ("(MONTH(update_at) = 0 OR DAYOFMONTH(update_at) = 0 OR "
           "DAYOFMONTH(update_at) > DAYOFMONTH(LAST_DAY(update_at)))")


def lax_table(conn, name: str, columns: str) -> None:
    """`name` made on a connection whose sql_mode lets such dates in (its later INSERTs
    too), dropped after the test (`dropping_conn`)."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute(f"CREATE TABLE `{name}` ({columns})")
    conn.made.append(name)


def both_sides(conn, pg_url: str, mysql_sql: str, warehouse_sql: str) -> tuple[list, list]:
    """(MySQL's rows, the warehouse's rows) as tuples."""
    with conn.cursor() as cur:
        cur.execute(mysql_sql)
        mine = [tuple(r) for r in cur.fetchall()]
    with psycopg.connect(pg_url) as pg:
        theirs = [tuple(r) for r in pg.execute(warehouse_sql).fetchall()]
    return mine, theirs


@pytest.mark.parametrize("cursor", ["DATETIME(6)", "DATE"])
def test_zero_in_date_cursors_are_counted_and_the_rest_syncs(
    dropping_conn, mysql_db, mysql_url, pg_url, s3_resource, spark_resource, cursor
):
    conn = dropping_conn
    name = f"zero_in_date_{cursor.split('(')[0].lower()}"
    lax_table(conn, name, f"id INT NOT NULL PRIMARY KEY, update_at {cursor} NULL, "
              "note VARCHAR(10), KEY (update_at)")
    with conn.cursor() as cur:
        good = [(i, f"2025-02-{27 + i % 2} {10 + i % 3}:00:00") for i in range(20)]
        good += [(i, f"2025-03-01 0{i % 3}:00:00") for i in range(20, 30)]
        bad = [(100 + i, v) for i, v in enumerate(ZERO_IN_DATE)]
        for i, v in good + bad:
            cur.execute(f"INSERT INTO `{name}` VALUES (%s, %s, %s)", (i, v, f"n{i}"))
        cur.execute(f"SELECT COUNT(*) FROM `{name}` WHERE {INVALID}")
        zeros = cur.fetchone()[0]  # '2025-13-00' is refused even in lax mode: stored as 0
    assert zeros == len(ZERO_IN_DATE)
    cfg = table_cfg(mysql_db, name, cursor="update_at", chunk_rows=4,
                    target=f"dw_zero.{name}")

    # the probes never see them, from any start
    src = describe(conn, cfg)
    upper = datetime(2025, 3, 2)
    assert first_row(conn, src, Position(c=datetime(2025, 2, 28, 23)), upper).c == \
        datetime(2025, 3, 1)
    pos, planned = Position(c=datetime(2025, 1, 1)), 0
    while plan := plan_chunk(conn, src, pos, upper, 4, 2):
        planned, pos = planned + plan.rows, plan.end
    assert planned == len(good)

    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    with dg.instance_for_test() as instance:
        result = sync(cfg, res, start="2025-02-26", end="2025-03-01", instance=instance)
    assert result.success
    (backup,) = [m for m in result.get_asset_materialization_events()
                 if m.asset_key.path[-1] == "s3_parquet"][-1:]
    assert metadata_facts(backup.materialization.metadata)["zero_date_cursor_rows"] == zeros

    mine, theirs = both_sides(
        conn, pg_url, f"SELECT id, update_at, note FROM `{name}` WHERE NOT {INVALID} ORDER BY id",
        f"SELECT id, update_at, note FROM dw_zero.{name} ORDER BY id")
    assert theirs == mine and len(mine) == len(good)

    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    assert rec.source_counts.zero_date_cursor == zeros
    assert any(f"{zeros} row(s) have a zero-date cursor" in w
               for w in rec.source_counts.warnings(cfg.name))
    assert f"zero-date cursor:       {zeros}" in render_record(rec, cfg)


def test_invalid_date_ranges_are_index_ranges(mysql_conn):
    """The count between start and the bound is a range scan, never a scan of the rows."""
    with mysql_conn.cursor() as cur:
        cur.execute("CREATE TEMPORARY TABLE zr (id INT PRIMARY KEY, c DATETIME, KEY (c))")
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute("INSERT INTO zr VALUES (1, '2025-03-00 10:00'), (2, '2025-03-01'), "
                    "(3, '2024-00-05'), (4, '2026-07-00'), (5, '2024-12-31 23:59:59'), "
                    "(6, '2025-02-29 00:00'), (7, '2024-02-29 23:59:59'), "
                    "(8, '2025-02-28 23:59:59'), (9, '2025-09-31 12:00'), (10, '2025-12-31')")
        where = invalid_date_ranges("c", datetime(2024, 1, 1), datetime(2026, 1, 1))
        cur.execute(f"SELECT id FROM zr WHERE {where} ORDER BY id")
        assert [r[0] for r in cur.fetchall()] == [1, 6, 9]
        where = invalid_date_ranges("c", datetime(2023, 1, 1), datetime(2027, 1, 1))
        cur.execute(f"SELECT id FROM zr WHERE {where} ORDER BY id")
        assert [r[0] for r in cur.fetchall()] == [1, 3, 4, 6, 9]
        cur.execute("INSERT INTO zr SELECT seq + 10, '2025-05-05' + INTERVAL seq MINUTE "
                    "FROM seq_1_to_5000")
        cur.execute("ANALYZE TABLE zr")
        cur.execute(f"EXPLAIN SELECT COUNT(*) FROM zr WHERE {where}")
        assert cur.fetchone()[3] == "range"


@pytest.mark.parametrize("key", ["DATE", "DATETIME(6)"])
def test_a_date_no_warehouse_holds_in_a_key_column_stops_the_table_with_its_cause(
    dropping_conn, mysql_db, mysql_url, pg_url, s3_resource, spark_resource, key
):
    """Such a key was read as NULL (connectorx) and the load failed on a NOT NULL violation
    naming neither row nor cause, at every sync. Now the backup refuses the chunk before
    reading it and names the column, the count and where they start; nothing past them is
    checkpointed (the chunk read before them is), and once the rows are corrected the next
    sync copies the table exactly."""
    conn = dropping_conn
    name = f"key_date_{key.split('(')[0].lower()}"
    lax_table(conn, name, f"d {key} NOT NULL, n INT NOT NULL, update_at DATETIME(6) NOT NULL, "
              "PRIMARY KEY (d, n), KEY (update_at)")
    with conn.cursor() as cur:
        days = ["2025-03-01", "2025-03-02", "0000-00-00", "2025-02-30", "2025-03-00",
                "2025-03-03", "2025-00-15", "2025-03-04"]
        for i, d in enumerate(days):
            cur.execute(f"INSERT INTO `{name}` VALUES (%s, %s, %s)",
                        (d, i, f"2025-03-04 0{i}:00:00"))
    cfg = table_cfg(mysql_db, name, chunk_rows=2, target=f"dw_keydate.{name}")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    with dg.instance_for_test() as instance:
        result = sync(cfg, res, partition="2025-03-04", instance=instance,
                      raise_on_error=False)
    assert not result.success
    (failure,) = result.get_step_failure_events()
    said = failure.event_specific_data.error.message
    assert ("4 row(s) from update_at 2025-03-04 02:00:00 on hold a date no warehouse can "
            "hold in primary-key column(s) d") in said, said
    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    (state,) = rec.partitions.values()  # the chunk read while the next was refused: kept
    assert state.status == "partial" and state.cursor.c == datetime(2025, 3, 4, 1)
    assert sum(f.rows for f in state.files) == 2

    with conn.cursor() as cur:  # the operator corrects them
        invalid = INVALID.replace("update_at", "d")
        cur.execute(f"UPDATE `{name}` SET d = '2025-03-05' WHERE {invalid}")
        assert cur.rowcount == 4
    with dg.instance_for_test() as instance:
        assert sync(cfg, res, partition="2025-03-04", instance=instance).success
    mine, theirs = both_sides(conn, pg_url, f"SELECT d, n, update_at FROM `{name}` ORDER BY n",
                              f"SELECT d, n, update_at FROM dw_keydate.{name} ORDER BY n")
    assert theirs == mine and len(mine) == len(days)
