"""Clocks and time zones: Spark's session zone before JDBC reads, MySQL session zones pinned
on every connection, the server's zone checked against S3RS_SOURCE_TIMEZONE, and a DST
source zone end to end."""

from __future__ import annotations

from datetime import datetime, timedelta

import psycopg
import pymysql
import pytest

from s3rs_assets.clock import SESSION_TIME_ZONE
from s3rs_assets.io_manager import store_for
from s3rs_assets.resources import MySQLResource
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import backup, make_ties_table, resources, table_cfg, ties

DAY = datetime(2025, 3, 4)


@pytest.fixture
def zoned_session(spark_resource):
    """The shared SparkSession with its SQL time zone set elsewhere (a notebook, a Spark
    Connect server's default); restored afterwards for the other tests."""
    session = spark_resource.session()
    # A run takes the thread's active session as it is (spark_session.start_session); one
    # built in another thread (an earlier test's early start, on the same test worker) is
    # not active in this one, and a run would then apply s3rs's settings, UTC included.
    session.sparkContext._jvm.org.apache.spark.sql.SparkSession.setActiveSession(
        session._jsparkSession)
    saved = session.conf.get("spark.sql.session.timeZone")
    session.conf.set("spark.sql.session.timeZone", "America/New_York")
    yield session
    session.conf.set("spark.sql.session.timeZone", saved)


def test_jdbc_refuses_a_session_not_in_utc(mysql_db, mysql_conn, mysql_url, s3_resource,
                                           spark_resource, zoned_session):
    make_ties_table(mysql_conn, "tz_jdbc", ties(50, DAY, 3))
    res = resources(mysql_url, s3_resource, spark_resource)
    cfg = table_cfg(mysql_db, "tz_jdbc", reader="jdbc")
    result = backup(cfg, res, partition=f"{DAY:%Y-%m-%d}", raise_on_error=False)
    assert not result.success
    error = result.get_step_failure_events()[0].event_specific_data.error
    text = str(error.cause or error)
    assert "'America/New_York'" in text and "spark.sql.session.timeZone=UTC" in text
    assert "tz_jdbc" in text
    rec = store_for(s3_resource).read(cfg.name)
    assert rec is None or not any(p.files for p in rec.partitions.values()), "nothing read"
    # connectorx does not go through Spark's conversions: the same session reads exactly
    ok = backup(table_cfg(mysql_db, "tz_jdbc"), res, partition=f"{DAY:%Y-%m-%d}")
    assert ok.success
    assert store_for(s3_resource).read(cfg.name, fresh=True).mysql_rows_extracted == 50


# ------------------------------------------------------------------ MySQL session zones


def test_every_reader_pins_the_session_time_zone(mysql_url, spark_resource):
    """pymysql, connectorx and Spark JDBC sessions all run in UTC, whatever the server's
    default (here SYSTEM): TIMESTAMP columns read as UTC instants."""
    import connectorx as cx

    mysql = MySQLResource(url=mysql_url)
    with mysql.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@session.time_zone, @@global.time_zone")
        session_tz, global_tz = cur.fetchone()
    assert session_tz == SESSION_TIME_ZONE == "+00:00"
    assert global_tz != session_tz  # the server's default is not what s3rs reads with
    got = cx.read_sql(mysql.connectorx_url(), "SELECT @@session.time_zone AS z",
                      return_type="arrow", pre_execution_query=mysql.session_setup())
    assert got.column("z").to_pylist() == ["+00:00"]
    session = spark_resource.session()
    df = session.read.jdbc(mysql.jdbc_url(), "(SELECT @@session.time_zone AS z) AS t",
                           properties=mysql.jdbc_properties())
    assert [r["z"] for r in df.collect()] == ["+00:00"]


def _zoned_table(conn, name: str, default: str = "") -> None:
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        cur.execute(
            f"CREATE TABLE `{name}` (id INT NOT NULL PRIMARY KEY, "
            f"update_at DATETIME(6) NOT NULL {default}, ts TIMESTAMP(6) NULL, KEY (update_at))"
        )


