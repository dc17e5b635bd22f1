"""Spark start-up (issue 19): what a Python worker imports for the backup's tasks, and the
warm-up job that runs in the background while the driver plans the first chunk."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from s3rs_assets import spark_daemon, spark_session, spark_tasks

#: modules a warm worker holds (measured 915: pyspark's worker, pyarrow, connectorx,
#: botocore, spark_tasks); with the warm-up pickled from resources.py it was 2,264
WORKER_MODULES_MAX = 1_100
#: what a worker must never import: the Dagster layer, boto3/s3transfer, the MySQL planning
HEAVY = ("dagster", "boto3", "s3transfer", "pymysql", "pydantic", "s3rs_assets.resources",
         "s3rs_assets.backup", "s3rs_assets.connections")


def test_worker_imports_only_the_task_module(spark: Any) -> None:
    thread = spark_session.warm_up(spark, background=True)
    assert thread is not None
    thread.join(timeout=300)
    assert not thread.is_alive()
    cfg = {"endpoint_url": "http://127.0.0.1:1", "region_name": "us-east-1",
           "max_attempts": 3, "aws_access_key_id": "k", "aws_secret_access_key": "s",
           "aws_session_token": None}
    heavy = HEAVY

    def probe(batches: Any) -> Any:  # nested: pickled by value, imports nothing itself
        import sys

        import pyarrow as pa

        from s3rs_assets.spark_tasks import s3_client

        for _ in batches:
            pass
        same = s3_client(cfg) is s3_client(dict(cfg))  # one client per worker and config
        loaded = [m for m in heavy if m in sys.modules]
        yield pa.RecordBatch.from_pydict(
            {"modules": [len(sys.modules)], "same": [same], "heavy": [",".join(loaded)]}
        )

    rows = spark.range(0, 1, numPartitions=1).mapInArrow(
        probe, "modules long, same boolean, heavy string"
    ).collect()
    assert rows[0].heavy == ""
    assert rows[0].same
    assert rows[0].modules <= WORKER_MODULES_MAX, rows[0].modules


def test_workers_fork_from_the_preloaded_daemon(spark: Any) -> None:
    """A local session's Python workers are forked from `s3rs_assets.spark_daemon`, which
    imported what a task imports before forking (spark_tasks.preload)."""

    def probe(batches: Any) -> Any:  # nested: pickled by value, imports nothing itself
        import os

        import pyarrow as pa

        for _ in batches:
            pass
        import sys

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        files = [getattr(m, "__file__", None) or "" for n, m in list(sys.modules.items())
                 if n == "pyspark" or n.startswith("pyspark.")]
        zipped = [f for f in files if ".zip" in f]
        yield pa.RecordBatch.from_pydict({"parent": [parent], "pyspark": [len(files)],
                                          "zipped": [len(zipped)]})

    rows = spark.range(0, 2, numPartitions=2).mapInArrow(
        probe, "parent string, pyspark long, zipped long").collect()
    assert all("-m s3rs_assets.spark_daemon" in r.parent for r in rows), rows
    # PySpark from its installed package (bytecode), not from the pyspark.zip on the path
    assert all(r.pyspark > 50 and r.zipped == 0 for r in rows), rows


def _daemon_path_probe(path: list[str]) -> list[str]:
    """In a fresh interpreter whose sys.path starts with `path`: what installed_pyspark
    returns and where pyspark then comes from."""
    code = (
        "import sys; sys.path[:0] = sys.argv[1:]; from s3rs_assets import spark_daemon; "
        "print(spark_daemon.installed_pyspark()); import pyspark; print(pyspark.__file__)"
    )
    return subprocess.run([sys.executable, "-c", code, *path], capture_output=True,
                          text=True, check=True).stdout.split()


def test_the_daemon_imports_pyspark_from_the_package_that_holds_the_zip(
    tmp_path: Path,
) -> None:
    import pyspark

    package = Path(pyspark.__file__).parent
    zipped = package / "python" / "lib" / spark_daemon.ZIP
    assert zipped.is_file()  # pip's pyspark ships the zip Spark puts on the workers' path
    used, module = _daemon_path_probe([str(zipped)])
    assert used == str(package)
    assert module == str(package / "__init__.py")
    # without the package: Python imports from the zip as it would (zipimport)
    dist = tmp_path / "spark" / "python" / "lib"
    dist.mkdir(parents=True)
    shutil.copy(zipped, dist / spark_daemon.ZIP)
    used, module = _daemon_path_probe([str(dist / spark_daemon.ZIP)])
    assert used == "None"
    assert module == str(dist / spark_daemon.ZIP / "pyspark" / "__init__.py")


def test_preload_loads_what_a_task_imports_and_nothing_heavy() -> None:
    code = (
        "import sys; from s3rs_assets import spark_daemon; spark_daemon.preload(); "
        "import threading; print(threading.active_count(), *sorted(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    threads, modules = int(out[0]), set(out[1:])
    assert threads == 1  # nothing a fork would lose
    assert {"connectorx", "pandas", "pyarrow.parquet", "s3rs_assets.spark_tasks"} <= modules
    assert not [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_task_client_is_botocore_with_standard_retries() -> None:
    cfg = {"endpoint_url": "http://127.0.0.1:1", "region_name": "eu-west-1",
           "max_attempts": 4, "aws_access_key_id": "k2", "aws_secret_access_key": "s2",
           "aws_session_token": None}
    client = spark_tasks.s3_client(cfg)
    assert client is spark_tasks.s3_client(dict(cfg))
    assert type(client).__module__.startswith("botocore")
    assert client.meta.endpoint_url == "http://127.0.0.1:1"
    assert client.meta.region_name == "eu-west-1"
    # botocore counts the first try: max_attempts=4 retries means 5 attempts in all
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 5}
    creds = client._request_signer._credentials
    assert (creds.access_key, creds.secret_key) == ("k2", "s2")
    other = spark_tasks.s3_client({**cfg, "aws_secret_access_key": "rotated"})
    assert other is not client


def test_background_warm_up_failure_is_logged_not_raised(
    spark: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def fail(session: Any, cores: int) -> None:
        raise RuntimeError("no workers today")

    monkeypatch.setattr(spark_session, "_warm_job", fail)
    with caplog.at_level(logging.WARNING, logger="s3rs.spark"):
        thread = spark_session.warm_up(spark, background=True)
        assert thread is not None
        thread.join(timeout=60)
    assert "Spark warm-up failed" in caplog.text and "no workers today" in caplog.text
    with pytest.raises(RuntimeError):  # the synchronous form (`s3rs spark serve`) raises
        spark_session.warm_up(spark)
