"""`S3RS_SPARK_MASTER` pointing at a cluster works without code changes.

Real backups of a small table (300 rows, 2 chunks of 2 sub-ranges) with both readers
against:

- a standalone cluster (`spark://`): a Master and one Worker started here from the venv's
  pyspark; the driver runs in the backup subprocess, tasks in the Worker's executor;
- a Spark Connect server (`sc://`) started here from the venv's pyspark; the backup
  subprocess is a thin gRPC client and every task runs in the server's JVM.

The test session already holds a local SparkSession and one JVM cannot host a second
SparkContext, so each backup runs in a subprocess with its own session. The cluster
processes get no AWS_* variables: a task learns the S3 endpoint and credentials from its
WriteSpec alone, as it would on another host.

Every process started here runs in its own process group and carries a marker in its
environment; it is stopped with SIGTERM, then SIGKILL after a grace period, even when the
test fails, and every wait has a deadline.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path

import pytest

from s3rs_assets.io_manager import store_for
from s3rs_assets.resources import DEFAULT_JDBC_JARS, spark_defaults
from s3rs_assets_tests.conftest import REPO, free_port
from s3rs_assets_tests.helpers import (
    make_ties_table,
    manifest_keys,
    mysql_ids,
    read_manifest_ids,
    read_parquet,
    table_cfg,
    ties,
)
from s3rs_assets_tests.processes import managed_process, tail

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SPARK_HOME = Path(importlib.util.find_spec("pyspark").origin).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
DAY = datetime(2025, 3, 4)
PARTITION = "2025-03-04"
ROWS, CHUNK_ROWS, PARALLELISM = 300, 150, 2  # 2 chunks, 2 files each
READERS = ("connectorx", "jdbc")
CLUSTER_DEADLINE = 300.0  # master + worker up / connect server listening (a loaded CI box is slow)
BACKUP_DEADLINE = 300.0  # one subprocess running the backups of both readers
AWS_VARS = ("AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_PROFILE")

# Run from a file, never `python -c`: pyspark.sql.connect's dependency check takes a
# `-c` program for its own doctests and calls sys.exit(0) when a Connect package is missing.
BACKUP_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from s3rs_assets.resources import S3Resource, SparkResource, spark_defaults
    from s3rs_assets_tests.helpers import backup, resources, table_cfg
    mysql_db, mysql_url, bucket, master = sys.argv[1:5]
    spark = SparkResource(spark_config=spark_defaults(master))
    res = resources(mysql_url, S3Resource(bucket=bucket), spark)
    for arg in sys.argv[5:]:
        table, reader = arg.split(":")
        cfg = table_cfg(mysql_db, table, chunk_rows={chunk}, parallelism={par}, reader=reader)
        t0 = time.monotonic()
        backup(cfg, res, partition="{partition}")
        print(f"S3RS-TIMING {{reader}} {{time.monotonic() - t0:.1f}}s", flush=True)
    from pyspark.sql import SparkSession
    s = SparkSession.getActiveSession()
    print("S3RS-SESSION", type(s).__module__, s.conf.get("spark.master"), flush=True)
    """
).format(chunk=CHUNK_ROWS, par=PARALLELISM, partition=PARTITION)


def _cluster_env() -> dict:
    """What a cluster process sees: Java and Spark set up, no AWS_* variables."""
    env = {k: v for k, v in os.environ.items() if k not in AWS_VARS}
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        PYSPARK_PYTHON=sys.executable,  # Python workers need the venv (pyarrow, connectorx)
        SPARK_LOCAL_IP="127.0.0.1",
        # spark-class also reads SPARK_MASTER_OPTS: no REST submission server on port 6066
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    return env


def _wait(check, proc: subprocess.Popen, log: Path, what: str) -> None:
    deadline = time.monotonic() + CLUSTER_DEADLINE
    while True:
        assert proc.poll() is None, f"{what} exited {proc.returncode}:\n{tail(log)}"
        with suppress(OSError, ValueError):
            if check():
                return
        assert time.monotonic() < deadline, f"{what} not up in {CLUSTER_DEADLINE}s:\n{tail(log)}"
        time.sleep(0.5)


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def _standalone(tmp: Path) -> Iterator[str]:
    """A standalone Master and one Worker (2 cores, 1g) on 127.0.0.1: yields spark://..."""
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    env = _cluster_env()
    master_log, worker_log = tmp / "master.log", tmp / "worker.log"
    (tmp / "work").mkdir()
    with managed_process(
        [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
         "--port", str(port), "--webui-port", str(master_ui)],
        env, master_log, tmp,
    ) as master:
        _wait(lambda: _port_open(port), master, master_log, "standalone master")
        with managed_process(
            [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", url,
             "--host", "127.0.0.1", "--cores", "2", "--memory", "1g",
             "--webui-port", str(worker_ui), "--work-dir", str(tmp / "work")],
            env, worker_log, tmp,
        ) as worker:

            def registered() -> bool:
                with urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=5) as r:
                    return json.load(r).get("aliveworkers", 0) >= 1

            _wait(registered, worker, worker_log, "standalone worker")
            yield url


