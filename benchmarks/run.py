"""s3rs benchmark: both stages against the raw command-line floor, in one run.

    make bench [ARGS="--rows 1000000 --json out.json"]
    .venv/bin/python -m benchmarks.run [--rows N] [--chunk-rows N] [--parallelism N]
        [--stages backup,load,e2e] [--reader connectorx|jdbc] [--json FILE]
    .venv/bin/python -m benchmarks.run --memory-check [--memory-rows 200000,1000000]

What it does (see benchmarks/README.md for what each printed line means):

1. seeds `s3rs_bench.t` (demo shape, `demo_data.seed`) with --rows rows, all in the daily
   partition 2025-01-02, or reuses the table when it already holds exactly that seed
   (another row count gets its own table, `t_<rows>`);
2. extract: the floor `mariadb --quick --batch ... > /dev/null` (best of two runs, the
   first also warms the page cache), the naive pymysql + pandas extractor (5000-row
   chunks -> parquet in memory), then s3rs's `s3_parquet` materialized through Dagster
   in this process (a real DagsterInstance in a temporary DAGSTER_HOME, a fresh bucket on
   the S3 endpoint of AWS_ENDPOINT_URL_S3), with the SparkSession started and timed
   before the run;
3. load: s3rs `load_files` (staging COPY + merge + ledger) into an empty PostgreSQL
   database `s3rs_bench`, a plain psycopg COPY of the same parquet files (the baseline),
   and the floor: `mariadb --batch` to a TSV file, then `psql \\copy` of it;
4. end to end: backup + load against mariadb CLI -> TSV -> psql \\copy;
5. memory: RSS of this process tree (driver, Spark JVM, Spark's Python workers) sampled
   every 0.2 s; `--memory-check` runs the backup alone in fresh processes for several
   table sizes and compares the peaks.

The bucket, the PostgreSQL schema and the temporary files are removed at the end; the
MySQL table is kept for the next run. Needs MariaDB/MySQL, PostgreSQL and an S3 endpoint;
without AWS_ENDPOINT_URL_S3 a moto server is started in a child process.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import pymysql  # noqa: E402

from s3rs_assets.config import DatabaseURL  # noqa: E402

SCHEMA = "s3rs_bench"  # MySQL schema, PostgreSQL database and schema
PARTITION = "2025-01-02"
# Every seeded row falls in one daily partition: update_at in [01:00, 22:00] of that day.
SEED_END = datetime(2025, 1, 2, 22, 0, 0)
SEED_SPAN = timedelta(hours=21)
NAIVE_CHUNK = 5000
CSV_BATCH = 65_536
SAMPLE_SECONDS = 0.2
MB = 1024 * 1024
STAGES = ("backup", "load", "e2e")


def say(msg: str) -> None:
    print(msg, flush=True)


def table_name(rows: int) -> str:
    return "t" if rows == 1_000_000 else f"t_{rows}"


# ------------------------------------------------------------------ environment, services


def mysql_base() -> DatabaseURL:
    return DatabaseURL.parse(
        os.environ.get("S3RS_MYSQL_URL") or "mysql://root:@127.0.0.1:3306/",
        env="S3RS_MYSQL_URL",
        schemes=("mysql", "mariadb"),
        default_port=3306,
    )


def pg_base() -> DatabaseURL:
    text = (
        os.environ.get("S3RS_BENCH_PG_URL")
        or os.environ.get("S3RS_REDSHIFT_URL")
        or "postgresql://postgres:@127.0.0.1:5432/postgres"
    )
    url = DatabaseURL.parse(
        text,
        env="S3RS_BENCH_PG_URL / S3RS_REDSHIFT_URL",
        schemes=("postgresql", "postgres", "redshift"),
        default_port=5432,
    )
    if url.scheme == "redshift":
        raise SystemExit(
            "bench: the load benchmark needs PostgreSQL; S3RS_REDSHIFT_URL is a redshift:// URL. "
            "Set S3RS_BENCH_PG_URL=postgresql://user:pw@host:5432/postgres"
        )
    return url


def url_text(u: DatabaseURL, scheme: str, database: str) -> str:
    auth = f"{quote(u.user, safe='')}:{quote(u.password, safe='')}"
    return f"{scheme}://{auth}@{u.host}:{u.port}/{quote(database, safe='')}"


def mysql_connect(u: DatabaseURL, database: str | None = None, **kw: Any):
    return pymysql.connect(
        host=u.host,
        port=u.port,
        user=u.user,
        password=u.password,
        database=database,
        charset="utf8mb4",
        autocommit=True,
        **kw,
    )


def pg_connect(u: DatabaseURL, database: str, autocommit: bool = True):
    import psycopg

    return psycopg.connect(
        host=u.host,
        port=u.port,
        user=u.user,
        password=u.password or None,
        dbname=database,
        autocommit=autocommit,
        connect_timeout=10,
    )


def pg_admin(u: DatabaseURL):
    """A connection to the maintenance database `postgres` (else the URL's own)."""
    try:
        return pg_connect(u, "postgres")
    except Exception:
        if not u.database or u.database == "postgres":
            raise
        return pg_connect(u, u.database)


def mysql_cli() -> str:
    for name in ("mariadb", "mysql"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("bench: neither `mariadb` nor `mysql` is on PATH (run `make setup`)")


def cli_env(mysql: DatabaseURL | None = None, pg: DatabaseURL | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if mysql is not None and mysql.password:
        env["MYSQL_PWD"] = mysql.password  # never on a command line
    if pg is not None and pg.password:
        env["PGPASSWORD"] = pg.password
    return env


def mysql_cli_args(u: DatabaseURL, sql: str) -> list[str]:
    return [
        mysql_cli(),
        "--quick",
        "--batch",
        "--skip-column-names",
        "--default-character-set=utf8mb4",
        f"--host={u.host}",
        f"--port={u.port}",
        f"--user={u.user}",
        "-e",
        sql,
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnMoto:
    """A moto ThreadedMotoServer in a child process (so its in-memory objects do not count
    in this process's RSS); it exits when its stdin closes."""

    CODE = (
        "import sys\n"
        "from moto.server import ThreadedMotoServer\n"
        "s = ThreadedMotoServer(ip_address='127.0.0.1', port=int(sys.argv[1]), verbose=False)\n"
        "s.start()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
        "s.stop()\n"
    )

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def start(self) -> str:
        port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.CODE, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if line.strip() != "ready":
            raise SystemExit("bench: could not start a moto server (is moto[server] installed?)")
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None


def s3_client():
    import boto3

    return boto3.client("s3")


def delete_bucket(bucket: str) -> int:
    client = s3_client()
    n = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys[i : i + 1000]})
            n += len(keys[i : i + 1000])
    client.delete_bucket(Bucket=bucket)
    return n


# ------------------------------------------------------------------------ memory sampling


def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (ppid, comm, rss bytes) for every process we can read."""
    page = os.sysconf("SC_PAGE_SIZE")
    out: dict[int, tuple[int, str, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        lp, rp = stat.find("("), stat.rfind(")")
        comm = stat[lp + 1 : rp]
        fields = stat[rp + 2 :].split()
        # fields[0] is state, [1] ppid, ... [21] rss (pages)
        try:
            out[int(entry)] = (int(fields[1]), comm, int(fields[21]) * page)
        except (IndexError, ValueError):
            continue
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class MemSampler(threading.Thread):
    """Sums the RSS of this process's tree every 0.2 s, split into the driver (this
    process), the Spark JVM (java) and Spark's Python workers (pyspark.daemon and its
    forks); keeps high-water marks per phase."""

    def __init__(self, exclude: set[int] | None = None):
        super().__init__(daemon=True, name="bench-mem")
        self.root = os.getpid()
        self.exclude = exclude or set()
        self.phase: str | None = None
        self.peaks: dict[str, dict[str, float]] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self._kinds: dict[tuple[int, str], str] = {}

    def _kind(self, pid: int, comm: str) -> str:
        if pid == self.root:
            return "driver"
        # keyed on (pid, comm): spark-submit's shell script execs into java under its pid
        if (pid, comm) not in self._kinds:
            cmd = _cmdline(pid)
            exe = cmd.split(" ", 1)[0]
            if comm == "java" or exe.endswith("/java") or exe == "java":
                kind = "jvm"
            elif comm.startswith("python") and "pyspark" in cmd:
                kind = "workers"  # pyspark.daemon and the workers it forks
            else:
                kind = "other"
            self._kinds[(pid, comm)] = kind
        return self._kinds[(pid, comm)]

    def sample(self) -> dict[str, float]:
        table = _proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _c, _r) in table.items():
            children.setdefault(ppid, []).append(pid)
        sums = {"driver": 0.0, "jvm": 0.0, "workers": 0.0, "other": 0.0}
        stack = [self.root]
        while stack:
            pid = stack.pop()
            if pid in self.exclude or pid not in table:
                continue
            _ppid, comm, rss = table[pid]
            sums[self._kind(pid, comm)] += rss
            stack.extend(children.get(pid, ()))
        sums["total"] = sum(sums.values())
        return sums

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                s = self.sample()
            except Exception:  # a process vanished mid-walk: try again next tick
                s = None
            with self.lock:
                if s is not None and self.phase is not None:
                    peak = self.peaks.setdefault(self.phase, {})
                    for k, v in s.items():
                        peak[k] = max(peak.get(k, 0.0), v)
            self.stop_event.wait(SAMPLE_SECONDS)

    @contextmanager
    def measure(self, phase: str) -> Iterator[None]:
        with self.lock:
            self.phase = phase
            self.peaks[phase] = {}
        try:
            yield
        finally:
            # one last sample so a short phase still has a reading
            try:
                s = self.sample()
                with self.lock:
                    peak = self.peaks.setdefault(phase, {})
                    for k, v in s.items():
                        peak[k] = max(peak.get(k, 0.0), v)
            except Exception:
                pass
            with self.lock:
                self.phase = None

    def peak_mb(self, phase: str, kind: str = "total") -> float | None:
        v = self.peaks.get(phase, {}).get(kind)
        return None if v is None else v / MB


# ---------------------------------------------------------------------------- the table


def ensure_table(u: DatabaseURL, table: str, rows: int) -> dict[str, Any]:
    """Seed `s3rs_bench.<table>` unless it already holds exactly this seed."""
    from s3rs_assets.demo_data import create_table, seed

    with mysql_connect(u) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{SCHEMA}` CHARACTER SET utf8mb4")
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables "
            "WHERE table_schema = %s AND table_name = %s",
            (SCHEMA, table),
        )
        if cur.fetchone()[0]:
            cur.execute(
                f"SELECT COUNT(*), MIN(update_at), MAX(update_at), MIN(id), MAX(id) "
                f"FROM `{SCHEMA}`.`{table}`"
            )
            count, lo, hi, first, last = cur.fetchone()
            if (count, lo, hi, first, last) == (rows, SEED_END - SEED_SPAN, SEED_END, 1, rows):
                return {"seeded": False, "seconds": 0.0}
            say(f"    {SCHEMA}.{table} holds {count} rows, not this seed: re-seeding")
        t0 = time.perf_counter()
        create_table(conn, SCHEMA, table, drop=True)
        seed(conn, SCHEMA, table, rows, end=SEED_END, span=SEED_SPAN)
        cur.execute(f"ANALYZE TABLE `{SCHEMA}`.`{table}`")
        cur.fetchall()
        return {"seeded": True, "seconds": time.perf_counter() - t0}


def source_columns(u: DatabaseURL, table: str):
    from s3rs_assets.config import TableConfig
    from s3rs_assets.source import describe

    cfg = TableConfig.from_dict({"name": f"{SCHEMA}.{table}", "start": "2025-01-01"})
    with mysql_connect(u, SCHEMA) as conn:
        return describe(conn, cfg)


# -------------------------------------------------------------------------------- extract


def extract_floor(u: DatabaseURL, table: str, repeat: int) -> dict[str, Any]:
    """`mariadb --quick --batch -e 'SELECT * ...' > /dev/null`; best of `repeat` runs."""
    args = mysql_cli_args(u, f"SELECT * FROM `{SCHEMA}`.`{table}`")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(args, stdout=subprocess.DEVNULL, env=cli_env(mysql=u), check=True)
        times.append(time.perf_counter() - t0)
    return {"seconds": min(times), "runs": times}


def naive_extract(u: DatabaseURL, table: str) -> dict[str, Any]:
    """The old hand-made way: pymysql streaming cursor, 5000-row fetchmany -> DataFrame ->
    parquet (pyarrow) into memory."""
    import pandas as pd

    t0 = time.perf_counter()
    rows = nbytes = 0
    coerced: set[str] = set()
    with mysql_connect(u, SCHEMA, cursorclass=pymysql.cursors.SSCursor) as conn:
        cur = conn.cursor()
        cur.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cur.description]
        while True:
            batch = cur.fetchmany(NAIVE_CHUNK)
            if not batch:
                break
            df = pd.DataFrame.from_records(batch, columns=names)
            for c in coerced:
                df[c] = df[c].astype("string")
            buf = io.BytesIO()
            while True:
                try:
                    df.to_parquet(buf, index=False, engine="pyarrow", compression="snappy")
                    break
                except Exception as e:  # e.g. BIGINT UNSIGNED beyond int64 in an object column
                    bad = _unwritable_column(df, e)
                    if bad is None or bad in coerced:
                        raise
                    coerced.add(bad)
                    df[bad] = df[bad].astype("string")
                    buf = io.BytesIO()
            rows += len(df)
            nbytes += buf.tell()
        cur.close()
    return {
        "seconds": time.perf_counter() - t0,
        "rows": rows,
        "parquet_bytes": nbytes,
        "columns_written_as_text": sorted(coerced),
    }


def _unwritable_column(df, err: Exception) -> str | None:
    m = re.search(r"column (\S+?)[ ,]", str(err)) or re.search(r"'(\w+)'", str(err))
    if m and m.group(1).strip("'\"") in df.columns:
        return m.group(1).strip("'\"")
    import pyarrow as pa

    for c in df.columns:  # find it the slow way
        try:
            pa.array(df[c])
        except Exception:
            return c
    return None


# ------------------------------------------------------------------ backup (s3rs, Dagster)

CHUNK_RE = re.compile(
    r"chunk (\d+) (\d+) rows in ([\d.]+)s \(plan ([\d.]+)s, checkpoint ([\d.]+)s so far\)"
)


def _meta_value(v: Any) -> Any:
    for attr in ("value", "data", "text"):
        if hasattr(v, attr):
            return getattr(v, attr)
    return v


def table_config(table: str, args: argparse.Namespace):
    from s3rs_assets.config import TableConfig

    return TableConfig.from_dict(
        {
            "name": f"{SCHEMA}.{table}",
            "start": "2025-01-01",
            "primary_key": ["id"],
            "chunk_rows": args.chunk_rows,
            "parallelism": args.parallelism,
            "reader": args.reader,
        }
    )


def run_backup(
    mysql: DatabaseURL,
    table: str,
    bucket: str,
    args: argparse.Namespace,
    mem: MemSampler,
    pg_url: str | None = None,
) -> dict[str, Any]:
    import dagster as dg

    from s3rs_assets.assets import build_table_assets
    from s3rs_assets.io_manager import S3RSIOManager, store_for
    from s3rs_assets.names import asset_key
    from s3rs_assets.resources import (
        DEFAULT_JDBC_JARS,
        MySQLResource,
        S3Resource,
        SparkResource,
        spark_defaults,
    )

    cfg = table_config(table, args)
    spark = SparkResource(
        spark_config=spark_defaults(
            os.environ.get("S3RS_SPARK_MASTER") or "local[2]",
            os.environ.get("S3RS_SPARK_JARS") or DEFAULT_JDBC_JARS,
        )
    )
    with mem.measure("spark_start"):
        t0 = time.perf_counter()
        session = spark.session()
        spark_start = time.perf_counter() - t0
    say(f"    SparkSession ({spark.master}) started in {spark_start:.1f} s")

    s3 = S3Resource(bucket=bucket, prefix="s3rs")
    res = {
        "mysql": MySQLResource(url=url_text(mysql, "mysql", SCHEMA)),
        "s3": s3,
        "spark": spark,
        "s3rs_io_manager": S3RSIOManager(s3=s3),
    }
    assets = build_table_assets(cfg)
    if any(
        "warehouse" in getattr(a, "required_resource_keys", ()) for a in assets
    ):  # the factory also builds redshift_table: Dagster wants its resource present
        from s3rs_assets.warehouse import WarehouseResource

        res["warehouse"] = WarehouseResource(url=pg_url or "postgresql://unused@127.0.0.1/unused")
    key = asset_key(cfg, "s3_parquet")
    instance = dg.DagsterInstance.get()
    run_config = {"loggers": {"console": {"config": {"log_level": args.dagster_log_level}}}}
    with mem.measure("backup"):
        t0 = time.perf_counter()
        result = dg.materialize(
            assets,
            selection=[key],
            resources=res,
            partition_key=PARTITION,
            instance=instance,
            run_config=run_config,
        )
        wall = time.perf_counter() - t0
    if not result.success:
        raise SystemExit("bench: the s3_parquet run failed")

    event = instance.get_latest_materialization_event(key)
    meta = {k: _meta_value(v) for k, v in event.asset_materialization.metadata.items()}
    chunks = []
    prev_ts = None
    for entry in instance.all_logs(result.run_id):
        msg = entry.user_message or ""
        if prev_ts is None and "STEP_START" in str(getattr(entry, "dagster_event_type", "")):
            prev_ts = entry.timestamp
        m = CHUNK_RE.search(msg)
        if not m:
            continue
        n, rows, read, plan_cum, ckpt_cum = m.groups()
        chunks.append(
            {
                "chunk": int(n),
                "rows": int(rows),
                "read_write_s": float(read),
                "plan_cum_s": float(plan_cum),
                "checkpoint_cum_s": float(ckpt_cum),
                "cycle_s": (entry.timestamp - prev_ts) if prev_ts is not None else None,
            }
        )
        prev_ts = entry.timestamp
    for i, c in enumerate(chunks):
        before = chunks[i - 1] if i else {"plan_cum_s": 0.0, "checkpoint_cum_s": 0.0}
        c["plan_s"] = round(c["plan_cum_s"] - before["plan_cum_s"], 3)
        c["checkpoint_s"] = round(c["checkpoint_cum_s"] - before["checkpoint_cum_s"], 3)

    record = store_for(s3).read(cfg.name)
    files = list(record.partitions[PARTITION].files) if record else []
    rows = int(meta.get("rows", 0))
    rest = [c["read_write_s"] for c in chunks[1:]]
    warmup = max(0.0, chunks[0]["read_write_s"] - statistics.median(rest)) if rest else 0.0
    out = {
        "spark_start_s": spark_start,
        "run_wall_s": wall,
        "asset_s": float(meta.get("seconds", 0.0)),
        "asset_spark_startup_s": float(meta.get("spark_startup_seconds", 0.0)),
        "rows": rows,
        "files": len(files),
        "bytes": int(meta.get("bytes", 0)),
        "chunks": chunks,
        "plan_s": chunks[-1]["plan_cum_s"] if chunks else 0.0,
        "checkpoint_s": chunks[-1]["checkpoint_cum_s"] if chunks else 0.0,
        "read_write_s": sum(c["read_write_s"] for c in chunks),
        "first_chunk_warmup_s": warmup,
        "partitions": meta.get("partitions"),
        "status": meta.get("status"),
        "run_id": result.run_id,
    }
    return {"result": out, "files": files, "cfg": cfg, "s3": s3, "session": session}


# -------------------------------------------------------------------------------- load


def load_module_ready() -> str | None:
    """None when s3rs_assets.load has what this benchmark calls, else why not."""
    try:
        from s3rs_assets import load, warehouse
    except Exception as e:  # not written yet, or broken while someone works on it
        return f"s3rs_assets.load / warehouse not importable ({type(e).__name__}: {e})"
    missing = [n for n in ("load_files", "LoadTarget") if not hasattr(load, n)]
    if not hasattr(warehouse, "WarehouseResource"):
        missing.append("warehouse.WarehouseResource")
    return f"missing {', '.join(missing)}" if missing else None


def ensure_pg(pg: DatabaseURL) -> None:
    """Database `s3rs_bench` exists and schema `s3rs_bench` in it is empty."""
    with pg_admin(pg) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (SCHEMA,)).fetchone():
            conn.execute(f'CREATE DATABASE "{SCHEMA}"')
    with pg_connect(pg, SCHEMA) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{SCHEMA}"')


def pg_checkpoint(pg: DatabaseURL) -> bool:
    """CHECKPOINT before a timed load, so no load pays for the previous one's dirty pages
    and WAL (best effort: needs superuser or pg_checkpoint)."""
    try:
        with pg_connect(pg, SCHEMA) as conn:
            conn.execute("CHECKPOINT")
        return True
    except Exception:
        return False


def drop_pg(pg: DatabaseURL) -> None:
    with pg_connect(pg, SCHEMA) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')


def pg_count(pg: DatabaseURL, table: str) -> int:
    with pg_connect(pg, SCHEMA) as conn:
        return int(conn.execute(f'SELECT COUNT(*) FROM "{SCHEMA}"."{table}"').fetchone()[0])


def plain_table_sql(name: str, columns) -> str:
    """A plain PostgreSQL table (no key, no index) with s3rs's column types."""
    from s3rs_assets.types import column_type

    cols = ", ".join(f'"{c.name}" {column_type(c).postgres}' for c in columns)
    return f'CREATE TABLE "{SCHEMA}"."{name}" ({cols})'


