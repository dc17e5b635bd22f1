"""The connectorx read as an RDD job (a classic session: `Extractor.read`'s fast path) and as
a mapInArrow DataFrame job (Spark Connect's only way): the same objects, byte for byte, for
the same sub-ranges, ties at the seams included; the RDD job's tasks run in the Python
workers the warm-up started."""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from typing import Any

import pymysql
import pytest

from s3rs_assets import spark_session
from s3rs_assets.backup import extract
from s3rs_assets.backup.extract import Extractor, Item, same_workers_as_sql
from s3rs_assets.cursor import Position
from s3rs_assets.resources import MySQLResource
from s3rs_assets.source import describe, plan_chunk
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import make_ties_table, mysql_ids, read_parquet, table_cfg, ties

D = datetime(2025, 3, 4)


@pytest.fixture(scope="module")
def ties_conn(mysql_db: str):
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True)
    # 6,000 rows on 4 timestamps (1,500 rows each): every seam below falls inside a tie
    make_ties_table(conn, "rdd_ties", ties(6_000, D, 4))
    yield conn
    conn.close()


def _items(conn: Any, mysql_db: str, rows: int, parts: int) -> tuple[Any, list[Item]]:
    src = describe(conn, table_cfg(mysql_db, "rdd_ties"))
    plan = plan_chunk(conn, src, Position(c=D, pk=None), D + timedelta(days=1), rows, parts)
    assert plan is not None
    return src, [Item("2025-03-04", r) for r in plan.ranges]


def test_rdd_and_dataframe_jobs_write_the_same_objects(
    ties_conn, mysql_db, mysql_url, spark, s3_resource, s3_client, monkeypatch
) -> None:
    src, items = _items(ties_conn, mysql_db, 4_000, 3)  # seams at rows 1,334, 2,668, 4,000
    assert {i.rows.end.c for i in items} <= {D + timedelta(hours=h, microseconds=h - 1)
                                             for h in range(1, 5)}
    ex = Extractor(spark=spark, mysql=MySQLResource(url=mysql_url), s3=s3_resource, src=src,
                   table_name=f"{mysql_db}.rdd_ties", parallelism=2)
    calls: dict[str, int] = {"rdd": 0, "dataframe": 0}
    real_rows, real_task = extract.connectorx_rows, extract.connectorx_task

    def rows_counted(spec: Any) -> Any:
        calls["rdd"] += 1
        return real_rows(spec)

    def task_counted(spec: Any) -> Any:
        calls["dataframe"] += 1
        return real_task(spec)

    monkeypatch.setattr(extract, "connectorx_rows", rows_counted)
    monkeypatch.setattr(extract, "connectorx_task", task_counted)
    by_rdd = ex.read(items)
    assert calls == {"rdd": 1, "dataframe": 0}
    first = read_parquet(s3_client, s3_resource.bucket, [f.key for f in by_rdd])

    monkeypatch.setattr(extract, "classic_context", lambda _session: None)  # as Connect
    by_dataframe = ex.read(items)  # the same keys, overwritten
    assert calls == {"rdd": 1, "dataframe": 1}
    assert by_rdd == by_dataframe  # key, rows, bytes, MD5, cursor range: byte for byte
    assert [f.rows for f in by_rdd] == [i.rows.rows for i in items]
    ids = first.column("id").to_pylist()
    assert len(ids) == len(set(ids)) == 4_000
    planned_end = items[-1].rows.end
    where = (f"update_at < '{planned_end.c:%Y-%m-%d %H:%M:%S.%f}' OR (update_at = "
             f"'{planned_end.c:%Y-%m-%d %H:%M:%S.%f}' AND id <= {planned_end.pk[0]})")
    assert sorted(ids) == mysql_ids(ties_conn, "rdd_ties", where)


def test_rdd_jobs_run_in_the_warm_up_workers(spark) -> None:
    """After the warm-up (a mapInArrow job), an RDD job with `same_workers_as_sql` runs in
    the same Python worker processes instead of starting (and importing into) new ones."""
    thread = spark_session.warm_up(spark, background=True)
    if thread is not None:
        thread.join(timeout=300)
    import pyarrow as pa

    def pid_batch(batches: Any) -> Any:
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"pid": [os.getpid()]})

    def pid_rows(parts: Any) -> Any:
        list(parts)
        yield os.getpid()

    sql = {r.pid for r in spark.range(0, 2, 1, 2).mapInArrow(pid_batch, "pid long").collect()}
    sc = spark.sparkContext
    same_workers_as_sql(spark, sc)
    rdd = set(sc.parallelize(range(2), 2).mapPartitions(pid_rows).collect())
    assert rdd <= sql, (rdd, sql)


def test_warm_rows_runs_as_an_rdd_task_in_the_sql_workers(spark) -> None:
    """`spark_tasks.warm_rows` (a warm-up as an RDD job) runs in a worker and hands its ids
    back; with `same_workers_as_sql` a mapInArrow job after it finds warm workers."""
    import pyarrow as pa

    from s3rs_assets.spark_tasks import warm_rows

    sc = spark.sparkContext
    same_workers_as_sql(spark, sc)
    assert sorted(sc.parallelize(range(2), 2).mapPartitions(warm_rows).collect()) == [0, 1]

    def probe(batches: Any) -> Any:
        import sys

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"warm": ["connectorx" in sys.modules]})

    rows = spark.range(0, 2, 1, 2).mapInArrow(probe, "warm boolean").collect()
    assert all(r.warm for r in rows)


def test_a_classic_session_has_a_context_and_a_connect_one_none(spark) -> None:
    assert extract.classic_context(spark) is spark.sparkContext

    class Connect:
        @property
        def sparkContext(self) -> Any:  # noqa: N802 - PySpark's name
            raise NotImplementedError("[NOT_IMPLEMENTED] sparkContext() is not implemented.")

    assert extract.classic_context(Connect()) is None


def test_workers_collect_only_what_a_task_left_after_their_first_object(
    ties_conn, mysql_db, mysql_url, spark, s3_resource
) -> None:
    """PySpark's daemon runs a full gc.collect() after each task of a reused worker: after
    the warm-up and a worker's first object (`spark_tasks.settle_heap`) its imported heap
    is frozen, so that collection walks a small fraction of the worker's objects, not all
    of them (~50 ms CPU a task before)."""
    src, items = _items(ties_conn, mysql_db, 2_000, 2)
    ex = Extractor(spark=spark, mysql=MySQLResource(url=mysql_url), s3=s3_resource, src=src,
                   table_name=f"{mysql_db}.rdd_ties", parallelism=2)
    spark_session._warm_job(spark, 2)
    for _ in range(2):  # every worker a task may land in has written an object
        assert [f.rows for f in ex.read(items)] == [i.rows.rows for i in items]

    def heap(parts: Any) -> Any:
        import gc

        list(parts)
        yield os.getpid(), gc.get_freeze_count(), len(gc.get_objects())

    sc = spark.sparkContext
    same_workers_as_sql(spark, sc)
    for _pid, frozen, walked in sc.parallelize(range(2), 2).mapPartitions(heap).collect():
        assert frozen > 50_000 and walked < frozen // 10, (frozen, walked)
