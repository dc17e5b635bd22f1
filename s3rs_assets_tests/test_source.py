"""Checks against MySQL's catalog and clock; bad tables fail before anything is written."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import dagster as dg
import pymysql
import pytest

from s3rs_assets.errors import SourceSchemaError
from s3rs_assets.io_manager import store_for
from s3rs_assets.source import describe, safety_bound
from s3rs_assets_tests.helpers import (
    backup,
    list_keys,
    make_ties_table,
    manifest_keys,
    read_manifest_ids,
    resources,
    table_cfg,
    ties,
)


@pytest.fixture(scope="module")
def shapes(mysql_db):
    conn = pymysql.connect(host="127.0.0.1", user="root", database=mysql_db, autocommit=True)
    with conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS no_pk")
        cur.execute("CREATE TABLE no_pk (a INT, update_at DATETIME(6))")
        cur.execute("DROP TABLE IF EXISTS odd_cursor")
        cur.execute("CREATE TABLE odd_cursor (id INT PRIMARY KEY, update_at VARCHAR(20), "
                    "modified DATETIME)")
        cur.execute("DROP TABLE IF EXISTS composite")
        cur.execute("CREATE TABLE composite (shop CHAR(2), id INT, changed TIMESTAMP(3) NULL, "
                    "PRIMARY KEY (shop, id), KEY (changed))")
    make_ties_table(conn, "src_ok", ties(10, datetime(2025, 3, 4), 2))
    yield conn
    conn.close()


def test_describe_finds_pk_cursor_and_index(shapes, mysql_db):
    src = describe(shapes, table_cfg(mysql_db, "src_ok"))
    assert src.primary_key == ("id",) and src.cursor == "update_at" and src.cursor_indexed
    comp = describe(shapes, table_cfg(mysql_db, "composite", cursor="changed"))
    assert comp.primary_key == ("shop", "id")


@pytest.mark.parametrize(
    ("table", "kw", "message"),
    [
        ("does_not_exist", {}, r"table .*\.does_not_exist does not exist"),
        ("src_ok", {"cursor": "modified_at"}, r"no cursor column 'modified_at' .*update_at"),
        ("odd_cursor", {}, r"cursor column 'update_at' is varchar\(20\)"),
        ("no_pk", {}, r"has no primary key: set primary_key"),
        ("src_ok", {"primary_key": ["uuid"]}, r"primary_key column\(s\) \['uuid'\]"),
    ],
)
def test_bad_tables_are_named(shapes, mysql_db, table, kw, message):
    with pytest.raises(SourceSchemaError, match=message):
        describe(shapes, table_cfg(mysql_db, table, **kw))


@pytest.mark.parametrize(
    ("table", "kw"), [("does_not_exist", {}), ("src_ok", {"cursor": "modified_at"}),
                      ("no_pk", {})]
)
def test_bad_table_run_fails_and_writes_nothing(shapes, mysql_db, mysql_url, s3_resource,
                                                s3_client, spark_resource, table, kw):
    cfg = table_cfg(mysql_db, table, **kw)
    result = backup(cfg, resources(mysql_url, s3_resource, spark_resource),
                    partition="2025-03-04", raise_on_error=False)
    assert not result.success
    failure = result.get_step_failure_events()[0].event_specific_data.error
    assert failure.cause.cls_name == "SourceSchemaError"
    assert list_keys(s3_client, s3_resource.bucket, "") == [], "nothing in S3, no watermark"


def test_safety_bound_is_on_the_server_clock(shapes):
    bound = safety_bound(shapes, timedelta(minutes=5))
    assert bound.upper <= bound.server_now - timedelta(minutes=5)
    assert bound.trx_readable


@pytest.fixture
def reader_user(shapes, mysql_db):
    """A least-privilege MySQL user: SELECT on the schema and nothing else."""
    name, password = f"ro_{uuid.uuid4().hex[:8]}", "Ro-pass-" + uuid.uuid4().hex[:8]
    with shapes.cursor() as cur:
        cur.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'")
        cur.execute(f"CREATE USER '{name}'@'localhost' IDENTIFIED BY '{password}'")
        cur.execute(f"GRANT SELECT ON `{mysql_db}`.* TO '{name}'@'%'")
        cur.execute(f"GRANT SELECT ON `{mysql_db}`.* TO '{name}'@'localhost'")
    yield name, password
    with shapes.cursor() as cur:
        cur.execute(f"DROP USER IF EXISTS '{name}'@'%'")
        cur.execute(f"DROP USER IF EXISTS '{name}'@'localhost'")


def test_least_privilege_user_degrades_gracefully(shapes, mysql_db, s3_resource, s3_client,
                                                  spark_resource, reader_user):
    name, password = reader_user
    url = f"mysql://{name}:{password}@127.0.0.1:3306/{mysql_db}"
    cfg = table_cfg(mysql_db, "src_ok", chunk_rows=4)
    with dg.instance_for_test() as instance:
        result = backup(cfg, resources(url, s3_resource, spark_resource), partition="2025-03-04",
                        instance=instance)
    md = result.get_asset_materialization_events()[0].materialization.metadata
    bound = md["safety_bound"].value
    assert bound["innodb_trx_readable"] is False
    assert "needs PROCESS" in bound["note"]
    ids = read_manifest_ids(s3_client, s3_resource.bucket,
                            manifest_keys(store_for(s3_resource), cfg.name))
    assert sorted(ids) == list(range(1, 11))
    for k in list_keys(s3_client, s3_resource.bucket, "s3rs/watermarks/"):
        body = s3_client.get_object(Bucket=s3_resource.bucket, Key=k)["Body"].read().decode()
        assert password not in body
    assert password not in str(md)


def test_rows_no_partition_reads_are_counted_not_dropped(shapes, mysql_db, mysql_url,
                                                         s3_resource, s3_client, spark_resource):
    with shapes.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS odd_rows")
        cur.execute("CREATE TABLE odd_rows (id INT PRIMARY KEY, update_at DATETIME NULL, "
                    "KEY (update_at))")
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute(
            "INSERT INTO odd_rows VALUES (1, '2025-03-04 10:00:00'), (2, NULL), (3, NULL), "
            "(4, '0000-00-00 00:00:00'), (5, '2024-12-31 23:59:59'), (6, '2025-03-04 11:00:00')"
        )
    cfg = table_cfg(mysql_db, "odd_rows")
    result = backup(cfg, resources(mysql_url, s3_resource, spark_resource), partition="2025-03-04")
    md = result.get_asset_materialization_events()[0].materialization.metadata
    assert md["null_cursor_rows"].value == 2
    assert md["zero_date_cursor_rows"].value == 1
    assert md["rows_before_start"].value == 1
    ids = read_manifest_ids(s3_client, s3_resource.bucket,
                            manifest_keys(store_for(s3_resource), cfg.name))
    assert sorted(ids) == [1, 6]
