"""`s3rs server`: a long-lived process that forks a worker per `s3rs sync` (sync_server).

Against the real stack: the server is started through the CLI with an environment that
holds none of the settings (no MySQL, S3 or warehouse, no DAGSTER_HOME), and `s3rs sync`
processes hand it their command line. What is checked: the rows land exactly as with a
fresh process (ties at a chunk boundary, an increment of one tie group), the worker used
the client's environment and directory, its output reached the client's own pipes and its
exit code is the client's; a server on other code is refused and the client runs the sync
itself, and a server whose own code changed restarts on the new code; Ctrl-C to the client
reaches the worker; no server, a stale socket or `S3RS_SERVER=off` run the sync in its own
process; the client imports neither Dagster nor the sync command. The runs attach to the
session's Spark Connect server (conftest).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import boto3
import psycopg
import pymysql
import pytest
import yaml
from click.testing import CliRunner

from s3rs_assets import cli, sync_server
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT, REPO, spark_env
from s3rs_assets_tests.helpers import insert_rows, make_ties_table
from s3rs_assets_tests.processes import managed_process, restore_default_signals, tail

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TABLE = "served_orders"
DEADLINE = 300.0
WORKER = re.compile(r"worker (\d+): s3rs (.*)")


def _server_env(**extra: str) -> dict[str, str]:
    """What `s3rs server serve` runs with: none of s3rs's settings (a worker must take its
    client's), only what finds Python, the code and Java."""
    keep = ("PATH", "HOME", "JAVA_HOME", "LANG", "PYTHONDONTWRITEBYTECODE")
    return {**{k: os.environ[k] for k in keep if k in os.environ},
            "PYTHONPATH": str(REPO), **extra}


def _wait_ready(state: Path, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + DEADLINE
    while sync_server.running(state) is None:
        assert proc.poll() is None, f"server exited {proc.returncode}:\n{tail(log)}"
        assert time.monotonic() < deadline, f"no server in {DEADLINE}s:\n{tail(log)}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def served(tmp_path_factory, connect_server, moto_endpoint, mysql_db, mysql_url, pg_url):
    """A running `s3rs server` and the client environment of one table: (state dir, server
    log, client env, table name, the client's directory)."""
    tmp = tmp_path_factory.mktemp("served")
    bucket = f"s3rs-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    state = tmp / "state"
    log = tmp / "server.log"
    url, _, _ = connect_server
    name = f"{mysql_db}.{TABLE}"
    today = datetime.now().replace(hour=0, minute=0, second=0, microsecond=0)
    cfg = {"name": name, "start": (today - timedelta(days=2)).strftime("%Y-%m-%d"),
           "lag": "0s", "partition": "daily", "chunk_rows": 40, "parallelism": 2}
    (tmp / "tables.yaml").write_text(yaml.safe_dump({"tables": [cfg]}))
    home = tmp / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    # relative paths: the worker must also work in the client's directory
    env = spark_env(S3RS_TABLES="tables.yaml", S3RS_S3_BUCKET=bucket, S3RS_S3_PREFIX="s3rs",
                    S3RS_MYSQL_URL=mysql_url, S3RS_REDSHIFT_URL=pg_url,
                    DAGSTER_HOME=str(home), S3RS_SPARK_MASTER=url,
                    S3RS_SERVER_STATE_DIR=str(state), S3RS_SERVER="on")
    args = [sys.executable, "-m", "s3rs_assets.cli", "server", "serve", "--state-dir",
            str(state)]
    with managed_process(args, _server_env(), log, tmp) as proc:
        _wait_ready(state, proc, log)
        yield state, log, env, name, tmp
    assert not (state / "server.sock").exists()  # SIGTERM: stopped and cleaned up


def _mysql(db: str):
    return pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=db,
                           autocommit=True, charset="utf8mb4")


