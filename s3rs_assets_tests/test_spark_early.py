"""`s3rs sync` starts its local Spark early (spark_session.start_early, issue 19 item 1): the
JVM is asked for before Dagster is imported, once per process, and the backup step takes that
very session. A missing JDBC jar stops the sync before any run (exit 2) without importing
PySpark; no JVM outlives the command, Ctrl-C included. Each sync runs in a fresh interpreter
against the real services; the probe reports what happened, counted, not timed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pymysql
import pytest
import yaml

from s3rs_assets import spark_session
from s3rs_assets.errors import ConfigError
from s3rs_assets_tests.helpers import make_ties_table

#: runs `s3rs ARGS` in this interpreter, recording the early start (was Dagster imported
#: yet?), the sessions the backup step took, the JVMs launched and their pids
_PROBE = """
import json, runpy, sys
from s3rs_assets import spark_session as ss
seen = {"early": [], "taken": [], "sessions": 0, "jvm": []}
start, take, build = ss.start_early, ss.take_early, ss.start_session

def start_early(*a, **kw):
    seen["early"].append("dagster" in sys.modules)
    started = start(*a, **kw)
    sys.stderr.write("EARLY\\n"); sys.stderr.flush()
    return started

def take_early():
    session = take()
    seen["taken"].append(session is not None)
    return session

def start_session(*a, **kw):
    seen["sessions"] += 1
    return build(*a, **kw)

ss.start_early, ss.take_early, ss.start_session = start_early, take_early, start_session
sys.argv = ["s3rs", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("s3rs_assets.cli", run_name="__main__")
except SystemExit as e:
    code = e.code or 0
seen["code"] = code
seen["modules"] = sorted(sys.modules)
if "pyspark" in sys.modules:
    import os, threading
    from pyspark import SparkContext
    if SparkContext._gateway is not None:
        proc = SparkContext._gateway.proc
        seen["jvm"].append(proc.pid)
        seen["jvm_fds"] = [os.readlink(f"/proc/{proc.pid}/fd/{n}") for n in (1, 2)]
        seen["own_fds"] = [os.readlink(f"/proc/self/fd/{n}") for n in (1, 2)]
        SparkContext._jvm.System.err.println("JVM-SAYS-HELLO")
        # the JVM ends when its stdin closes; its output is relayed to the end
        proc.stdin.close()
        proc.wait(timeout=120)
        for t in threading.enumerate():
            if t.name == "s3rs-jvm-output":
                t.join(timeout=60)
sys.stderr.write("\\nPROBE " + json.dumps(seen) + "\\n")
"""


def _day(n: int) -> datetime:
    return (datetime.now() - timedelta(days=n)).replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, mysql_db, mysql_url, moto_endpoint):
    """A table with rows to back up (no warehouse: --backup-only), a fresh Dagster home."""
    import boto3

    from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT

    bucket = f"s3rs-early-{os.getpid()}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    rows = [(i, _day(1) + timedelta(minutes=i)) for i in range(1, 41)]
    with pymysql.connect(
        host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=mysql_db, autocommit=True
    ) as conn:
        make_ties_table(conn, "early_orders", rows)
    entry = {"name": f"{mysql_db}.early_orders", "start": _day(2).strftime("%Y-%m-%d"),
             "lag": "0s"}
    path = tmp_path_factory.mktemp("early") / "tables.yaml"
    path.write_text(yaml.safe_dump({"tables": [entry]}))
    env = {
        **os.environ,
        "S3RS_TABLES": str(path),
        "S3RS_S3_BUCKET": bucket,
        "S3RS_MYSQL_URL": mysql_url,
        "S3RS_SPARK_MASTER": "local[1]",
        "S3RS_SERVER": "off",
        "PYSPARK_PYTHON": sys.executable,
    }
    for var in ("S3RS_REDSHIFT_URL", "S3RS_SOURCE_TIMEZONE", "S3RS_SSH_HOST", "S3RS_LOG_FORMAT",
                "S3RS_SPARK_JARS"):
        env.pop(var, None)
    return {"name": entry["name"], "env": env, "tmp": tmp_path_factory}


def _probe(stack: dict, *args: str, **env: str) -> tuple[dict, str]:
    """What the probe saw of `s3rs args` in a new interpreter (fresh Dagster home and S3
    prefix: every sync finds the rows to read), and its output."""
    home = stack["tmp"].mktemp("dagster_home")
    p = subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        env={**stack["env"], "DAGSTER_HOME": str(home), "S3RS_S3_PREFIX": home.name, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = [ln for ln in p.stderr.splitlines() if ln.startswith("PROBE ")]
    assert line, p.stdout + p.stderr
    seen = json.loads(line[-1].removeprefix("PROBE "))
    seen["home"] = home
    return seen, p.stdout + p.stderr


def _gone(pid: int, within: float = 60.0) -> bool:
    """The process `pid` has exited (or is a zombie) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.2)
    return False