@contextmanager
def profiled(enabled: bool) -> Iterator[dict[str, Any]]:
    """With `enabled`: time every warehouse statement (WarehouseConnection.execute / query /
    copy_from_stdin) and cProfile the Python side; results land in the yielded dict."""
    out: dict[str, Any] = {}
    if not enabled:
        yield out
        return
    import cProfile
    import pstats

    from s3rs_assets.warehouse import WarehouseConnection

    stmts: list[tuple[str, float]] = []
    saved = {n: getattr(WarehouseConnection, n) for n in ("execute", "query", "copy_from_stdin")}

    def wrap(name: str, fn: Any) -> Any:
        def timed(self: Any, sql: str, *a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(self, sql, *a, **kw)
            finally:
                stmts.append(
                    (f"{name}: " + " ".join(str(sql).split())[:90], time.perf_counter() - t0)
                )

        return timed

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


def run_load(
    pg: DatabaseURL, mysql: DatabaseURL, table: str, backup: dict, profile: bool = False
) -> dict[str, Any]:
    from s3rs_assets.load import LoadTarget, load_files
    from s3rs_assets.warehouse import WarehouseResource

    src = source_columns(mysql, table)
    cfg = backup["cfg"]
    target = LoadTarget.from_table_config(cfg, src.columns, src.primary_key)
    wh = WarehouseResource(url=url_text(pg, "postgresql", SCHEMA))
    with profiled(profile) as prof:
        t0 = time.perf_counter()
        res = load_files(wh, backup["s3"], target, PARTITION, list(backup["files"]))
        wall = time.perf_counter() - t0
    count = pg_count(pg, target.table)
    out: dict[str, Any] = {"seconds": wall, "rows_in_target": count}
    for k in ("rows_staged", "rows_inserted", "rows_deleted", "copy_seconds", "merge_seconds"):
        if hasattr(res, k):
            out[k] = getattr(res, k)
    out["files_loaded"] = len(getattr(res, "files_loaded", []) or [])
    if prof:
        out["profile"] = prof
    return out


def baseline_copy(pg: DatabaseURL, mysql: DatabaseURL, table: str, backup: dict) -> dict:
    """psycopg COPY of the same parquet objects into a plain table: S3 GET -> Arrow ->
    CSV buffers -> COPY FROM STDIN, one file after the other, one transaction."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    src = source_columns(mysql, table)
    s3 = backup["s3"]
    name = "t_copy_baseline"
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


def dump_tsv(mysql: DatabaseURL, table: str, path: Path) -> dict[str, Any]:
    """mariadb --quick --batch -> TSV file. The CLI escapes tab, newline, backslash and NUL
    but writes carriage returns raw, which PostgreSQL's text COPY rejects: `sed` turns them
    into `\\r` in the same pipeline (the table's remark column holds CR LF)."""
    cli = mysql_cli_args(mysql, f"SELECT * FROM `{SCHEMA}`.`{table}`")
    t0 = time.perf_counter()
    with open(path, "wb") as out:
        p1 = subprocess.Popen(cli, stdout=subprocess.PIPE, env=cli_env(mysql=mysql))
        p2 = subprocess.Popen(["sed", "-e", r"s/\r/\\r/g"], stdin=p1.stdout, stdout=out)
        assert p1.stdout is not None
        p1.stdout.close()
        rc2, rc1 = p2.wait(), p1.wait()
    if rc1 or rc2:
        raise SystemExit(f"bench: mariadb | sed dump failed ({rc1}, {rc2})")
    return {"seconds": time.perf_counter() - t0, "bytes": path.stat().st_size}


def psql_copy(pg: DatabaseURL, mysql: DatabaseURL, table: str, path: Path) -> dict[str, Any]:
    """psql \\copy of the TSV into a plain table (text format, NULL printed as NULL)."""
    psql = shutil.which("psql")
    if psql is None:
        raise SystemExit("bench: `psql` is not on PATH (run `make setup`)")
    src = source_columns(mysql, table)
    name = "t_psql_floor"
    with pg_connect(pg, SCHEMA) as conn:
        conn.execute(plain_table_sql(name, src.columns))
    copy = f"\\copy \"{SCHEMA}\".\"{name}\" FROM '{path}' WITH (FORMAT text, NULL 'NULL')"
    args = [
        psql,
        "-X",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        pg.host,
        "-p",
        str(pg.port),
        "-U",
        pg.user,
        "-d",
        SCHEMA,
        "-c",
        copy,
    ]
    t0 = time.perf_counter()
    subprocess.run(args, env=cli_env(pg=pg), check=True)
    wall = time.perf_counter() - t0
    return {"seconds": wall, "rows_in_target": pg_count(pg, name)}


# ------------------------------------------------------------------------------ report


def machine_info(mysql: DatabaseURL, pg: DatabaseURL | None) -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "loadavg_start": os.getloadavg(),
    }
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_mb"] = int(f.readline().split()[1]) // 1024
    except OSError:
        pass
    with mysql_connect(mysql) as conn, conn.cursor() as cur:
        cur.execute("SELECT VERSION(), @@innodb_buffer_pool_size")
        v, bp = cur.fetchone()
        info["mysql_version"] = v
        info["innodb_buffer_pool_mb"] = int(bp) // MB
    if pg is not None:
        try:
            with pg_admin(pg) as conn:
                info["postgres_version"] = conn.execute("SHOW server_version").fetchone()[0]
        except Exception as e:
            info["postgres_version"] = f"unreachable ({type(e).__name__})"
    try:
        import pyspark

        info["pyspark"] = pyspark.__version__
    except Exception:
        pass
    return info


def fmt_num(v: float | None, spec: str = ",.0f") -> str:
    return "-" if v is None else format(v, spec)


def print_table(lines: list[dict[str, Any]]) -> str:
    head = ("stage", "tool", "rows", "seconds", "rows/s", "x floor", "peak RSS MB")
    rows = [
        (
            ln["stage"],
            ln["tool"],
            fmt_num(ln.get("rows")),
            fmt_num(ln.get("seconds"), ".1f"),
            fmt_num(ln.get("rows_per_s")),
            fmt_num(ln.get("x_floor"), ".2f"),
            fmt_num(ln.get("peak_mb")),
        )
        for ln in lines
    ]
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)
    ]
    right = {2, 3, 4, 5, 6}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    out = [line(head), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]
    return "\n".join(out)


