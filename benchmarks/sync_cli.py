"""`s3rs sync` as a user runs it: a fresh process (and so a fresh Spark), timed from outside.

A `SyncEnv` writes a tables.yaml for the tables under test and the environment the CLI
reads (S3RS_TABLES, S3RS_S3_BUCKET/PREFIX, S3RS_MYSQL_URL, S3RS_REDSHIFT_URL and the
current DAGSTER_HOME). After a sync, the Dagster runs it launched are read back from the
same instance: each run's wall time, per table, and the Spark start-up the backup asset
recorded in its metadata (`spark_startup_seconds`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from benchmarks.harness import say
from benchmarks.services import SCHEMA, s3_client, url_text
from s3rs_assets.config import DatabaseURL
from s3rs_assets.layout import Layout
from s3rs_assets.names import TABLE_TAG


@dataclass
class SyncOutput:
    returncode: int | None  # None: killed at the timeout
    output: str


@dataclass
class SyncResult:
    """One `s3rs sync` process: its wall time and the Dagster runs it made, per table."""

    seconds: float
    output: str
    timed_out: bool = False
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def table_seconds(self, table: str) -> float:
        return sum(r["seconds"] for r in self.runs.get(table, []))

    @property
    def spark_startup(self) -> float:
        return max((r.get("spark_startup_s", 0.0) for rs in self.runs.values() for r in rs),
                   default=0.0)

    @property
    def runs_seconds(self) -> float:
        return sum(self.table_seconds(t) for t in self.runs)


@dataclass
class SyncEnv:
    mysql: DatabaseURL
    pg: DatabaseURL
    bucket: str
    prefix: str
    tables: list[dict[str, Any]]
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="s3rs-bench-")))

    def __post_init__(self) -> None:
        (self.workdir / "tables.yaml").write_text(yaml.safe_dump({"tables": self.tables}))

    def environ(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            S3RS_TABLES=str(self.workdir / "tables.yaml"),
            S3RS_S3_BUCKET=self.bucket,
            S3RS_S3_PREFIX=self.prefix,
            S3RS_MYSQL_URL=url_text(self.mysql, "mysql", SCHEMA),
            S3RS_REDSHIFT_URL=url_text(self.pg, "postgresql", SCHEMA),
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            S3RS_LOG_LEVEL="WARNING",
        )
        # a fresh process unless a suite asks for an `s3rs server` (suite small's _served)
        env.setdefault("S3RS_SERVER", "off")
        return env

    def cli(self, *args: str, check: bool = True, timeout: float | None = None) -> SyncOutput:
        """`python -m s3rs_assets.cli ARGS` with this environment (output captured). Past
        `timeout` seconds the whole process group (the CLI and its Spark JVM) is killed."""
        cmd = [sys.executable, "-m", "s3rs_assets.cli", *args]
        proc = subprocess.Popen(cmd, env=self.environ(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=self.workdir,
                                start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return SyncOutput(None, out or "")
        if check and proc.returncode != 0:
            raise SystemExit(f"bench: `s3rs {' '.join(args)}` exited {proc.returncode}:\n"
                             f"{out[-3000:]}")
        return SyncOutput(proc.returncode, out)

    def sync(self, names: list[str], *extra: str, timeout: float | None = None) -> SyncResult:
        """`s3rs sync -t ...` in a fresh process; the runs it launched, read back."""
        since = datetime.now(UTC)
        targs = [a for n in names for a in ("-t", n)]
        t0 = time.perf_counter()
        proc = self.cli("sync", "--no-progress", *targs, *extra, timeout=timeout)
        wall = time.perf_counter() - t0
        result = SyncResult(wall, proc.output, timed_out=proc.returncode is None)
        result.runs = runs_since(since, names)
        what = " ".join(names) if len(names) < 4 else f"({len(names)} tables)"
        say(f"    s3rs sync {what}: {wall:.1f} s, {sum(map(len, result.runs.values()))} run(s)"
            + (" -- KILLED at the timeout" if result.timed_out else ""))
        return result

    def record_bytes(self, name: str) -> int:
        """Size of the table's primary watermark object in S3."""
        key = Layout(self.prefix).watermark_primary(name)
        return int(s3_client().head_object(Bucket=self.bucket, Key=key)["ContentLength"])


def runs_since(since: datetime, names: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Per table: the Dagster runs created after `since` (wall seconds, status, Spark)."""
    instance = dg.DagsterInstance.get()
    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        records = instance.get_run_records(
            filters=dg.RunsFilter(tags={TABLE_TAG: name}, created_after=since)
        )
        out[name] = [run_figures(instance, r) for r in records]
    return out


def run_figures(instance: dg.DagsterInstance, record: Any) -> dict[str, Any]:
    start, end = record.start_time or 0.0, record.end_time or 0.0
    out: dict[str, Any] = {
        "run_id": record.dagster_run.run_id,
        "status": record.dagster_run.status.value,
        "seconds": max(0.0, end - start),
    }
    for entry in instance.all_logs(record.dagster_run.run_id):
        event = entry.dagster_event
        if event is None or event.event_type_value != "ASSET_MATERIALIZATION":
            continue
        from s3rs_assets.names import metadata_facts

        meta = metadata_facts(event.event_specific_data.materialization.metadata)
        if "spark_startup_seconds" in meta:
            out["spark_startup_s"] = float(meta["spark_startup_seconds"])
            out["asset_s"] = float(meta["seconds"]) if "seconds" in meta else None
    return out