def test_a_zone_mismatch_stops_the_run_before_anything_is_read(
        mysql_db, mysql_conn, mysql_url, s3_resource, spark_resource, monkeypatch):
    """The cursor is stamped by MySQL (ON UPDATE CURRENT_TIMESTAMP) in the server's zone
    (UTC here) while S3RS_SOURCE_TIMEZONE says Europe/Berlin: the bound and the windows
    would be off by one or two hours. The run fails naming both zones; nothing is read."""
    _zoned_table(mysql_conn, "tz_stamped",
                 "DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)")
    with mysql_conn.cursor() as cur:
        cur.execute("INSERT INTO tz_stamped (id, update_at) VALUES (1, '2025-03-04 10:00:00')")
    monkeypatch.setenv("S3RS_SOURCE_TIMEZONE", "Europe/Berlin")
    res = resources(mysql_url, s3_resource, spark_resource)
    cfg = table_cfg(mysql_db, "tz_stamped")
    result = backup(cfg, res, partition="2025-03-04", raise_on_error=False)
    assert not result.success
    error = result.get_step_failure_events()[0].event_specific_data.error
    text = str(error.cause or error)
    assert "@@time_zone is 'SYSTEM'" in text and "@@system_time_zone 'UTC'" in text
    assert "S3RS_SOURCE_TIMEZONE is 'Europe/Berlin'" in text
    assert store_for(s3_resource).read(cfg.name) is None, "nothing read, nothing written"
    # the same zone under another name is no mismatch
    monkeypatch.setenv("S3RS_SOURCE_TIMEZONE", "Etc/UTC")
    assert backup(cfg, res, partition="2025-03-04").success
    # a TIMESTAMP cursor is read as UTC: any other source zone would shift the windows
    with mysql_conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS tz_ts_cursor")
        cur.execute("CREATE TABLE tz_ts_cursor (id INT PRIMARY KEY, ts TIMESTAMP(6) NOT NULL)")
    monkeypatch.setenv("S3RS_SOURCE_TIMEZONE", "America/New_York")
    ts_cfg = table_cfg(mysql_db, "tz_ts_cursor", cursor="ts")
    failed = backup(ts_cfg, res, partition="2025-03-04", raise_on_error=False)
    error = failed.get_step_failure_events()[0].event_specific_data.error
    assert "TIMESTAMP" in str(error.cause or error) and "America/New_York" in str(
        error.cause or error)


#: Rows around New York's DST changes, as (id, DATETIME wall clock, TIMESTAMP as UTC)
NY_ROWS = [
    (1, datetime(2025, 3, 9, 1, 59, 59, 999999), datetime(2025, 3, 9, 6, 59, 59, 999999)),
    (2, datetime(2025, 3, 9, 2, 30), datetime(2025, 3, 9, 7, 0)),  # wall time that never was
    (3, datetime(2025, 3, 9, 3, 0), datetime(2025, 3, 9, 7, 0, 0, 1)),
    (4, datetime(2025, 11, 2, 1, 30), datetime(2025, 11, 2, 5, 30)),  # 01:30 EDT
    (5, datetime(2025, 11, 2, 1, 30), datetime(2025, 11, 2, 6, 30)),  # 01:30 EST, same wall
    (6, datetime(2025, 11, 2, 23, 59, 59), datetime(2025, 11, 3, 4, 59, 59)),
]


def test_dst_source_zone_end_to_end(mysql_db, mysql_conn, mysql_url, pg_url, s3_resource,
                                    spark_resource, monkeypatch):
    """S3RS_SOURCE_TIMEZONE=America/New_York, rows written from a Europe/Berlin session:
    DATETIME arrives as its wall clock, TIMESTAMP as its UTC instant, identical in
    PostgreSQL; the bound is New York's clock, so a row stamped an hour ahead of New York
    (but hours behind UTC) is future, counted and not copied yet."""
    from datetime import UTC
    from zoneinfo import ZoneInfo

    from s3rs_assets_tests.helpers import sync

    monkeypatch.setenv("S3RS_SOURCE_TIMEZONE", "America/New_York")
    _zoned_table(mysql_conn, "tz_dst")
    ny_now = datetime.now(UTC).astimezone(ZoneInfo("America/New_York")).replace(tzinfo=None)
    ahead = ny_now.replace(microsecond=0) + timedelta(hours=1)
    writer = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=mysql_db,
                             autocommit=True)
    with writer.cursor() as cur:
        cur.execute("SET time_zone = 'Europe/Berlin'")  # the writer's zone must not matter
        for i, wall, utc in NY_ROWS:
            cur.execute("INSERT INTO tz_dst VALUES (%s, %s, CONVERT_TZ(%s, '+00:00', "
                        "'Europe/Berlin'))", (i, wall, utc))
        cur.execute("INSERT INTO tz_dst VALUES (99, %s, NULL)", (ahead,))
    writer.close()
    cfg = table_cfg(mysql_db, "tz_dst", target="dw_tz.tz_dst", lag="1s")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    for day in ("2025-03-09", "2025-11-02"):
        assert sync(cfg, res, partition=day).success
    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    assert rec.source_counts.future == 1, "dated after New York's clock"
    with psycopg.connect(pg_url.replace("postgres:@", "postgres@")) as c:
        got = c.execute('SELECT id, update_at, ts FROM "dw_tz"."tz_dst" ORDER BY id').fetchall()
    assert [tuple(r) for r in got] == NY_ROWS
    assert set(rec.partitions) == {"2025-03-09", "2025-11-02"}
