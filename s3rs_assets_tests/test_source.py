"""Checks against MySQL's catalog and clock; bad tables fail before anything is written."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timedelta

import dagster as dg
import pymysql
import pytest

from s3rs_assets.errors import SourceSchemaError
from s3rs_assets.io_manager import store_for
from s3rs_assets.names import metadata_facts
from s3rs_assets.source import blockers, describe, safety_bound
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import (
    backup,
    insert_rows,
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
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True)
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
    url = f"mysql://{name}:{password}@{MYSQL_HOST}:{MYSQL_PORT}/{mysql_db}"
    cfg = table_cfg(mysql_db, "src_ok", chunk_rows=4)
    with dg.instance_for_test() as instance:
        result = backup(cfg, resources(url, s3_resource, spark_resource), partition="2025-03-04",
                        instance=instance)
    md = metadata_facts(result.get_asset_materialization_events()[0].materialization.metadata)
    bound = md["safety_bound"]
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
    md = metadata_facts(result.get_asset_materialization_events()[0].materialization.metadata)
    assert md["null_cursor_rows"] == 2
    assert md["zero_date_cursor_rows"] == 1
    assert md["rows_before_start"] == 1
    ids = read_manifest_ids(s3_client, s3_resource.bucket,
                            manifest_keys(store_for(s3_resource), cfg.name))
    assert sorted(ids) == [1, 6]


def _in_background(mysql_db: str, *sql: str) -> tuple[threading.Thread, int]:
    """Run the statements on their own connection in a thread (autocommit); returns the
    thread and its MySQL thread id."""
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True)

    def run() -> None:
        try:
            with conn.cursor() as cur:
                for stmt in sql:
                    cur.execute(stmt)
        finally:
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, conn.thread_id()


def _wait_for_statement(conn, marker: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE %s "
                "AND ID <> CONNECTION_ID()",
                (f"%{marker}%",),
            )
            if cur.fetchone()[0]:
                return
        time.sleep(0.05)
    raise AssertionError(f"statement {marker} never showed up")


def test_bound_holds_back_for_a_statement_that_has_not_written_yet(shapes, mysql_db):
    """MySQL fixes NOW() when a statement starts: an INSERT ... SELECT still computing its
    rows writes timestamps from before the bound would otherwise be taken."""
    with shapes.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS late_writer")
        cur.execute("CREATE TABLE late_writer (id INT PRIMARY KEY, update_at DATETIME(6))")
    gate = f"s3rs_gate_{uuid.uuid4().hex[:8]}"
    with shapes.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, 5)", (gate,))
    slow, thread_id = _in_background(
        mysql_db,
        "INSERT INTO late_writer /* s3rs-late-1 */ "
        f"SELECT 1, NOW(6) FROM (SELECT GET_LOCK('{gate}', 60)) AS x",
    )
    _wait_for_statement(shapes, "s3rs-late-1")
    time.sleep(0.05)
    bound = safety_bound(shapes, timedelta(0))
    with shapes.cursor() as cur:
        cur.execute("SELECT RELEASE_LOCK(%s)", (gate,))
    slow.join()
    with shapes.cursor() as cur:
        cur.execute("SELECT update_at FROM late_writer WHERE id = 1")
        stamped = cur.fetchone()[0]
    assert bound.upper <= stamped, f"bound {bound.upper} passed the row stamped {stamped}"
    assert thread_id in {b.thread_id for b in bound.blockers}
    assert thread_id in bound.metadata()["held_back_by_threads"]


def test_bound_ignores_plain_reads_and_read_only_transactions(shapes, mysql_db):
    """Readers can never write: a long report must not hold every sync back."""
    reader, plain = _in_background(
        mysql_db, "SELECT /* s3rs-read-1 */ SLEEP(2) FROM src_ok LIMIT 1"
    )
    snapshot, read_only = _in_background(
        mysql_db,
        "START TRANSACTION READ ONLY",
        "SELECT /* s3rs-read-2 */ SLEEP(2) FROM src_ok LIMIT 1",
        "COMMIT",
    )
    writer, writing = _in_background(
        mysql_db, "SELECT /* s3rs-read-3 */ SLEEP(2) FROM src_ok LIMIT 1 FOR UPDATE"
    )
    for marker in ("s3rs-read-1", "s3rs-read-2", "s3rs-read-3"):
        _wait_for_statement(shapes, marker)
    time.sleep(0.1)
    found = {b.thread_id for b in blockers(shapes)}
    for t in (reader, snapshot, writer):
        t.join()
    # other sessions of the server may block too; these two never do, a locking read does
    assert plain not in found and read_only not in found
    assert writing in found


def test_sync_does_not_pass_a_row_a_slow_statement_commits_late(
    shapes, mysql_db, mysql_url, s3_resource, s3_client, spark_resource
):
    """The reproduction from the issue: a long INSERT ... SELECT stamps its row, a later row
    commits first; the sync must not move its cursor past the slow row's timestamp. The slow
    statement waits on a user lock the test holds, so it is in flight for the whole sync."""
    gate = f"s3rs_gate_{uuid.uuid4().hex[:8]}"
    with shapes.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, 5)", (gate,))
    now = safety_bound(shapes, timedelta(0)).server_now
    make_ties_table(shapes, "late_sync", [(1, now - timedelta(minutes=10))])
    slow, _ = _in_background(
        mysql_db,
        "INSERT INTO late_sync /* s3rs-late-2 */ (id, update_at, amount) "
        f"SELECT 2, NOW(6), 1 FROM (SELECT GET_LOCK('{gate}', 120)) AS x",
    )
    _wait_for_statement(shapes, "s3rs-late-2")
    time.sleep(0.05)
    insert_rows(shapes, "late_sync", [(3, safety_bound(shapes, timedelta(0)).server_now)])
    cfg = table_cfg(mysql_db, "late_sync", lag="0s", start=f"{now - timedelta(days=1):%Y-%m-%d}")
    res = resources(mysql_url, s3_resource, spark_resource)
    days = (f"{now - timedelta(minutes=10):%Y-%m-%d}", f"{now + timedelta(minutes=1):%Y-%m-%d}")
    try:
        first = backup(cfg, res, start=days[0], end=days[1])
    finally:
        with shapes.cursor() as cur:
            cur.execute("SELECT RELEASE_LOCK(%s)", (gate,))
        slow.join()
    md = metadata_facts(first.get_asset_materialization_events()[0].materialization.metadata)
    assert md["safety_bound"]["oldest_statement_in_flight"] is not None
    backup(cfg, res, start=days[0], end=days[1])
    ids = read_manifest_ids(s3_client, s3_resource.bucket,
                            manifest_keys(store_for(s3_resource), cfg.name))
    assert sorted(ids) == [1, 2, 3]


def test_nullable_primary_key_columns_are_refused_by_name(shapes, mysql_db):
    """The keyset predicates are not NULL-safe: a NULL key at a chunk boundary would skip rows."""
    with shapes.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS nullable_key")
        cur.execute("CREATE TABLE nullable_key (id INT NOT NULL, code VARCHAR(8) NULL, "
                    "update_at DATETIME(6) NOT NULL, UNIQUE KEY (id, code))")
    with pytest.raises(SourceSchemaError, match=r"primary_key column\(s\) \['code'\] .*NULL"):
        describe(shapes, table_cfg(mysql_db, "nullable_key", primary_key=["id", "code"]))
    describe(shapes, table_cfg(mysql_db, "nullable_key", primary_key=["id"]))


def test_the_preferred_tls_context_is_pymysqls_without_the_ca_store(mysql_url):
    """connections.preferred_tls_context stands for pymysql's preferred-mode context (no
    TLS option given): the same settings, minus the system CA store CERT_NONE never reads;
    a connection made with it answers."""
    from s3rs_assets.connections import MySQLConnector, preferred_tls_context

    ours = preferred_tls_context()
    theirs = pymysql.connections.Connection._create_ssl_ctx(None, {})
    for attr in ("protocol", "verify_mode", "check_hostname", "verify_flags", "options",
                 "minimum_version", "maximum_version"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert [c["name"] for c in ours.get_ciphers()] == [c["name"] for c in theirs.get_ciphers()]
    assert ours.cert_store_stats()["x509_ca"] == 0
    with MySQLConnector(url=mysql_url).connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
        assert cur.fetchone() == (1,)