def test_start_early_refuses_a_missing_jar_and_a_connect_session(monkeypatch):
    # as in a fresh `s3rs sync`: the suite's own SparkContext (a session-wide fixture) may run
    # already, and then nothing starts early (that session is used, jars and all)
    monkeypatch.setattr(spark_session, "_context_running", lambda: False)
    conf = spark_session.spark_defaults("local[1]", "/nonexistent/s3rs-no-driver.jar")
    with pytest.raises(ConfigError, match="JDBC driver jar /nonexistent/s3rs-no-driver.jar"):
        spark_session.start_early(conf, None, jdbc_reads=False)
    assert spark_session._EARLY is None  # nothing started, nothing to take
    assert spark_session.take_early() is None
    remote = spark_session.spark_defaults("sc://127.0.0.1:1")
    assert spark_session.start_early(remote, None, jdbc_reads=False) is False
    assert spark_session._EARLY is None


@pytest.mark.slow
def test_sync_starts_spark_before_dagster_and_the_step_takes_that_session(stack):
    seen, out = _probe(stack, "sync", "--no-progress", "--backup-only", "-t", stack["name"])
    assert seen["code"] == 0, out
    assert "run " in out and "succeeded" in out, out
    assert seen["early"] == [False]  # asked for once, before Dagster was imported
    assert seen["taken"] == [True]  # the backup step took the early session
    assert seen["sessions"] == 1, out  # one session built: the step did not build its own
    assert len(seen["jvm"]) == 1, out
    assert all(_gone(pid) for pid in seen["jvm"]), "a JVM outlived the command"
    # the JVM holds none of the command's output descriptors (a caller's pipe closes when
    # s3rs exits, not after Spark's shutdown hooks), yet what it prints reaches stderr
    assert not set(seen["jvm_fds"]) & set(seen["own_fds"]), seen
    assert "JVM-SAYS-HELLO" in out, out


@pytest.mark.slow
def test_sync_with_a_missing_jar_exits_2_before_any_run(stack):
    import dagster as dg

    jar = "/nonexistent/s3rs-no-driver.jar"
    seen, out = _probe(stack, "sync", "--no-progress", "--backup-only", "-t", stack["name"],
                       S3RS_SPARK_JARS=jar)
    assert seen["code"] == 2, out
    assert f"error before any run: JDBC driver jar {jar} not found" in out, out
    assert seen["sessions"] == 0 and seen["taken"] == []
    # refused before Dagster's instance, the run and Spark
    assert not {"dagster", "pyspark.sql"} & set(seen["modules"]), out
    instance = dg.DagsterInstance.from_config(str(seen["home"])) if os.listdir(
        seen["home"]) else None
    assert instance is None or not instance.get_runs(limit=1)


@pytest.mark.slow
def test_ctrl_c_during_the_early_start_leaves_no_jvm(stack):
    """SIGINT while the JVM starts (the main thread importing Dagster): the command ends
    and so does its JVM (it exits when the interpreter's pipe to it closes)."""
    home = stack["tmp"].mktemp("dagster_home")
    p = subprocess.Popen(
        [sys.executable, "-c", _PROBE, "sync", "--no-progress", "--backup-only", "-t",
         stack["name"]],
        env={**stack["env"], "DAGSTER_HOME": str(home), "S3RS_S3_PREFIX": home.name},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert p.stderr is not None
        for line in p.stderr:
            if line.startswith("EARLY"):
                break
        jvm = None
        deadline = time.monotonic() + 120
        while jvm is None and time.monotonic() < deadline and p.poll() is None:
            jvm = next((c for c in _children(p.pid) if b"java" in _cmdline(c)), None)
            time.sleep(0.05)
        assert jvm is not None, "no JVM was started"
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=120)
        assert _gone(jvm), "the JVM outlived the interrupted command"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(c) for c in text.split()]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""
