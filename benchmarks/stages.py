"""s3rs's two stages run in this process with Spark already up, each timed on its own.

* `start_spark`: the SparkSession and its warm-up job (timed; Python workers started);
* `run_backup`: `dagster.materialize` of a table's `s3_parquet` for one partition, with a
  real DagsterInstance, the repo's resources and IO manager, a real S3 (moto) endpoint;
  per-chunk figures are read back from the run's log lines;
* `run_load`: `s3rs_assets.load.load_files` (direct COPY into a never-loaded partition,
  else staging COPY + merge; ledger) of the files the backup wrote;
* `baseline_copy`: the straightforward loader of the same parquet files (S3 GET -> Arrow
  -> CSV -> psycopg COPY FROM STDIN into a plain table), the yardstick for `run_load`.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import re
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from benchmarks.harness import say
from benchmarks.memory import MemSampler
from benchmarks.services import (
    SCHEMA,
    pg_connect,
    pg_count,
    plain_table_sql,
    source_columns,
    url_text,
)
from s3rs_assets.assets import build_table_assets
from s3rs_assets.config import DatabaseURL, TableConfig
from s3rs_assets.io_manager import S3RSIOManager, store_for
from s3rs_assets.load import LoadTarget, load_files
from s3rs_assets.names import asset_key, metadata_facts
from s3rs_assets.resources import (
    DEFAULT_JDBC_JARS,
    WARM_UP_GROUP,
    MySQLResource,
    S3Resource,
    SparkResource,
    spark_defaults,
)
from s3rs_assets.warehouse import WarehouseConnection, WarehouseResource

CSV_BATCH = 65_536
#: BackupRun's checkpoint line; the rows are the partition's so far, and since 4f7f367 the
#: parentheses may end with how many sub-ranges were read by primary key
CHUNK_RE = re.compile(
    r"chunk (\d+) (\d+) rows in ([\d.]+)s \(plan ([\d.]+)s, checkpoint ([\d.]+)s so far"
    r"(?:, [^)]*)?\)"
)


def spark_master() -> str:
    return os.environ.get("S3RS_SPARK_MASTER") or "local[2]"


def spark_resource() -> SparkResource:
    return SparkResource(
        spark_config=spark_defaults(
            spark_master(), os.environ.get("S3RS_SPARK_JARS") or DEFAULT_JDBC_JARS
        )
    )


def wait_warm_up() -> float:
    """Wait for the warm-up job `SparkResource` starts in the background with a new session
    (`spark_session.warm_up`: Python workers started and imported into, the JVM's first job);
    the seconds waited."""
    t0 = time.perf_counter()
    for thread in threading.enumerate():
        if thread.name == WARM_UP_GROUP:
            thread.join()
    return time.perf_counter() - t0


def start_spark(mem: MemSampler | None = None) -> tuple[SparkResource, Any, float]:
    """(resource, session, seconds): the session start-up and its warm-up, timed on their
    own. The warm-up runs in the background of a new session (a fresh `s3rs sync` plans
    meanwhile); not waiting for it here put its ~3 s of JVM compiling and worker imports
    into the first chunk of the "Spark up" backup."""
    spark = spark_resource()
    with mem.measure("spark_start") if mem else nullcontext():
        t0 = time.perf_counter()
        session = spark.session()
        started = time.perf_counter() - t0
        warm = wait_warm_up()
        seconds = time.perf_counter() - t0
    say(f"    SparkSession ({spark.master}) started in {started:.1f} s, its warm-up job "
        f"done {warm:.1f} s later")
    return spark, session, seconds


def stop_spark(spark: SparkResource, session: Any) -> None:
    """Stop a session this process started; never a shared Spark Connect session (later
    runs attached to the same server would find it closed)."""
    if not spark.master.startswith("sc://"):
        session.stop()


@dataclass
class StageEnv:
    """Where the in-process stages read and write."""

    mysql: DatabaseURL
    pg: DatabaseURL | None
    bucket: str
    spark: SparkResource
    prefix: str = "s3rs"
    log_level: str = "WARNING"

    @property
    def s3(self) -> S3Resource:
        return S3Resource(bucket=self.bucket, prefix=self.prefix)

    def resources(self) -> dict[str, Any]:
        s3 = self.s3
        pg_url = url_text(self.pg, "postgresql", SCHEMA) if self.pg else None
        return {
            "mysql": MySQLResource(url=url_text(self.mysql, "mysql", SCHEMA)),
            "s3": s3,
            "spark": self.spark,
            "s3rs_io_manager": S3RSIOManager(s3=s3),
            # the factory also builds redshift_table: Dagster wants its resource present
            "warehouse": WarehouseResource(url=pg_url or "postgresql://unused@127.0.0.1/unused"),
        }


def chunk_figures(instance: dg.DagsterInstance, run_id: str) -> list[dict[str, Any]]:
    """Per-chunk read+write, planning and checkpoint seconds, from the asset's log lines."""
    chunks = []
    for entry in instance.all_logs(run_id):
        # one entry may hold several checkpoints' lines (BackupRun._note)
        for m in CHUNK_RE.finditer(entry.user_message or ""):
            n, rows, read, plan_cum, ckpt_cum = m.groups()
            chunks.append({"chunk": int(n), "rows": int(rows), "read_write_s": float(read),
                           "plan_cum_s": float(plan_cum),
                           "checkpoint_cum_s": float(ckpt_cum)})
    for i, c in enumerate(chunks):
        before = chunks[i - 1] if i else {"plan_cum_s": 0.0, "checkpoint_cum_s": 0.0}
        c["plan_s"] = round(c["plan_cum_s"] - before["plan_cum_s"], 3)
        c["checkpoint_s"] = round(c["checkpoint_cum_s"] - before["checkpoint_cum_s"], 3)
    return chunks


def materialize(env: StageEnv, cfg: TableConfig, stage: str, partition: str) -> tuple[Any, float]:
    """(result, wall seconds) of one asset ("s3_parquet" or "redshift_table") in process."""
    key = asset_key(cfg, stage)
    run_config = {"loggers": {"console": {"config": {"log_level": env.log_level}}}}
    t0 = time.perf_counter()
    result = dg.materialize(
        build_table_assets(cfg),
        selection=[key],
        resources=env.resources(),
        partition_key=partition,
        instance=dg.DagsterInstance.get(),
        run_config=run_config,
    )
    wall = time.perf_counter() - t0
    if not result.success:
        raise SystemExit(f"bench: the {stage} run of {cfg.name} failed")
    return result, wall


def run_backup(env: StageEnv, cfg: TableConfig, partition: str,
               mem: MemSampler | None = None) -> dict[str, Any]:
    """The backup of one partition through Dagster; its figures and the files it wrote."""
    with mem.measure("backup") if mem else nullcontext():
        result, wall = materialize(env, cfg, "s3_parquet", partition)
    instance = dg.DagsterInstance.get()
    event = instance.get_latest_materialization_event(asset_key(cfg, "s3_parquet"))
    meta = metadata_facts(event.asset_materialization.metadata)  # raw figures, not "1.8 s"
    chunks = chunk_figures(instance, result.run_id)
    record = store_for(env.s3).read(cfg.name)
    files = list(record.partitions[partition].files) if record else []
    rest = [c["read_write_s"] for c in chunks[1:]]
    warmup = max(0.0, chunks[0]["read_write_s"] - statistics.median(rest)) if rest else 0.0
    out = {
        "run_wall_s": wall,
        "asset_s": float(meta.get("seconds", 0.0)),
        "asset_spark_startup_s": float(meta.get("spark_startup_seconds", 0.0)),
        "rows": int(meta.get("rows", 0)),
        "files": len(files),
        "bytes": int(meta.get("bytes", 0)),
        "chunks": chunks,
        "plan_s": chunks[-1]["plan_cum_s"] if chunks else 0.0,
        "checkpoint_s": chunks[-1]["checkpoint_cum_s"] if chunks else 0.0,
        "read_write_s": sum(c["read_write_s"] for c in chunks),
        "first_chunk_warmup_s": warmup,
        "status": meta.get("status"),
        "run_id": result.run_id,
    }
    return {"result": out, "files": files, "cfg": cfg, "s3": env.s3}


@contextmanager
def profiled(enabled: bool) -> Iterator[dict[str, Any]]:
    """With `enabled`: time every warehouse statement (WarehouseConnection.execute / query /
    copy_from_stdin) and cProfile the Python side; results land in the yielded dict."""
    out: dict[str, Any] = {}
    if not enabled:
        yield out
        return
    stmts: list[tuple[str, float]] = []
    saved = {n: getattr(WarehouseConnection, n) for n in ("execute", "query", "copy_from_stdin")}

    def wrap(name: str, fn: Any) -> Any:
        def timed_call(self: Any, sql: str, *a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(self, sql, *a, **kw)
            finally:
                text = f"{name}: " + " ".join(str(sql).split())[:90]
                stmts.append((text, time.perf_counter() - t0))

        return timed_call

    for n, fn in saved.items():
        setattr(WarehouseConnection, n, wrap(n, fn))
    prof = cProfile.Profile()
    prof.enable()
    try:
        yield out
    finally:
        prof.disable()
        for n, fn in saved.items():
            setattr(WarehouseConnection, n, fn)
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
        out["statements"] = [(sql, round(t, 3)) for sql, t in stmts if t >= 0.05]
        out["cprofile_top"] = buf.getvalue()


def run_load(env: StageEnv, backup: dict, partition: str, profile: bool = False) -> dict[str, Any]:
    """s3rs `load_files` of the backup's files into the table's (empty) target."""
    assert env.pg is not None
    cfg: TableConfig = backup["cfg"]
    src = source_columns(env.mysql, cfg.table)
    target = LoadTarget.from_table_config(cfg, src.columns, src.primary_key)
    wh = WarehouseResource(url=url_text(env.pg, "postgresql", SCHEMA))
    with profiled(profile) as prof:
        t0 = time.perf_counter()
        res = load_files(wh, backup["s3"], target, partition, list(backup["files"]))
        wall = time.perf_counter() - t0
    out: dict[str, Any] = {
        "seconds": wall,
        "rows_in_target": pg_count(env.pg, target.table, target.schema),
    }
    for k in ("rows_staged", "rows_inserted", "rows_deleted", "copy_seconds", "merge_seconds",
              "direct"):
        if hasattr(res, k):
            out[k] = getattr(res, k)
    out["files_loaded"] = len(getattr(res, "files_loaded", []) or [])
    if prof:
        out["profile"] = prof
    return out


def baseline_copy(pg: DatabaseURL, mysql: DatabaseURL, backup: dict) -> dict[str, Any]:
    """psycopg COPY of the same parquet objects into a plain table: S3 GET -> Arrow ->
    CSV buffers -> COPY FROM STDIN, one file after the other, one transaction."""
    cfg: TableConfig = backup["cfg"]
    src = source_columns(mysql, cfg.table)
    s3 = backup["s3"]
    name = f"{cfg.table}_copy_baseline"
    with pg_connect(pg, SCHEMA) as conn:
        conn.execute(plain_table_sql(name, src.columns))
    client = s3.client()
    opts = pacsv.WriteOptions(include_header=False, quoting_style="needed")
    cols = ", ".join(f'"{c.name}"' for c in src.columns)
    sql = f'COPY "{SCHEMA}"."{name}" ({cols}) FROM STDIN (FORMAT csv)'
    t0 = time.perf_counter()
    with pg_connect(pg, SCHEMA, autocommit=False) as conn:
        with conn.cursor() as cur, cur.copy(sql) as copy:
            for f in backup["files"]:
                body = client.get_object(Bucket=s3.bucket, Key=f.key)["Body"].read()
                tbl = pq.read_table(pa.BufferReader(body))
                for batch in tbl.select([c.name for c in src.columns]).to_batches(CSV_BATCH):
                    buf = io.BytesIO()
                    pacsv.write_csv(batch, buf, opts)
                    copy.write(buf.getbuffer())
        conn.commit()
    wall = time.perf_counter() - t0
    return {"seconds": wall, "rows_in_target": pg_count(pg, name)}
