"""Transient errors are retried where they happen, counted, and reported; others are not.

The errors come from the real MariaDB (a killed connection, a lock wait timeout, a
deadlock, a syntax error, a missing table); the end-to-end test kills the sync's MySQL
connections from another session while a multi-chunk sync runs.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime

import dagster as dg
import psycopg
import pymysql
import pytest

from s3rs_assets import retry
from s3rs_assets.errors import ConfigError
from s3rs_assets.load.transaction import LoadError
from s3rs_assets.names import RETRIES_METADATA_KEY, RETRY_POLICY, asset_key, metadata_facts
from s3rs_assets.progress import run_retries
from s3rs_assets.resources import MySQLResource
from s3rs_assets.stage_results import dagster_step
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import make_ties_table, resources, sync, table_cfg, ties

DAY = datetime(2025, 3, 4)


def _connect(db: str | None = None) -> pymysql.connections.Connection:
    return pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=db,
                           autocommit=True)


def _error(conn, sql: str) -> Exception:
    with pytest.raises(pymysql.err.MySQLError) as info, conn.cursor() as cur:
        cur.execute(sql)
    return info.value


def test_classifier_on_real_mysql_errors(mysql_db, mysql_conn):
    # not transient: the same statement would fail the same way
    syntax = _error(mysql_conn, "SELEC 1")
    missing = _error(mysql_conn, "SELECT * FROM no_such_table")
    assert syntax.args[0] == 1064 and missing.args[0] == 1146
    assert not retry.is_transient(syntax) and not retry.is_transient(missing)
    # a connection killed from another session: 2013, then pymysql's InterfaceError
    victim = _connect(mysql_db)
    with mysql_conn.cursor() as cur:
        cur.execute(f"KILL {victim.thread_id()}")
    lost = _error(victim, "SELECT 1")
    closed = _error(victim, "SELECT 1")
    assert retry.kind(lost) == "mysql 2013 lost connection"
    assert retry.kind(closed) == "mysql connection closed"
    # lock wait timeout (1205) and deadlock (1213), provoked for real
    with mysql_conn.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS retry_locks")
        cur.execute("CREATE TABLE retry_locks (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
        cur.execute("INSERT INTO retry_locks VALUES (1, 0), (2, 0)")
    a, b = _connect(mysql_db), _connect(mysql_db)
    try:
        with a.cursor() as ca, b.cursor() as cb:
            ca.execute("BEGIN")
            ca.execute("UPDATE retry_locks SET v = 1 WHERE id = 1")
            cb.execute("SET SESSION innodb_lock_wait_timeout = 1")
            wait = _error(b, "UPDATE retry_locks SET v = 2 WHERE id = 1")
            assert retry.kind(wait) == "mysql 1205 lock wait timeout"
            cb.execute("SET SESSION innodb_lock_wait_timeout = 20")
            cb.execute("BEGIN")
            cb.execute("UPDATE retry_locks SET v = 2 WHERE id = 2")
            errors: list[Exception] = []

            def cross() -> None:
                try:
                    with b.cursor() as c:
                        c.execute("UPDATE retry_locks SET v = 2 WHERE id = 1")
                except pymysql.err.MySQLError as e:
                    errors.append(e)

            t = threading.Thread(target=cross)
            t.start()
            time.sleep(0.5)
            try:
                ca.execute("UPDATE retry_locks SET v = 1 WHERE id = 2")
            except pymysql.err.MySQLError as e:
                errors.append(e)
            t.join(timeout=30)
        (deadlock,) = errors
        assert retry.kind(deadlock) == "mysql 1213 deadlock"
    finally:
        a.close()
        b.close()
    assert not retry.is_transient(ConfigError("bad input"))
    assert not retry.is_transient(ValueError("2013"))


def test_classifier_on_warehouse_errors(pg_url):
    with (psycopg.connect(pg_url.replace("postgres:@", "postgres@")) as c,
          pytest.raises(psycopg.Error) as info):
        c.execute("SELEC 1")
    assert not retry.is_transient(info.value)
    assert retry.kind(psycopg.errors.SerializationFailure("x")).startswith("warehouse 40001")
    assert retry.kind(psycopg.errors.DeadlockDetected("x")).startswith("warehouse 40P01")
    assert not retry.is_transient(psycopg.errors.UniqueViolation("x"))
    # a load that gave up on a transient error may be retried by Dagster's policy
    try:
        raise LoadError("loading failed") from psycopg.errors.SerializationFailure("x")
    except LoadError as e:
        assert retry.is_transient(e)
    try:
        raise LoadError("loading failed") from psycopg.errors.UniqueViolation("x")
    except LoadError as e:
        assert not retry.is_transient(e)


def test_call_is_bounded_and_counts(mysql_db):
    """A query on a connection killed before every attempt: retried up to the bound, every
    retry counted; a non-transient error is raised at once."""
    mysql = MySQLResource(url=f"mysql://root:@{MYSQL_HOST}:{MYSQL_PORT}/{mysql_db}")
    killer = _connect()
    counts = retry.Retries()
    kills = {"n": 0}

    def killed_twice(conn) -> int:
        if kills["n"] < 2:
            kills["n"] += 1
            with killer.cursor() as cur:
                cur.execute(f"KILL {conn.thread_id()}")
        with conn.cursor() as cur:
            cur.execute("SELECT 7")
            return cur.fetchone()[0]

    assert mysql.run("q", killed_twice, counts) == 7
    assert counts.total == 2 and counts.by_kind["mysql 2013 lost connection"] == 2

    def always_killed(conn) -> None:
        with killer.cursor() as cur:
            cur.execute(f"KILL {conn.thread_id()}")
        with conn.cursor() as cur:
            cur.execute("SELECT 1")

    fast = retry.Retries()
    with pytest.raises(pymysql.err.OperationalError):
        mysql.run("q", always_killed, fast, backoff=retry.Backoff(3, 0.01))
    assert fast.total == 2  # three tries in all

    calls = retry.Retries()
    with pytest.raises(pymysql.err.ProgrammingError):
        mysql.run("q", lambda c: c.cursor().execute("SELEC 1"), calls)
    assert calls.total == 0
    mysql.teardown_after_execution(None)
    killer.close()


def test_dagster_step_lets_only_transient_errors_reach_the_retry_policy(mysql_db):
    victim = _connect(mysql_db)
    with _connect() as k, k.cursor() as cur:
        cur.execute(f"KILL {victim.thread_id()}")
    lost = _error(victim, "SELECT 1")
    with pytest.raises(pymysql.err.OperationalError), dagster_step():
        raise lost
    with pytest.raises(dg.Failure) as info, dagster_step():
        raise ConfigError("table x.y does not exist")
    assert not info.value.allow_retries and isinstance(info.value.__cause__, ConfigError)


def test_both_assets_carry_the_retry_policy(mysql_db):
    from s3rs_assets.assets import build_table_assets

    cfg = table_cfg(mysql_db, "anything")
    by_key = {a.key: a for a in build_table_assets(cfg) if isinstance(a, dg.AssetsDefinition)
              and len(a.keys) == 1}
    for stage in ("s3_parquet", "redshift_table"):
        assert by_key[asset_key(cfg, stage)].op.retry_policy == RETRY_POLICY


#: What a task reads while its connection is killed: a query still running on the server
#: (no row sent yet), or rows streaming to the client (the kill lands mid-packet: connectorx
#: then says "bytes remaining on stream").
PHASES = {
    "running": ("SELECT SLEEP(30) AS s, '' AS pad", 0.0),
    "streaming": ("SELECT seq AS s, REPEAT('x', 500) AS pad FROM seq_1_to_2000000", 0.3),
}


def _reader(url: str, sql: str):
    def run(batches):
        import connectorx as cx

        for _ in batches:
            yield cx.read_sql(url, sql, return_type="arrow").select(["s"]).to_batches()[0]

    return run


def _reader_rows(url: str, sql: str):
    def run(parts):
        import connectorx as cx

        for _ in parts:
            yield cx.read_sql(url, sql, return_type="arrow").num_rows

    return run


@pytest.mark.parametrize("phase", list(PHASES))
@pytest.mark.parametrize("reader", ["jdbc", "connectorx", "connectorx-rdd"])
def test_a_spark_read_losing_its_connection_is_transient(reader, phase, mysql_db, mysql_url,
                                                         spark_resource):
    """A Spark job whose task's MySQL connection is killed (JDBC, or connectorx inside the
    task of a DataFrame or an RDD job), while its query runs or while its rows stream, fails
    with an error the classifier names transient: the batch is read again."""
    session = spark_resource.session()
    mysql = MySQLResource(url=mysql_url)
    sql, wait = PHASES[phase]
    killed: list[int] = []

    def kill_the_reader() -> None:
        with _connect() as k, k.cursor() as cur:
            for _ in range(200):
                cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s "
                            "AND INFO LIKE %s", (mysql_db, f"%{sql[:30]}%"))
                ids = [r[0] for r in cur.fetchall()]
                if ids:
                    time.sleep(wait)
                    for i in ids:
                        cur.execute(f"KILL {int(i)}")
                    killed.extend(ids)
                    return
                time.sleep(0.1)

    t = threading.Thread(target=kill_the_reader)
    t.start()
    with pytest.raises(Exception) as info:  # noqa: PT011 - Spark's own exception classes
        if reader == "jdbc":
            # every column read (a pruned read of `s` alone would end before the kill),
            # streamed (fetchsize), summed in the JVM
            session.read.jdbc(mysql.jdbc_url(), f"({sql}) AS t",
                              properties={**mysql.jdbc_properties(), "fetchsize": "10000"}
                              ).selectExpr("sum(length(pad))").collect()
        elif reader == "connectorx":
            session.range(0, 1, 1, 1).mapInArrow(_reader(mysql.connectorx_url(), sql),
                                                 "s long").collect()
        else:  # Extractor.read's job on a classic session
            session.sparkContext.parallelize(range(1), 1).mapPartitions(
                _reader_rows(mysql.connectorx_url(), sql)).collect()
    t.join(timeout=60)
    assert killed
    assert (retry.kind(info.value) or "").startswith("spark read"), str(info.value)[:2000]


class Killer(threading.Thread):
    """Kills every connection to `db` (but `spare`) from another session, round after
    round, `rounds` times, while a sync runs."""

    def __init__(self, db: str, spare: set[int], rounds: int, every: float):
        super().__init__(daemon=True)
        self.db, self.spare, self.rounds, self.every = db, spare, rounds, every
        self.killed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        conn = _connect()
        self.spare.add(conn.thread_id())
        done = 0
        while done < self.rounds and not self.stop.wait(self.every):
            with conn.cursor() as cur:
                cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s "
                            "AND USER = 'root'", (self.db,))
                ids = [r[0] for r in cur.fetchall() if r[0] not in self.spare]
                for i in ids:
                    try:
                        cur.execute(f"KILL {int(i)}")
                        self.killed.append(i)
                    except pymysql.err.MySQLError:
                        pass  # gone already
            done += bool(ids)
        conn.close()


def test_sync_survives_killed_connections(mysql_db, mysql_conn, mysql_url, pg_url,
                                          s3_resource, spark_resource):
    """The sync's MySQL connections are killed repeatedly while a 12-chunk sync runs: it
    finishes, the warehouse equals MySQL row for row, and the run reports its retries."""
    make_ties_table(mysql_conn, "kill_me", ties(24_000, DAY, 20))
    cfg = table_cfg(mysql_db, "kill_me", chunk_rows=2000, target="dw_kill.kill_me")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    killer = Killer(mysql_db, {mysql_conn.thread_id()}, rounds=8, every=1.0)
    killer.start()
    try:
        with dg.instance_for_test() as instance:
            # as `s3rs sync` runs it: without the `reconciled` check (a UI/schedule check,
            # not a sync step; its own retries: test_reconcile_retry.py)
            result = sync(cfg, res, partition=f"{DAY:%Y-%m-%d}", instance=instance,
                          reconcile_check=False)
    finally:
        killer.stop.set()
        killer.join(timeout=30)
    assert result.success
    assert killer.killed, "the killer found the sync's connections"
    retries = {
        ev.asset_key.path[-1]: metadata_facts(ev.materialization.metadata)[RETRIES_METADATA_KEY]
        for ev in result.get_asset_materialization_events()
    }
    details = [metadata_facts(ev.materialization.metadata)["retry_details"]
               for ev in result.get_asset_materialization_events()]
    print(f"killed {len(killer.killed)} connection(s); retries {retries}; {details}")
    assert sum(retries.values()) > 0, retries
    assert run_retries(result) == sum(retries.values())  # what `s3rs sync` prints
    with mysql_conn.cursor() as cur:
        cur.execute("SELECT id, update_at, amount, note FROM kill_me ORDER BY id")
        expected = [tuple(r) for r in cur.fetchall()]
    with psycopg.connect(pg_url.replace("postgres:@", "postgres@")) as c:
        got = c.execute('SELECT id, update_at, amount, note FROM "dw_kill"."kill_me" '
                        "ORDER BY id").fetchall()
    assert len(got) == len(expected) == 24_000
    assert [tuple(r) for r in got] == expected