@contextmanager
def _connect_server(tmp: Path) -> Iterator[str]:
    """A Spark Connect server (local[2] inside) on 127.0.0.1: yields sc://...

    The server, not the client, owns the JVM: the JDBC jar and the UTC settings that
    get_spark applies to a local or standalone session are given here."""
    port = free_port()
    log = tmp / "connect.log"
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.jars": DEFAULT_JDBC_JARS,
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
    }
    args = [str(SPARK_CLASS), "org.apache.spark.deploy.SparkSubmit",
            "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master", "local[2]"]
    for k, v in conf.items():
        args += ["--conf", f"{k}={v}"]
    with managed_process([*args, "spark-internal"], _cluster_env(), log, tmp) as server:
        _wait(lambda: _port_open(port), server, log, "Spark Connect server")
        yield f"sc://127.0.0.1:{port}"


# --- the backups -----------------------------------------------------------------------


def _tables(conn, prefix: str) -> dict[str, str]:
    """One fresh 300-row table per reader (each has its own watermark and data prefix)."""
    tables = {}
    for reader in READERS:
        name = f"{prefix}_{reader}"
        make_ties_table(conn, name, ties(ROWS, DAY, 3))
        tables[reader] = name
    return tables


def _run_backups(tmp: Path, master: str, tables: dict[str, str], mysql_db: str,
                 mysql_url: str, bucket: str) -> str:
    script = tmp / "backup.py"
    script.write_text(BACKUP_SCRIPT)
    log = tmp / "backup.log"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    args = [sys.executable, str(script), mysql_db, mysql_url, bucket, master,
            *(f"{t}:{r}" for r, t in tables.items())]
    with managed_process(args, env, log, tmp) as proc:
        try:
            rc = proc.wait(timeout=BACKUP_DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"backup on {master} not done in {BACKUP_DEADLINE}s:\n{tail(log)}")
    out = tail(log, 200_000)
    assert rc == 0, f"backup on {master} exited {rc}:\n{tail(log)}"
    return out


def _check(conn, s3_resource, s3_client, mysql_db: str, tables: dict[str, str]) -> None:
    store = store_for(s3_resource)
    for reader, table in tables.items():
        cfg = table_cfg(mysql_db, table, chunk_rows=CHUNK_ROWS, parallelism=PARALLELISM,
                        reader=reader)
        rec = store.read(cfg.name)
        assert rec is not None, f"{reader}: no watermark written"
        part = rec.partitions[PARTITION]
        assert part.status == "complete", reader
        keys = manifest_keys(store, cfg.name, PARTITION)
        assert len(keys) == len(set(keys)) == 2 * PARALLELISM, (reader, keys)
        ids = read_manifest_ids(s3_client, s3_resource.bucket, keys)
        assert len(ids) == len(set(ids)), f"{reader}: a primary key twice in the manifest"
        assert sorted(ids) == mysql_ids(conn, table), reader
        assert part.rows == ROWS, reader
        # full rows, not just keys: the executor JVMs read DATETIME(6) and DECIMAL right
        got = read_parquet(s3_client, s3_resource.bucket, keys).to_pylist()
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, update_at, amount, note FROM `{table}`")
            want = {r[0]: r for r in cur.fetchall()}
        for row in got:
            assert (row["id"], row["update_at"], row["amount"], row["note"]) == want[row["id"]]


def test_standalone_cluster_both_readers(
    mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, tmp_path
):
    tables = _tables(mysql_conn, "sm_standalone")
    with _standalone(tmp_path) as master:
        out = _run_backups(tmp_path, master, tables, mysql_db, mysql_url, s3_resource.bucket)
        # the tasks ran in the Worker's executor, not in a local JVM of the driver
        assert "Asked to launch executor" in tail(tmp_path / "worker.log", 200_000)
    assert f"S3RS-SESSION pyspark.sql.session {master}" in out
    _check(mysql_conn, s3_resource, s3_client, mysql_db, tables)
    print(*(line for line in out.splitlines() if line.startswith("S3RS-TIMING")), sep="\n")


def _connect_client_missing() -> list[str]:
    mods = {"grpcio": "grpc", "grpcio-status": "grpc_status",
            "googleapis-common-protos": "google.rpc", "zstandard": "zstandard"}
    missing = []
    for pkg, mod in mods.items():
        try:
            found = importlib.util.find_spec(mod) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(pkg)
    return missing


def test_spark_connect_both_readers(
    mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, tmp_path
):
    missing = _connect_client_missing()
    if missing:
        pytest.skip(
            f"Spark Connect client packages not installed: {', '.join(missing)} "
            "(pyproject.toml needs pyspark[sql,connect]==4.3.0)"
        )
    tables = _tables(mysql_conn, "sm_connect")
    with _connect_server(tmp_path) as remote:
        out = _run_backups(tmp_path, remote, tables, mysql_db, mysql_url, s3_resource.bucket)
    # a thin gRPC client (no JVM of its own); the session's master is the server's
    assert "S3RS-SESSION pyspark.sql.connect.session local[2]" in out
    _check(mysql_conn, s3_resource, s3_client, mysql_db, tables)
    print(*(line for line in out.splitlines() if line.startswith("S3RS-TIMING")), sep="\n")


def test_a_local_session_compiles_with_c1_only_and_other_masters_keep_their_jit() -> None:
    local = spark_defaults("local[2]")["spark.driver.extraJavaOptions"].split()
    assert local == ["-Duser.timezone=UTC", "-XX:TieredStopAtLevel=1"]
    assert spark_defaults("local[2]")["spark.executor.extraJavaOptions"] == "-Duser.timezone=UTC"
    standalone = spark_defaults("spark://h:7077")["spark.driver.extraJavaOptions"]
    assert standalone == "-Duser.timezone=UTC"
    assert "spark.driver.extraJavaOptions" not in spark_defaults("sc://h:15002")