def add_line(
    lines: list,
    stage: str,
    tool: str,
    rows: int,
    seconds: float,
    floor_rps: float | None,
    peak_mb: float | None = None,
    key: str = "",
) -> dict:
    rps = rows / seconds if seconds > 0 else None
    ln = {
        "key": key,
        "stage": stage,
        "tool": tool,
        "rows": rows,
        "seconds": seconds,
        "rows_per_s": rps,
        "x_floor": (rps / floor_rps) if (rps and floor_rps) else None,
        "peak_mb": peak_mb,
    }
    lines.append(ln)
    return ln


# -------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Time s3rs's backup and load stages against the command-line floor.",
    )
    ap.add_argument("--rows", type=int, default=1_000_000, help="table size (default 1000000)")
    ap.add_argument("--chunk-rows", type=int, default=100_000, help="s3rs chunk_rows")
    ap.add_argument("--parallelism", type=int, default=2, help="s3rs parallelism (sub-ranges)")
    ap.add_argument(
        "--reader",
        choices=("connectorx", "jdbc"),
        default="connectorx",
        help="s3rs reader inside the Spark tasks (default connectorx)",
    )
    ap.add_argument(
        "--stages",
        default="backup,load,e2e",
        help="comma-separated subset of backup,load,e2e (load and e2e need the "
        "backup's files, so the backup always runs)",
    )
    ap.add_argument("--no-naive", action="store_true", help="skip the pymysql + pandas run")
    ap.add_argument("--no-floor", action="store_true", help="skip the mariadb CLI extract floor")
    ap.add_argument(
        "--floor-repeat",
        type=int,
        default=2,
        help="runs of the extract floor; the best counts (default 2)",
    )
    ap.add_argument("--json", type=Path, help="write all measurements to this file")
    ap.add_argument(
        "--keep-pg",
        action="store_true",
        help="keep the PostgreSQL tables of this run (schema s3rs_bench)",
    )
    ap.add_argument(
        "--dagster-log-level",
        default="WARNING",
        help="console log level of the Dagster run (default WARNING)",
    )
    ap.add_argument(
        "--profile-load",
        action="store_true",
        help="time each warehouse statement of the s3rs load and cProfile it "
        "(slows the load a little; printed and in --json)",
    )
    ap.add_argument(
        "--memory-check",
        action="store_true",
        help="run the backup alone, in a fresh process per table size, and compare peak RSS",
    )
    ap.add_argument(
        "--memory-rows",
        default="200000,1000000",
        help="table sizes for --memory-check (default 200000,1000000)",
    )
    args = ap.parse_args(argv)
    stages = {s.strip() for s in args.stages.split(",") if s.strip()}
    unknown = stages - set(STAGES)
    if unknown or not stages:
        ap.error(f"--stages takes a subset of {','.join(STAGES)}, got {args.stages!r}")
    args.stage_set = stages
    if args.rows < 1 or args.chunk_rows < 1 or args.parallelism < 1:
        ap.error("--rows, --chunk-rows and --parallelism must be positive")
    return args


