"""DATE cursor columns: whole days, many rows per value.

A row written later today carries today's date, so a bound inside today would let a run read
half of today and then lose every row of today whose key sorts before the last one read.
The bound of a DATE cursor is the start of MySQL's current day: today's rows are read once
the day is over. MySQL's clock is set per session (`SET TIMESTAMP`) to play the days.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta

import dagster as dg
import psycopg
import pytest

from s3rs_assets.backup import BackupRun
from s3rs_assets.backup.extract import Extractor
from s3rs_assets.io_manager import store_for
from s3rs_assets.partitions import partitions_def, windows
from s3rs_assets.resources import MySQLResource
from s3rs_assets.source import describe, plan_chunk, safety_bound
from s3rs_assets.watermark import PartitionState, Position, WatermarkRecord
from s3rs_assets_tests.helpers import read_manifest_ids, resources, sync, table_cfg

TODAY = date(2025, 3, 10)  # "today" on MySQL's clock, set per session
YESTERDAY = TODAY - timedelta(days=1)


def _at(d: date, hour: int = 0, second: int = 0) -> datetime:
    return datetime(d.year, d.month, d.day, hour, 0, second)


@pytest.fixture
def conn(dropping_conn):
    return dropping_conn


def _make(conn, name: str, rows: list[tuple[int, date]]) -> None:
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        cur.execute(f"CREATE TABLE `{name}` (id INT NOT NULL PRIMARY KEY, update_on DATE NOT "
                    "NULL, note VARCHAR(20), KEY (update_on))")
        cur.executemany(f"INSERT INTO `{name}` VALUES (%s, %s, %s)",
                        [(i, d, f"v{i}") for i, d in rows])
    conn.made.append(name)


def _clock(conn, ts: datetime) -> None:
    """MySQL's NOW() for this session only."""
    with conn.cursor() as cur:
        cur.execute("SET TIMESTAMP = UNIX_TIMESTAMP(%s)", (ts,))


def _shuffled(ids: range, day: date) -> list[tuple[int, date]]:
    """Rows inserted out of key order."""
    return [(i, day) for i in sorted(ids, key=lambda i: (i * 37) % 101)]


def test_bound_is_the_start_of_mysqls_day(conn):
    _clock(conn, _at(TODAY, 10))
    bound = safety_bound(conn, timedelta(0), whole_days=True)
    assert bound.server_now == _at(TODAY, 10)
    assert bound.upper == _at(TODAY), "rows of today wait until the day is over"
    assert "start of the day" in bound.note
    assert safety_bound(conn, timedelta(0)).upper == _at(TODAY, 10), "DATETIME: not rounded"
    _clock(conn, _at(TODAY))
    assert safety_bound(conn, timedelta(0), whole_days=True).upper == _at(TODAY)


@pytest.mark.parametrize("chunk", [1, 4, 13])
def test_ties_on_one_date_walk_exactly_across_chunk_boundaries(conn, mysql_db, chunk):
    rows = _shuffled(range(1, 41), YESTERDAY) + _shuffled(range(41, 51), TODAY)
    _make(conn, "date_walk", rows)
    src = describe(conn, table_cfg(mysql_db, "date_walk", cursor="update_on"))
    assert src.cursor_is_date
    pos, seen = Position(c=_at(YESTERDAY)), []
    with conn.cursor() as cur:
        while (plan := plan_chunk(conn, src, pos, _at(TODAY + timedelta(days=1)), chunk, 3)):
            for r in plan.ranges:
                cur.execute(f"SELECT id FROM {src.qualified} WHERE {r.predicate(src.keys)}")
                seen.extend(row[0] for row in cur.fetchall())
            rec = WatermarkRecord.new(src.table)
            rec.partitions["p"] = PartitionState(window_start=_at(YESTERDAY),
                                                 window_end=_at(TODAY), cursor=plan.end)
            pos = WatermarkRecord.from_json(rec.refresh().to_json()).partitions["p"].cursor
    assert seen == sorted(range(1, 41)) + sorted(range(41, 51)), "(date, id) order, once each"


