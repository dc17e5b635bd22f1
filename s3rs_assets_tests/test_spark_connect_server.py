"""`s3rs spark serve`: one long-lived Spark Connect server that successive runs attach to.

The server is started here through the CLI (`s3rs spark serve` on a free port, in its own
process group, stopped with SIGTERM at the end); two `s3rs sync` processes in a row run
through it against the real MariaDB, PostgreSQL and moto, and both leave PostgreSQL equal
to MySQL row for row. The second run attached to the same server: both runs' metadata name
the server's one Spark application id, the one the server announced when it started.
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import dagster as dg
import psycopg
import pymysql
import pytest
import yaml
from click.testing import CliRunner

from s3rs_assets import cli
from s3rs_assets.names import asset_key, metadata_facts
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT, spark_env
from s3rs_assets_tests.helpers import insert_rows, make_ties_table, table_cfg
from s3rs_assets_tests.processes import managed_process, tail

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SYNC_DEADLINE = 300.0
TABLE = "sc_orders"


def _env(**extra: str) -> dict[str, str]:
    return spark_env(**extra)


def _mysql(db: str):
    return pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=db,
                           autocommit=True, charset="utf8mb4")


def _pg(pg_url: str):
    return psycopg.connect(pg_url.replace("postgres:@", "postgres@"), autocommit=True)


def _assert_same_rows(db: str, pg_url: str) -> int:
    with _mysql(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, update_at, amount, note FROM `{TABLE}` ORDER BY id")
        want = [tuple(r) for r in cur.fetchall()]
    with _pg(pg_url) as c:
        got = c.execute(
            f'SELECT id, update_at, amount, note FROM "{db}"."{TABLE}" ORDER BY id'
        ).fetchall()
    assert [tuple(r) for r in got] == want
    return len(want)


def _sync(tmp: Path, env: dict[str, str], name: str, n: int) -> float:
    log = tmp / f"sync{n}.log"
    t0 = time.monotonic()
    with managed_process([sys.executable, "-m", "s3rs_assets.cli", "sync", "-t", name,
                          "--no-progress"], env, log, tmp) as proc:
        try:
            rc = proc.wait(timeout=SYNC_DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"sync {n} not done in {SYNC_DEADLINE}s:\n{tail(log)}")
    assert rc == 0, f"sync {n} exited {rc}:\n{tail(log)}"
    return time.monotonic() - t0


def test_two_syncs_attach_to_one_running_server(
    connect_server, mysql_db, mysql_url, pg_url, bucket, tmp_path
):
    url, app_id, state = connect_server
    name = f"{mysql_db}.{TABLE}"
    today = datetime.now().replace(hour=0, minute=0, second=0, microsecond=0)
    cfg = {"name": name, "start": (today - timedelta(days=2)).strftime("%Y-%m-%d"),
           "lag": "0s", "partition": "daily", "chunk_rows": 40, "parallelism": 2}
    tables = tmp_path / "tables.yaml"
    tables.write_text(yaml.safe_dump({"tables": [cfg]}))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = _env(S3RS_TABLES=str(tables), S3RS_S3_BUCKET=bucket, S3RS_S3_PREFIX="s3rs",
               S3RS_MYSQL_URL=mysql_url, S3RS_REDSHIFT_URL=pg_url, DAGSTER_HOME=str(home),
               S3RS_SPARK_MASTER=url)
    two_days_ago = today - timedelta(days=2) + timedelta(hours=6)
    with _mysql(mysql_db) as conn:
        make_ties_table(conn, TABLE, [(i, two_days_ago + timedelta(microseconds=i % 3))
                                      for i in range(1, 101)])
    with _pg(pg_url) as c:
        c.execute(f'DROP TABLE IF EXISTS "{mysql_db}"."{TABLE}"')

    first = _sync(tmp_path, env, name, 1)
    assert _assert_same_rows(mysql_db, pg_url) == 100
    with _mysql(mysql_db) as conn:
        with conn.cursor() as cur:  # rows new since the first run, in today's open window
            cur.execute("SELECT NOW(6) - INTERVAL 1 SECOND")
            (just_now,) = cur.fetchone()
        insert_rows(conn, TABLE, [(i, just_now) for i in range(101, 161)])  # one tie group
    second = _sync(tmp_path, env, name, 2)
    assert _assert_same_rows(mysql_db, pg_url) == 160

    # both runs name the server's one application: the second attached, no new Spark
    with dg.DagsterInstance.from_config(str(home)) as instance:
        records = instance.fetch_materializations(
            asset_key(table_cfg(mysql_db, TABLE), "s3_parquet"), limit=100
        ).records
        apps = {
            r.run_id: metadata_facts(r.asset_materialization.metadata)["spark_application"]
            for r in records
            if "spark_application" in metadata_facts(r.asset_materialization.metadata)
        }
        steps = {e.step_key for run_id in apps for e in instance.all_logs(run_id) if e.step_key}
    # a sync runs its own checks, never the full `reconciled` compare
    assert not [s for s in steps if s.endswith("_reconciled")], steps
    assert [s for s in steps if s.endswith("_matches_mysql")], steps
    assert len(apps) == 2, apps
    # the URL names the server's shared session; metadata shows it without parameters
    assert "/;session_id=" in url
    assert set(apps.values()) == {f"{url.split('/;')[0]} {app_id}"}
    assert app_id.startswith("local-")
    status = CliRunner().invoke(cli.main, ["spark", "status", "--state-dir", str(state)])
    assert status.exit_code == 0 and f"running: {url}" in status.output
    print(f"S3RS-TIMING sync 1: {first:.1f}s, sync 2: {second:.1f}s through {url}")