@contextmanager
def s3_endpoint() -> Iterator[dict[str, Any]]:
    """AWS_ENDPOINT_URL_S3 from the environment, or a moto server of our own."""
    info: dict[str, Any] = {}
    moto = None
    if not os.environ.get("AWS_ENDPOINT_URL_S3"):
        moto = OwnMoto()
        os.environ["AWS_ENDPOINT_URL_S3"] = moto.start()
        for k, v in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing")):
            os.environ.setdefault(k, v)
        info["moto"] = "started by the benchmark (child process)"
        info["moto_pid"] = moto.proc.pid if moto.proc else None
    else:
        info["moto"] = "from AWS_ENDPOINT_URL_S3"
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    info["endpoint"] = os.environ["AWS_ENDPOINT_URL_S3"]
    try:
        yield info
    finally:
        if moto is not None:
            moto.stop()


@contextmanager
def dagster_home() -> Iterator[str]:
    """A temporary DAGSTER_HOME holding the repo's dagster.yaml."""
    saved = os.environ.get("DAGSTER_HOME")
    home = tempfile.mkdtemp(prefix="s3rs-bench-dagster-")
    if (REPO / "dagster.yaml").exists():
        shutil.copy(REPO / "dagster.yaml", Path(home) / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = home
    try:
        yield home
    finally:
        if saved is None:
            os.environ.pop("DAGSTER_HOME", None)
        else:
            os.environ["DAGSTER_HOME"] = saved
        shutil.rmtree(home, ignore_errors=True)


def bench(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    t_all = time.perf_counter()
    mysql = mysql_base()
    want_load = bool(args.stage_set & {"load", "e2e"})
    pg = pg_base() if want_load else None
    table = table_name(args.rows)
    report: dict[str, Any] = {
        "config": {
            "rows": args.rows,
            "table": f"{SCHEMA}.{table}",
            "partition": PARTITION,
            "chunk_rows": args.chunk_rows,
            "parallelism": args.parallelism,
            "reader": args.reader,
            "spark_master": os.environ.get("S3RS_SPARK_MASTER") or "local[2]",
            "stages": sorted(args.stage_set),
        },
        "machine": machine_info(mysql, pg),
        "notes": [],
    }
    lines: list[dict[str, Any]] = []
    report["lines"] = lines
    notes: list[str] = report["notes"]

    say(f"==> table {SCHEMA}.{table} ({args.rows:,} rows)")
    seeded = ensure_table(mysql, table, args.rows)
    report["seed"] = seeded
    say("    seeded in {:.1f} s".format(seeded["seconds"]) if seeded["seeded"] else "    reused")

    with s3_endpoint() as s3info, dagster_home():
        report["s3"] = s3info
        exclude = {s3info["moto_pid"]} if s3info.get("moto_pid") else set()
        mem = MemSampler(exclude=exclude)
        mem.start()
        bucket = f"s3rs-bench-{uuid.uuid4().hex[:10]}"
        s3_client().create_bucket(Bucket=bucket)
        backup = None
        try:
            floor_rps = None
            if not args.no_floor:
                say("==> extract floor: mariadb --quick --batch > /dev/null")
                fl = extract_floor(mysql, table, max(1, args.floor_repeat))
                report["extract_floor"] = fl
                floor_rps = args.rows / fl["seconds"]
                add_line(
                    lines,
                    "extract",
                    "mariadb --quick --batch > /dev/null (floor)",
                    args.rows,
                    fl["seconds"],
                    floor_rps,
                    key="extract_floor",
                )
                say(
                    f"    {fl['seconds']:.1f} s (runs: {', '.join(f'{t:.1f}' for t in fl['runs'])})"
                )
            if not args.no_naive:
                say("==> naive: pymysql + pandas, 5000-row chunks -> parquet")
                with mem.measure("naive"):
                    nv = naive_extract(mysql, table)
                report["naive"] = nv
                add_line(
                    lines,
                    "extract",
                    "pymysql + pandas, 5000-row chunks -> parquet",
                    nv["rows"],
                    nv["seconds"],
                    floor_rps,
                    mem.peak_mb("naive", "driver"),
                    key="naive",
                )
                if nv["columns_written_as_text"]:
                    notes.append(
                        "naive: columns pyarrow could not take from pandas objects, "
                        f"written as text: {', '.join(nv['columns_written_as_text'])}"
                    )
                say(f"    {nv['seconds']:.1f} s")

            say(
                f"==> backup: s3rs s3_parquet via Dagster ({args.reader}, chunk_rows "
                f"{args.chunk_rows:,}, parallelism {args.parallelism})"
            )
            backup = run_backup(
                mysql,
                table,
                bucket,
                args,
                mem,
                pg_url=url_text(pg, "postgresql", SCHEMA) if pg else None,
            )
            b = backup["result"]
            report["backup"] = b
            report["memory"] = {
                k: {kk: round(vv / MB, 1) for kk, vv in v.items()} for k, v in mem.peaks.items()
            }
            if b["rows"] != args.rows:
                notes.append(f"backup wrote {b['rows']} rows, the table has {args.rows}")
            peak = mem.peak_mb("backup")
            add_line(
                lines,
                "backup",
                "s3rs s3_parquet (Dagster run, Spark already up)",
                b["rows"],
                b["run_wall_s"],
                floor_rps,
                peak,
                key="backup",
            )
            add_line(
                lines,
                "backup",
                "  same, minus first-chunk warm-up",
                b["rows"],
                b["run_wall_s"] - b["first_chunk_warmup_s"],
                floor_rps,
                peak,
                key="backup_steady",
            )
            add_line(
                lines,
                "backup",
                "  same, plus SparkSession start-up",
                b["rows"],
                b["run_wall_s"] + b["spark_start_s"],
                floor_rps,
                peak,
                key="backup_with_startup",
            )
            say(
                f"    {b['rows']:,} rows in {b['run_wall_s']:.1f} s "
                f"(+ {b['spark_start_s']:.1f} s Spark start-up)"
            )

            if want_load:
                why = load_module_ready()
                if why is not None:
                    notes.append(f"load stage skipped: {why}")
                    say(f"==> load: skipped ({why})")
                else:
                    assert pg is not None
                    ensure_pg(pg)
                    tmpdir = Path(tempfile.mkdtemp(prefix="s3rs-bench-tsv-"))
                    try:
                        say("==> load floor: mariadb --batch | sed > TSV, psql \\copy")
                        dump = dump_tsv(mysql, table, tmpdir / f"{table}.tsv")
                        checkpointed = pg_checkpoint(pg)
                        pcopy = psql_copy(pg, mysql, table, tmpdir / f"{table}.tsv")
                    finally:
                        shutil.rmtree(tmpdir, ignore_errors=True)
                    report["load_floor"] = {"dump": dump, "psql_copy": pcopy}
                    if not checkpointed:
                        notes.append(
                            "could not CHECKPOINT PostgreSQL before the loads "
                            "(not superuser): load timings may include each "
                            "other's checkpoints"
                        )
                    if pcopy["rows_in_target"] != args.rows:
                        notes.append(f"psql \\copy loaded {pcopy['rows_in_target']} rows")
                    say(
                        f"    dump {dump['seconds']:.1f} s ({dump['bytes'] / MB:,.0f} MB), "
                        f"\\copy {pcopy['seconds']:.1f} s"
                    )
                    say("==> load baseline: psycopg COPY of the parquet files (Arrow -> CSV)")
                    pg_checkpoint(pg)
                    with mem.measure("baseline"):
                        base = baseline_copy(pg, mysql, table, backup)
                    report["load_baseline"] = base
                    say(f"    {base['seconds']:.1f} s")
                    say("==> load: s3rs load_files (COPY + merge + ledger) into an empty target")
                    pg_checkpoint(pg)
                    with mem.measure("load"):
                        ld = run_load(pg, mysql, table, backup, profile=args.profile_load)
                    report["load"] = ld
                    say(f"    {ld['seconds']:.1f} s")
                    for what, got in (("baseline", base), ("s3rs load", ld)):
                        if got["rows_in_target"] != b["rows"]:
                            notes.append(
                                f"{what}: {got['rows_in_target']} rows in PostgreSQL, "
                                f"the backup wrote {b['rows']}"
                            )

                    lfloor = args.rows / pcopy["seconds"]
                    if "load" in args.stage_set:
                        add_line(
                            lines,
                            "load",
                            "psql \\copy of the TSV (floor)",
                            args.rows,
                            pcopy["seconds"],
                            lfloor,
                            key="load_floor",
                        )
                        add_line(
                            lines,
                            "load",
                            "psycopg COPY, parquet -> Arrow -> CSV (baseline)",
                            b["rows"],
                            base["seconds"],
                            lfloor,
                            mem.peak_mb("baseline", "driver"),
                            key="load_baseline",
                        )
                        add_line(
                            lines,
                            "load",
                            "s3rs load_files: COPY + merge + ledger",
                            b["rows"],
                            ld["seconds"],
                            lfloor,
                            mem.peak_mb("load", "driver"),
                            key="load",
                        )
                    if "e2e" in args.stage_set:
                        e_floor_s = dump["seconds"] + pcopy["seconds"]
                        efloor = args.rows / e_floor_s
                        add_line(
                            lines,
                            "e2e",
                            "mariadb --batch > TSV, psql \\copy (floor)",
                            args.rows,
                            e_floor_s,
                            efloor,
                            key="e2e_floor",
                        )
                        add_line(
                            lines,
                            "e2e",
                            "s3rs backup + load (Spark already up)",
                            b["rows"],
                            b["run_wall_s"] + ld["seconds"],
                            efloor,
                            key="e2e",
                        )
                        add_line(
                            lines,
                            "e2e",
                            "  same, plus SparkSession start-up",
                            b["rows"],
                            b["run_wall_s"] + ld["seconds"] + b["spark_start_s"],
                            efloor,
                            key="e2e_with_startup",
                        )
        finally:
            mem.stop_event.set()
            if backup is not None:
                with suppress(Exception):
                    backup["session"].stop()
            try:
                n = delete_bucket(bucket)
                report["s3"]["cleanup"] = f"deleted {n} objects and bucket {bucket}"
            except Exception as e:
                report["s3"]["cleanup"] = f"could not delete bucket {bucket}: {e}"
            if pg is not None and not args.keep_pg:
                with suppress(Exception):
                    drop_pg(pg)
        report["memory"] = {
            k: {kk: round(vv / MB, 1) for kk, vv in v.items()} for k, v in mem.peaks.items()
        }
    report["machine"]["loadavg_end"] = os.getloadavg()
    report["total_seconds"] = time.perf_counter() - t_all
    return report


def ratios(report: dict[str, Any]) -> list[str]:
    by = {ln["key"]: ln for ln in report["lines"]}
    out = []
    if "load" in by and "load_baseline" in by:
        r = by["load"]["rows_per_s"] / by["load_baseline"]["rows_per_s"]
        out.append(
            f"load vs psycopg COPY baseline: {r:.2f}x (target >= 0.6: "
            f"{'met' if r >= 0.6 else 'NOT met'})"
        )
        report["load_vs_baseline"] = r
    if "e2e" in by:
        r = by["e2e"]["x_floor"]
        out.append(
            f"end to end vs floor, Spark up: {r:.2f}x; with start-up: "
            f"{by['e2e_with_startup']['x_floor']:.2f}x (target >= 0.5: "
            f"{'met' if r >= 0.5 else 'NOT met'})"
        )
        report["e2e_vs_floor"] = r
    return out


def print_report(report: dict[str, Any]) -> None:
    m, c = report["machine"], report["config"]
    say("")
    say(
        f"s3rs benchmark, {m['date']}: {m['nproc']} cores, {m.get('mem_total_mb', '?')} MB RAM, "
        f"{m['mysql_version']} (buffer pool {m['innodb_buffer_pool_mb']} MB), PostgreSQL "
        f"{m.get('postgres_version', '-')}, pyspark {m.get('pyspark', '?')}, Spark "
        f"{c['spark_master']}"
    )
    la0, la1 = m["loadavg_start"], m.get("loadavg_end", (0, 0, 0))
    say(
        f"table {c['table']}: {c['rows']:,} rows, partition {c['partition']}; reader "
        f"{c['reader']}, chunk_rows {c['chunk_rows']:,}, parallelism {c['parallelism']}; "
        f"load average {la0[0]:.2f} at start, {la1[0]:.2f} at end"
    )
    say("")
    say(print_table(report["lines"]))
    say("")
    for ln in ratios(report):
        say(ln)
    b = report.get("backup")
    if b:
        chunks = b["chunks"]
        say(
            f"backup: Spark start-up {b['spark_start_s']:.1f} s (before the run; the asset "
            f"saw {b['asset_spark_startup_s']:.2f} s); Dagster run {b['run_wall_s']:.1f} s = asset "
            f"{b['asset_s']:.1f} s + Dagster/IO manager {b['run_wall_s'] - b['asset_s']:.1f} s; "
            f"in the asset: plan {b['plan_s']:.1f} s, Spark read+write {b['read_write_s']:.1f} s, "
            f"checkpoint {b['checkpoint_s']:.1f} s over {len(chunks)} chunks, "
            f"{b['files']} files, {b['bytes'] / MB:.0f} MB parquet"
        )
        if chunks:
            rest = [ch["read_write_s"] for ch in chunks[1:]]
            say(
                f"        first chunk {chunks[0]['read_write_s']:.1f} s vs median "
                f"{statistics.median(rest) if rest else 0:.1f} s of the others "
                f"(warm-up ~{b['first_chunk_warmup_s']:.1f} s); per chunk read+write: "
                + " ".join(f"{ch['read_write_s']:.1f}" for ch in chunks)
            )
            say(
                "        per chunk plan: "
                + " ".join(f"{ch['plan_s']:.2f}" for ch in chunks)
                + "; checkpoint: "
                + " ".join(f"{ch['checkpoint_s']:.2f}" for ch in chunks)
            )
    ld = report.get("load")
    if ld and "copy_seconds" in ld:
        say(
            f"load: {ld['seconds']:.1f} s = COPY to staging {ld['copy_seconds']:.1f} s + merge "
            f"{ld['merge_seconds']:.1f} s + ledger/DDL/commit "
            f"{ld['seconds'] - ld['copy_seconds'] - ld['merge_seconds']:.1f} s"
        )
    prof = (ld or {}).get("profile")
    if prof:
        say("load statements >= 0.05 s:")
        for sql, t in prof["statements"]:
            say(f"  {t:7.2f} s  {sql}")
        say(prof["cprofile_top"])
    lf = report.get("load_floor")
    if lf:
        say(
            f"floor: mariadb | sed > TSV {lf['dump']['seconds']:.1f} s "
            f"({lf['dump']['bytes'] / MB:,.0f} MB), psql \\copy {lf['psql_copy']['seconds']:.1f} s"
        )
    mem = report.get("memory", {})
    for phase, label in (
        ("spark_start", "Spark start"),
        ("backup", "backup run"),
        ("naive", "naive extract"),
        ("baseline", "COPY baseline"),
        ("load", "s3rs load"),
    ):
        p = mem.get(phase)
        if p:
            say(
                f"peak RSS, {label}: total {p.get('total', 0):,.0f} MB (driver "
                f"{p.get('driver', 0):,.0f}, JVM {p.get('jvm', 0):,.0f}, Python workers "
                f"{p.get('workers', 0):,.0f}; each its own high-water mark)"
            )
    for n in report["notes"]:
        say(f"note: {n}")
    say(f"whole benchmark: {report['total_seconds']:.0f} s")


def memory_check(args: argparse.Namespace) -> dict[str, Any]:
    """The backup alone in a fresh process per table size: peaks should not grow with it."""
    sizes = [int(s) for s in args.memory_rows.split(",") if s.strip()]
    results = []
    with s3_endpoint():
        for n in sizes:
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
                path = Path(tf.name)
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.run",
                "--rows",
                str(n),
                "--chunk-rows",
                str(args.chunk_rows),
                "--parallelism",
                str(args.parallelism),
                "--reader",
                args.reader,
                "--stages",
                "backup",
                "--no-naive",
                "--no-floor",
                "--json",
                str(path),
            ]
            say(f"==> memory check: {n:,} rows (fresh process)")
            subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
            rep = json.loads(path.read_text())
            path.unlink()
            peaks = rep["memory"].get("backup", {})
            results.append(
                {
                    "rows": n,
                    "peaks_mb": peaks,
                    "spark_start_peaks_mb": rep["memory"].get("spark_start", {}),
                    "seconds": rep["backup"]["run_wall_s"],
                }
            )
    say("")
    say(
        f"peak RSS during the backup run (chunk_rows {args.chunk_rows:,}, parallelism "
        f"{args.parallelism}, reader {args.reader}):"
    )
    say("(MB; 'at start' = after SparkSession start-up and worker warm-up, before the run)")
    say(
        f"{'rows':>10}  {'total':>6}  {'driver':>6}  {'JVM':>6}  {'workers':>7}  "
        f"{'total at start':>14}  {'JVM at start':>12}  {'workers at start':>16}  {'run s':>6}"
    )
    for r in results:
        p, s = r["peaks_mb"], r["spark_start_peaks_mb"]
        say(
            f"{r['rows']:>10,}  {p.get('total', 0):>6,.0f}  {p.get('driver', 0):>6,.0f}  "
            f"{p.get('jvm', 0):>6,.0f}  {p.get('workers', 0):>7,.0f}  "
            f"{s.get('total', 0):>14,.0f}  {s.get('jvm', 0):>12,.0f}  "
            f"{s.get('workers', 0):>16,.0f}  {r['seconds']:>6.1f}"
        )
    return {"memory_check": results}


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")
    args = parse_args(argv)
    if args.memory_check:
        report = memory_check(args)
    else:
        report = bench(args)
        print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))
        say(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
