"""A reconcile pass whose connections are killed by the servers (MariaDB's KILL, PostgreSQL's
pg_terminate_backend) finds exactly what an undisturbed pass finds: its reads are run again
on new connections, like a sync's (retry.py), and the retries are in the report's notes."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pymysql
import pytest

from s3rs_assets.reconcile import ReconcileOptions, reconcile_table
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.reconcile_fixtures import Env, make_env
from s3rs_assets_tests.test_reconcile import _make


@pytest.fixture
def env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource) -> Env:
    return make_env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource)


class KilledMySQL:
    """The pass's MySQL side: every `every`-th new connection, from the first, is killed by
    the server (KILL from another session) before its first query."""

    def __init__(self, inner: Any, every: int = 2):
        self.inner, self.every, self.opened, self.killed = inner, every, 0, 0
        self.killer = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                                      autocommit=True)
        self.lock = threading.Lock()  # the diff opens connections from its query threads

    def connect(self) -> Any:
        conn = self.inner.connect()
        with self.lock:
            self.opened += 1
            if (self.opened - 1) % self.every == 0:
                with self.killer.cursor() as cur:
                    cur.execute(f"KILL {int(conn.thread_id())}")
                self.killed += 1
        return conn


class KilledWarehouse:
    """The pass's warehouse side: every other connection the diff opens is terminated by
    PostgreSQL (pg_terminate_backend from another session) before its first query."""

    def __init__(self, inner: Any, pg_url: str):
        self.inner, self.opened, self.killed = inner, 0, 0
        self.killer = psycopg.connect(pg_url, autocommit=True)
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def connect(self, **kw: Any) -> Any:
        conn = self.inner.connect(**kw)
        with self.lock:
            self.opened += 1
            if self.opened % 2:
                pid = conn.query("SELECT pg_backend_pid()")[0][0]
                self.killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
                self.killed += 1
        return conn


def test_a_pass_whose_connections_are_killed_finds_what_an_undisturbed_one_finds(env):
    table, target = _make(env, "int", n=240)
    env.pg(f'DELETE FROM "{target.schema}"."{target.table}" WHERE id IN (3, 150)')
    env.mysql_exec(f"UPDATE `{table.table}` SET note = 'silently edited' WHERE id = 77")
    env.mysql_exec(f"DELETE FROM `{table.table}` WHERE id = 200")
    options = ReconcileOptions(threshold=8, columns="all")

    calm = reconcile_table(table, env.mysql, env.warehouse, env.s3, None, options)
    mysql, warehouse = KilledMySQL(env.mysql), KilledWarehouse(env.warehouse, env.pg_url)
    try:
        killed = reconcile_table(table, mysql, warehouse, env.s3, None, options)
    finally:
        mysql.killer.close()
        warehouse.killer.close()

    assert calm.counts() == {"missing": 2, "extra": 1, "differs": 1}
    assert killed.counts() == calm.counts()
    assert killed.diff.differences == calm.diff.differences
    assert (killed.diff.mysql_rows, killed.diff.warehouse_rows) == (
        calm.diff.mysql_rows, calm.diff.warehouse_rows)
    # each side lost connections, and every lost read was counted once and run again
    assert mysql.killed >= 3 and warehouse.killed >= 1, (mysql.opened, warehouse.opened)
    retried = [n for n in killed.notes if "retried" in n]
    assert len(retried) == 1, killed.notes
    assert f"{mysql.killed + warehouse.killed} read(s) retried" in retried[0], retried
    assert "mysql" in retried[0] and "warehouse" in retried[0], retried
    assert not [n for n in calm.notes if "retried" in n]


def test_a_pass_still_stops_when_mysql_stays_unreachable(env, monkeypatch):
    """Retries are bounded: a MySQL that drops every connection stops the pass with the
    clear error and nothing changed (exit 2 in the CLI), after the last try."""
    from s3rs_assets import retry
    from s3rs_assets.errors import ConfigError
    from s3rs_assets.reconcile import run

    table, _ = _make(env, "int", n=20)
    monkeypatch.setattr(run, "MYSQL_BACKOFF", retry.Backoff(attempts=3, first=0.01))

    mysql = KilledMySQL(env.mysql, every=1)
    try:
        with pytest.raises(ConfigError) as info:
            reconcile_table(table, mysql, env.warehouse, env.s3, None, ReconcileOptions())
    finally:
        mysql.killer.close()
    assert "nothing was changed" in str(info.value)
    assert mysql.killed == 3  # describe, tried three times