def _backup(cfg, conn, mysql_url, s3_resource, spark, now: datetime, run_id: str) -> BackupRun:
    """One backup run with MySQL's clock at `now` (the bound is taken on that clock)."""
    mysql = MySQLResource(url=mysql_url)
    pdef = partitions_def(cfg)
    keys = [YESTERDAY.isoformat(), TODAY.isoformat()]
    _clock(conn, now)
    src = describe(conn, cfg)
    bound = safety_bound(conn, cfg.lag, whole_days=src.cursor_is_date)
    ex = Extractor(spark=spark, mysql=mysql, s3=s3_resource, src=src, table_name=cfg.name,
                   parallelism=2)
    run = BackupRun(ex, store_for(s3_resource, run_id), windows=windows(pdef, keys),
                    upper=bound.upper, chunk_rows=cfg.chunk_rows, run_id=run_id,
                    source_now=bound.server_now)
    run.results = run.run()
    mysql.teardown_after_execution(None)
    return run


def _read_ids(s3_client, bucket, store, name) -> dict[str, list[int]]:
    rec = store.read(name, fresh=True)
    rec.check(table_name=name)
    return {k: sorted(read_manifest_ids(s3_client, bucket, [f.key for f in p.files]))
            for k, p in rec.partitions.items()}


def test_same_day_updates_are_read_once_the_day_is_over(conn, mysql_db, mysql_url, s3_resource,
                                                        s3_client, bucket, spark):
    rows = _shuffled(range(1, 31), YESTERDAY) + _shuffled(range(101, 106), TODAY)
    _make(conn, "date_days", rows)
    cfg = table_cfg(mysql_db, "date_days", cursor="update_on", chunk_rows=7,
                    start=(YESTERDAY - timedelta(days=2)).isoformat())
    store = store_for(s3_resource)
    # 10:00 today: yesterday is read whole (ties across chunks), nothing of today
    _backup(cfg, conn, mysql_url, s3_resource, spark, _at(TODAY, 10), "r1")
    got = _read_ids(s3_client, bucket, store, cfg.name)
    assert got[YESTERDAY.isoformat()] == list(range(1, 31))
    assert got.get(TODAY.isoformat(), []) == []
    rec = store.read(cfg.name, fresh=True)
    assert rec.partitions[YESTERDAY.isoformat()].status == "complete"
    # later today: a new row whose key sorts before today's, and a row moved to today
    with conn.cursor() as cur:
        cur.execute("INSERT INTO date_days VALUES (50, %s, 'new today')", (TODAY,))
        cur.execute("UPDATE date_days SET update_on = %s, note = 'moved' WHERE id = 3",
                    (TODAY,))
    _backup(cfg, conn, mysql_url, s3_resource, spark, _at(TODAY, 16), "r2")
    assert _read_ids(s3_client, bucket, store, cfg.name).get(TODAY.isoformat(), []) == []
    # the day is over: every row of today, the early keys included, exactly once
    _backup(cfg, conn, mysql_url, s3_resource, spark, _at(TODAY + timedelta(days=1), 0, 1),
            "r3")
    got = _read_ids(s3_client, bucket, store, cfg.name)
    assert got[TODAY.isoformat()] == [3, 50, 101, 102, 103, 104, 105]
    rec = store.read(cfg.name, fresh=True)
    assert rec.partitions[TODAY.isoformat()].status == "complete"
    assert rec.partitions[TODAY.isoformat()].cursor == Position(c=_at(TODAY), pk=[105])
    files = rec.partitions[TODAY.isoformat()].files
    assert min(f.cursor_min for f in files) == max(f.cursor_max for f in files) == _at(TODAY)


@pytest.mark.parametrize("reader", ["connectorx", "jdbc"])
def test_date_cursor_syncs_exactly_end_to_end(conn, mysql_db, mysql_url, pg_url, s3_resource,
                                              spark_resource, reader):
    name = f"date_e2e_{reader}"
    rows = _shuffled(range(1, 41), YESTERDAY) + _shuffled(range(41, 48), TODAY)
    _make(conn, name, rows)
    cfg = table_cfg(mysql_db, name, cursor="update_on", chunk_rows=6, reader=reader,
                    start=YESTERDAY.isoformat(), target=f"dw_date.{name}")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    with dg.instance_for_test() as instance:
        result = sync(cfg, res, start=YESTERDAY.isoformat(), end=TODAY.isoformat(),
                      instance=instance)
        assert all(c.passed for c in result.get_asset_check_evaluations())
    with psycopg.connect(pg_url.replace("postgres:@", "postgres@")) as c:
        got = c.execute(f'SELECT id, update_on, note FROM "dw_date"."{name}" ORDER BY id')
        assert got.fetchall() == sorted((i, d, f"v{i}") for i, d in rows)
    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    assert rec.mysql_rows_extracted == rec.redshift_rows_loaded == len(rows)
    assert rec.last_mysql_data_timestamp == _at(TODAY)