def _rows(db: str, pg_url: str) -> tuple[list[tuple], list[tuple]]:
    with _mysql(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, update_at, amount, note FROM `{TABLE}` ORDER BY id")
        want = [tuple(r) for r in cur.fetchall()]
    with psycopg.connect(pg_url.replace("postgres:@", "postgres@"), autocommit=True) as c:
        got = [tuple(r) for r in c.execute(
            f'SELECT id, update_at, amount, note FROM "{db}"."{TABLE}" ORDER BY id')]
    return want, got


def _s3rs(env: dict, cwd: Path, *args: str, timeout: float = DEADLINE
          ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "s3rs_assets.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          preexec_fn=restore_default_signals)


def _workers(log: Path) -> list[tuple[int, str]]:
    return [(int(m[1]), m[2]) for m in WORKER.finditer(tail(log, 200_000))]


def test_a_served_sync_moves_the_rows_in_the_clients_environment(served, mysql_db, pg_url):
    state, log, env, name, tmp = served
    day = datetime.now().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(
        days=2) + timedelta(hours=6)
    with _mysql(mysql_db) as conn:  # 100 rows, ties across the 40-row chunks
        make_ties_table(conn, TABLE, [(i, day + timedelta(microseconds=i % 3))
                                      for i in range(1, 101)])
    before = len(_workers(log))

    first = _s3rs(env, tmp, "sync", "-t", name, "--no-progress")

    assert first.returncode == 0, first.stdout + first.stderr
    assert f"{name}: run " in first.stdout and "succeeded" in first.stdout  # its own pipes
    workers = _workers(log)
    assert len(workers) == before + 1 and workers[-1][1] == f"sync -t {name} --no-progress"
    assert workers[-1][0] != os.getpid()
    want, got = _rows(mysql_db, pg_url)
    assert got == want and len(want) == 100

    with _mysql(mysql_db) as conn:  # one tie group, new since the first sync
        with conn.cursor() as cur:
            cur.execute("SELECT NOW(6) - INTERVAL 1 SECOND")
            (just_now,) = cur.fetchone()
        insert_rows(conn, TABLE, [(i, just_now) for i in range(101, 161)])
    second = _s3rs(env, tmp, "sync", "-t", name, "--no-progress")

    assert second.returncode == 0, second.stdout + second.stderr
    assert len(_workers(log)) == before + 2
    want, got = _rows(mysql_db, pg_url)
    assert got == want and len(want) == 160


def test_exit_code_and_errors_pass_through(served):
    state, log, env, _, tmp = served
    before = len(_workers(log))

    out = _s3rs(env, tmp, "sync", "-t", "nosuch.table")

    assert out.returncode == 2, out.stdout + out.stderr
    assert "nosuch.table" in out.stderr  # the worker's error, on the client's stderr
    assert len(_workers(log)) == before + 1
    bad = _s3rs({**env, "DAGSTER_HOME": ""}, tmp, "sync", "-t", "nosuch.table")
    assert bad.returncode == 2 and len(_workers(log)) == before + 2


def test_a_worker_that_cannot_become_its_client_says_so(served):
    """The client's directory gone by the time the worker takes it: the worker ends before
    running anything, the client exits 1 with the worker's reason (no traceback)."""
    state, log, env, _, tmp = served
    before = len(_workers(log))
    script = ("import os, sys; os.getcwd = lambda: '/nonexistent/s3rs'; "
              "from s3rs_assets.cli import main; main(['sync', '-t', 'nosuch.table'])")
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp,
                         capture_output=True, text=True, timeout=DEADLINE)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the server's worker failed: FileNotFoundError" in out.stderr
    assert "Traceback" not in out.stderr
    assert len(_workers(log)) == before + 1
    assert sync_server.running(state) is not None


def test_the_client_imports_neither_dagster_nor_the_sync_command(served):
    state, log, env, _, tmp = served
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "s3rs_assets.cli", "sync",
                          "-t", "nosuch.table"], env=env, cwd=tmp, capture_output=True,
                         text=True, timeout=DEADLINE)
    assert out.returncode == 2, out.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()
                if line.startswith("import time:")}
    assert "s3rs_assets.sync_server" in imported
    assert not {m for m in imported if m.split(".")[0] in ("dagster", "pyspark", "pandas")}
    assert "s3rs_assets.cli.sync" not in imported


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_a_stopped_client_stops_its_worker_and_the_server_goes_on(served, mysql_db, signum):
    """Ctrl-C is passed to the worker's process group; a client killed outright closes
    the connection, which interrupts the worker too. Both while the worker is blocked on
    a locked table: nothing else could end it."""
    state, log, env, name, tmp = served
    with _mysql(mysql_db) as conn:
        make_ties_table(conn, TABLE, [(1, datetime.now() - timedelta(hours=1))])
    before = len(_workers(log))
    with _mysql(mysql_db) as lock:
        lock.cursor().execute(f"LOCK TABLES `{TABLE}` WRITE")  # the sync's probe waits
        client = subprocess.Popen(
            [sys.executable, "-m", "s3rs_assets.cli", "sync", "-t", name, "--no-progress"],
            env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=_nice_client)
        try:
            deadline = time.monotonic() + DEADLINE
            while len(_workers(log)) == before:
                assert client.poll() is None and time.monotonic() < deadline, tail(log)
                time.sleep(0.1)
            worker = _workers(log)[-1][0]
            time.sleep(1.0)
            assert client.poll() is None  # waiting on the lock
            assert _nice(worker) == _nice(client.pid)  # `nice s3rs sync` stays nice
            client.send_signal(signum)
            _, err = client.communicate(timeout=120)
            deadline = time.monotonic() + 60
            while _alive(worker) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not _alive(worker)  # ended while the table is still locked
        finally:
            if client.poll() is None:
                client.kill()
    assert client.returncode != 0, err
    assert sync_server.running(state) is not None


def _nice_client() -> None:
    restore_default_signals()
    os.nice(3)


