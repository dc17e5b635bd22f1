"""`make demo`: seed a demo table, sync it MySQL -> S3 -> PostgreSQL through Dagster, report.

Run with the venv's python after `source scripts/env.sh` and `scripts/moto.sh start`:

    .venv/bin/python scripts/demo.py [--rows N] [--reseed] [--no-sync] [-v]

1. creates the S3 bucket, the PostgreSQL database and the MySQL schema when missing;
2. seeds `s3rs_demo.settlement_normal_delivery_detail` (100,000 rows over the last
   3 days) when the table is missing or --reseed is given; otherwise keeps it, so a
   second `make demo` is an incremental sync with nothing new to copy;
3. writes the table list $S3RS_TABLES (.local/demo/tables.yaml) and the settings file
   $S3RS_STATE_DIR/s3rs.env (.local/s3rs.env), which `s3rs` reads in any new shell;
4. asks what there is to do (`work.prepare`: MySQL below the safety bound, the
   warehouse's load ledger, S3) and runs the sync job with `dagster job execute` only
   for the partitions with work: with nothing new, no run starts and Spark never starts;
5. prints the watermark (`s3rs watermark get`) and the parquet files in S3.

Quiet by default: Dagster's console logger at INFO (no DEBUG event lines), its known
beta/superseded warnings filtered, Spark's log4j lines at ERROR. `-v` shows all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import boto3  # noqa: E402
import pymysql  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402

from s3rs_assets.config import DatabaseURL  # noqa: E402
from s3rs_assets.demo_data import DEMO_SCHEMA, DEMO_TABLE, create_table, seed  # noqa: E402

QUALIFIED = f"{DEMO_SCHEMA}.{DEMO_TABLE}"
JOB = f"{DEMO_SCHEMA}__{DEMO_TABLE}__sync"
BIN = Path(sys.executable).parent  # .venv/bin: dagster and s3rs live beside this python
REQUIRED_ENV = (
    "S3RS_MYSQL_URL",
    "S3RS_S3_BUCKET",
    "S3RS_REDSHIFT_URL",
    "S3RS_TABLES",
    "DAGSTER_HOME",
)


def step(msg: str) -> None:
    print(f"\n==> {msg}", flush=True)


def fail(msg: str) -> None:
    print(f"demo: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def mysql_connect(url: DatabaseURL) -> pymysql.connections.Connection:
    return pymysql.connect(
        host=url.host,
        port=url.port,
        user=url.user,
        password=url.password,
        charset="utf8mb4",
        autocommit=True,
        connect_timeout=10,
    )


def ensure_bucket(bucket: str) -> None:
    s3 = boto3.client("s3")
    try:
        s3.head_bucket(Bucket=bucket)
        print(f"ok: bucket s3://{bucket} exists")
        return
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
    region = s3.meta.region_name
    kwargs = (
        {}
        if region in (None, "us-east-1")
        else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    )
    s3.create_bucket(Bucket=bucket, **kwargs)
    print(f"created: bucket s3://{bucket}")


def ensure_pg_database(url_text: str) -> None:
    url = DatabaseURL.parse(
        url_text,
        env="S3RS_REDSHIFT_URL",
        schemes=("postgresql", "postgres", "redshift"),
        default_port=5432,
    )
    if url.scheme == "redshift":
        print(f"skip: {url.redacted()} is Redshift; the database must already exist")
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        host=url.host,
        port=url.port,
        user=url.user,
        password=url.password or None,
        dbname="postgres",
        autocommit=True,
        connect_timeout=10,
    ) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (url.database,)
        ).fetchone()
        if exists:
            print(f"ok: PostgreSQL database {url.database} exists")
        else:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(url.database)))
            print(f"created: PostgreSQL database {url.database}")


def table_exists(conn) -> bool:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables"
            " WHERE table_schema = %s AND table_name = %s",
            (DEMO_SCHEMA, DEMO_TABLE),
        )
        return cur.fetchone()[0] > 0


def seed_table(conn, rows: int, reseed: bool) -> tuple[datetime, datetime]:
    """Returns the first and the last update_at in the table."""
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{DEMO_SCHEMA}` CHARACTER SET utf8mb4")
        cur.execute("SELECT NOW(6)")
        server_now = cur.fetchone()[0]
    fresh = reseed or not table_exists(conn)
    if fresh:
        # The newest row sits at least 15 minutes in the past on both clocks (UTC and the
        # server's), well beyond the default 5-minute lag of the safety bound.
        utc_now = datetime.now(UTC).replace(tzinfo=None)
        end = min(utc_now, server_now) - timedelta(minutes=15)
        create_table(conn, DEMO_SCHEMA, DEMO_TABLE, drop=True)
        started = time.perf_counter()
        info = seed(conn, DEMO_SCHEMA, DEMO_TABLE, rows, end=end, span=timedelta(days=3))
        print(
            f"seeded: {info.rows:,} rows into {QUALIFIED} in "
            f"{time.perf_counter() - started:.1f} s ({info.distinct_update_at:,} distinct "
            f"update_at values, {info.min_update_at} .. {info.max_update_at})"
        )
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT COUNT(*), MIN(update_at), MAX(update_at) FROM `{DEMO_SCHEMA}`.`{DEMO_TABLE}`"
        )
        count, lo, hi = cur.fetchone()
    if not count:
        fail(f"{QUALIFIED} is empty; run `make demo` with DEMO_ARGS=--reseed")
    if not fresh:
        print(f"ok: {QUALIFIED} holds {count:,} rows ({lo} .. {hi}); --reseed recreates it")
    return lo, hi


def write_tables_yaml(path: Path, first_day: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        "# Written by scripts/demo.py for the local demo; see tables.yaml at the repo root.\n"
        "tables:\n"
        f"  - name: {QUALIFIED}\n"
        "    cursor: update_at\n"
        "    primary_key: [id]\n"
        f"    start: {first_day}\n"
        "    partition: daily\n"
        "    chunk_rows: 50000\n"
        "    lag: 5m\n"
    )
    if path.exists() and path.read_text() == text:
        print(f"ok: {path} up to date")
    else:
        path.write_text(text)
        print(f"wrote: {path}")


def prepare_sync(bucket: str, prefix: str) -> Any:
    """What the sync has to do, decided as `s3rs sync` decides it (`work.prepare`): empty
    stretches are closed without a run; the plans cover only partitions with work."""
    from s3rs_assets.config import find_table, load_tables
    from s3rs_assets.io_manager import store_for
    from s3rs_assets.resources import MySQLResource, S3Resource
    from s3rs_assets.warehouse import WarehouseResource
    from s3rs_assets.work import prepare

    table = find_table(load_tables(), QUALIFIED)
    s3 = S3Resource(bucket=bucket, prefix=prefix)
    mysql = MySQLResource(url=os.environ["S3RS_MYSQL_URL"])
    warehouse = WarehouseResource(url=os.environ["S3RS_REDSHIFT_URL"])
    try:
        return prepare(table, mysql, warehouse, s3, store_for(s3), ("backup", "load"))
    finally:
        mysql.teardown_after_execution(None)


def run_sync(first_day: str, last_day: str, verbose: bool) -> None:
    tags = json.dumps(
        {
            "dagster/asset_partition_range_start": first_day,
            "dagster/asset_partition_range_end": last_day,
            # the UI's job page and timeline find runs of the code location by this tag
            ".dagster/repository": "__repository__@s3rs",
        }
    )
    # Dagster's console logger at INFO: the run's own messages (chunks, partitions), not
    # its DEBUG event lines (-v shows them). Run config as a file: `job execute` has no
    # JSON option for it.
    config = settings_file().parent / "demo" / "run_config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    level = "DEBUG" if verbose else "INFO"
    config.write_text(f"loggers:\n  console:\n    config:\n      log_level: {level}\n")
    cmd = [
        str(BIN / "dagster"),
        "job",
        "execute",
        "-m",
        "s3rs_assets.definitions",
        "-j",
        JOB,
        "-c",
        str(config),
        "--tags",
        tags,
    ]
    print("$ " + " ".join(cmd[:-1]) + f" '{tags}'", flush=True)
    started = time.perf_counter()
    rc = subprocess.call(cmd, cwd=REPO, env=run_env(verbose))
    if rc != 0:
        fail(f"the sync run failed (exit code {rc}); its log is above")
    print(f"ok: sync run finished in {time.perf_counter() - started:.1f} s")


def run_env(verbose: bool) -> dict[str, str]:
    """The run's environment: at -v everything, else Spark quiet (S3RS_LOG_LEVEL, read by
    the run's SparkSession) and two known warnings filtered by their exact text, as
    scripts/ui.sh does: `backfill_policy` being beta (the single-run backfills rely on it)
    and `dagster job execute` being superseded by `dg launch` (from dagster-dg-cli, a
    separate package and project layout this project does not use)."""
    env = dict(os.environ)
    if verbose:
        env["S3RS_LOG_LEVEL"] = "DEBUG"
        return env
    env.setdefault("S3RS_LOG_LEVEL", "INFO")
    quiet = (
        "ignore:Parameter `backfill_policy` of function `asset` is currently in beta:Warning,"
        "ignore:Function `job_execute_command` is superseded:Warning"
    )
    env["PYTHONWARNINGS"] = ",".join(x for x in (env.get("PYTHONWARNINGS"), quiet) if x)
    return env


def redshift_only(verbose: bool) -> None:
    """A load backlog (files extracted, not loaded): `s3rs sync --redshift-only`."""
    cmd = [str(BIN / "s3rs"), *(["-v"] if verbose else []), "sync", "-t", QUALIFIED,
           "--redshift-only", "--no-progress"]
    print("$ " + " ".join(cmd), flush=True)
    if subprocess.call(cmd, cwd=REPO) != 0:
        fail("the load-only sync failed; its log is above")


def nothing_to_do(prepared: Any) -> None:
    """What `s3rs sync` says when there is nothing below the bound: what waits, and when."""
    from s3rs_assets.cli.common import _not_yet
    from s3rs_assets.config import find_table, load_tables

    print(
        f"ok: nothing new below the safety bound {prepared.bound} (MySQL clock) and nothing "
        "waiting to be loaded: no run, Spark not started"
    )
    found = _not_yet(find_table(load_tables(), QUALIFIED), prepared.bound)
    for line in found.lines() if found else []:
        print(line)


def report(bucket: str, prefix: str) -> int:
    rc = 0
    cmd = [str(BIN / "s3rs"), "watermark", "get", "-t", QUALIFIED]
    print("$ " + " ".join(cmd), flush=True)
    try:
        rc = subprocess.call(cmd, cwd=REPO)
    except FileNotFoundError:
        print(f"demo: warning: {cmd[0]} not found", file=sys.stderr)
        rc = 1
    if rc != 0:
        print(f"demo: warning: `s3rs watermark get` exited with {rc}", file=sys.stderr)

    data_prefix = f"{prefix.strip('/')}/data/{DEMO_SCHEMA}/{DEMO_TABLE}/"
    files = total = 0
    pages = boto3.client("s3").get_paginator("list_objects_v2")
    for page in pages.paginate(Bucket=bucket, Prefix=data_prefix):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith(".parquet"):
                files += 1
                total += obj["Size"]
    print(
        f"S3: {files} parquet file(s), {total:,} bytes ({total / 2**20:.1f} MiB) "
        f"under s3://{bucket}/{data_prefix}"
    )
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="rows to seed (default 100000)")
    ap.add_argument("--reseed", action="store_true", help="drop and re-seed the demo table")
    ap.add_argument(
        "--no-sync",
        action="store_true",
        help="prepare everything and report, but do not run the sync job",
    )
    ap.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="Dagster's DEBUG event lines and Spark's WARN lines too",
    )
    args = ap.parse_args(argv)

    missing = [v for v in REQUIRED_ENV if not os.environ.get(v)]
    if missing:
        fail(f"{', '.join(missing)} not set: run through `make demo` or `source scripts/env.sh`")
    mysql = DatabaseURL.parse(
        os.environ["S3RS_MYSQL_URL"],
        env="S3RS_MYSQL_URL",
        schemes=("mysql", "mariadb"),
        default_port=3306,
    )
    bucket = os.environ["S3RS_S3_BUCKET"]
    prefix = os.environ.get("S3RS_S3_PREFIX") or "s3rs"

    step("1/5 bucket, databases")
    ensure_bucket(bucket)
    ensure_pg_database(os.environ["S3RS_REDSHIFT_URL"])
    with mysql_connect(mysql) as conn:
        step(f"2/5 demo table {QUALIFIED} on {mysql.redacted()}")
        first, _last = seed_table(conn, args.rows, args.reseed)
    first_day = first.date().isoformat()

    step(f"3/5 table list {os.environ['S3RS_TABLES']}, settings {settings_file()}")
    write_tables_yaml(Path(os.environ["S3RS_TABLES"]), first_day)
    write_settings()

    if args.no_sync:
        step("4/5 sync: skipped (--no-sync)")
    else:
        step(f"4/5 sync (job {JOB})")
        prepared = prepare_sync(bucket, prefix)
        if prepared.closed:
            print(f"closed: {prepared.closed:,} empty partition(s) without a run")
        if not prepared.plans:
            nothing_to_do(prepared)
        for plan in prepared.plans:
            print(f"{' + '.join(plan.stages)}: partitions {plan.start} .. {plan.end}")
            if "backup" in plan.stages:
                run_sync(plan.start, plan.end, args.verbose)
            else:
                redshift_only(args.verbose)

    step("5/5 result")
    rc = report(bucket, prefix)
    print(NEXT.format(table=QUALIFIED))
    return 0 if args.no_sync else rc


NEXT = """
Next, in this shell or a new one (s3rs reads .local/s3rs.env for what you have not exported):
  .venv/bin/s3rs watermark get -t {table}
  .venv/bin/s3rs sync -t {table}
  .venv/bin/s3rs verify -t {table}
  .venv/bin/s3rs server start   # optional: later syncs skip ~2 s of imports
  make ui      # the assets, runs and watermark metadata at http://127.0.0.1:3000"""


def settings_file() -> Path:
    return Path(os.environ.get("S3RS_STATE_DIR") or REPO / ".local") / "s3rs.env"


def write_settings() -> None:
    """The stack's settings for the commands typed next, in any shell (cli/local_env.py)."""
    from s3rs_assets.cli import local_env

    path = settings_file()
    local_env.write(path, os.environ)
    print(f"wrote: {path} (read by `s3rs` for the variables you have not exported)")


if __name__ == "__main__":
    sys.exit(main())