def _nice(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _fake_server(state: Path, *, stored: str, current: str | None = None) -> list[str]:
    """A server started as if its code had fingerprint `stored`; with `current`, the code it
    finds on disk now has that one (else the real fingerprint)."""
    patch = f"sync_server.fingerprint = lambda: {current!r}" if current else ""
    script = textwrap.dedent(f"""
        from pathlib import Path
        from s3rs_assets import cli, sync_server
        {patch}
        server = sync_server.Server(Path({str(state)!r}), cli.main)
        server.fingerprint = {stored!r}
        server.bind()
        server.serve_forever()
    """)
    return [sys.executable, "-c", script]


def test_a_server_on_other_code_than_the_clients_is_refused(tmp_path, served):
    """The client's code differs, the server's did not change: refused, no restart."""
    _, _, env, _, cwd = served
    state = tmp_path / "other"
    log = tmp_path / "other.log"
    args = _fake_server(state, stored="another-build", current="another-build")
    with managed_process(args, _server_env(), log, tmp_path) as proc:
        _wait_ready(state, proc, log)
        env = {**env, "S3RS_SERVER_STATE_DIR": str(state)}
        out = _s3rs(env, cwd, "sync", "-t", "nosuch.table")
        status = _s3rs(env, cwd, "server", "status")
        assert sync_server.running(state)["fingerprint"] == "another-build"  # still it
    assert "was started on other code" in out.stderr and "runs in its own process" in out.stderr
    assert out.returncode == 2 and "nosuch.table" in out.stderr  # run here instead
    assert not _workers(log) and "restarting" not in tail(log)
    assert status.returncode == 1 and "OTHER code" in status.stdout


def test_a_server_whose_code_changed_restarts_on_the_new_code(tmp_path, served):
    """Started before an upgrade: the first sync after it is refused (and runs in its own
    process) and the server execs itself on the new code, same pid, same state directory;
    the next sync is served again."""
    _, _, env, _, cwd = served
    state = tmp_path / "upgraded"
    log = tmp_path / "upgraded.log"
    env = {**env, "S3RS_SERVER_STATE_DIR": str(state)}
    with managed_process(_fake_server(state, stored="before-upgrade"), _server_env(), log,
                         tmp_path) as proc:
        _wait_ready(state, proc, log)
        first = _s3rs(env, cwd, "sync", "-t", "nosuch.table")
        deadline = time.monotonic() + DEADLINE
        while (found := sync_server.running(state)) is None or found.get(
                "fingerprint") != sync_server.fingerprint():
            assert proc.poll() is None, f"server exited {proc.returncode}:\n{tail(log)}"
            assert time.monotonic() < deadline, f"no restart in {DEADLINE}s:\n{tail(log)}"
            time.sleep(0.2)
        assert found["pid"] == proc.pid  # exec: the same process
        second = _s3rs(env, cwd, "sync", "-t", "nosuch.table")
        status = _s3rs(env, cwd, "server", "status")
    assert "restarts on the code now installed" in first.stderr
    assert first.returncode == 2 and "nosuch.table" in first.stderr  # ran in its own process
    assert "restarting on it" in tail(log)
    assert second.returncode == 2 and "nosuch.table" in second.stderr
    assert "server" not in second.stderr
    assert [argv for _, argv in _workers(log)] == ["sync -t nosuch.table"]  # served after
    assert status.returncode == 0 and "this code" in status.stdout


def test_without_a_server_the_sync_runs_in_its_own_process(tmp_path, served):
    _, log, env, _, cwd = served
    before = len(_workers(log))
    off = _s3rs({**env, "S3RS_SERVER": "off"}, cwd, "sync", "-t", "nosuch.table")
    assert off.returncode == 2 and len(_workers(log)) == before
    # called in process with its output captured (a test runner, a program's buffer):
    # a worker could not write there, so the command runs here
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.chdir(cwd)
        captured = CliRunner().invoke(cli.main, ["sync", "-t", "nosuch.table"])
    assert captured.exit_code == 2 and "nosuch.table" in captured.output
    assert len(_workers(log)) == before
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / "server.sock").write_text("")  # a server that died without cleaning up
    for state in (stale, tmp_path / "none"):
        out = _s3rs({**env, "S3RS_SERVER_STATE_DIR": str(state)}, cwd, "sync", "-t",
                    "nosuch.table")
        assert out.returncode == 2 and "nosuch.table" in out.stderr
        assert "server" not in out.stderr
        status = _s3rs({**env, "S3RS_SERVER_STATE_DIR": str(state)}, cwd, "server", "status")
        assert status.returncode == 1 and "no s3rs server running" in status.stdout


def test_start_status_stop(tmp_path, served):
    _, _, env, _, _ = served
    state = tmp_path / "bg"
    env = {**env, "S3RS_SERVER_STATE_DIR": str(state)}
    started = _s3rs(env, tmp_path, "server", "start")
    try:
        assert started.returncode == 0 and "s3rs server ready" in started.stdout, started.stderr
        pid = sync_server.running(state)["pid"]
        again = _s3rs(env, tmp_path, "server", "start")
        assert again.returncode == 0 and f"already running (pid {pid})" in again.stdout
        status = _s3rs(env, tmp_path, "server", "status")
        assert status.returncode == 0 and "this code" in status.stdout
        assert (state.stat().st_mode & 0o777) == 0o700
    finally:
        stopped = _s3rs(env, tmp_path, "server", "stop")
    assert stopped.returncode == 0 and f"stopped the s3rs server (pid {pid})" in stopped.stdout
    assert sync_server.running(state) is None and not (state / "server.sock").exists()
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
