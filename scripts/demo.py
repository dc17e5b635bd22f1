"""`make demo`: seed a demo table, sync it MySQL -> S3 -> PostgreSQL through Dagster, report.

Run with the venv's python after `source scripts/env.sh` and `scripts/moto.sh start`:

    .venv/bin/python scripts/demo.py [--rows N] [--reseed] [--no-sync]

1. creates the S3 bucket, the PostgreSQL database and the MySQL schema when missing;
2. seeds `s3rs_demo.settlement_normal_delivery_detail` (100,000 rows over the last
   3 days) when the table is missing or --reseed is given; otherwise keeps it, so a
   second `make demo` is an incremental sync with nothing new to copy;
3. writes the table list $S3RS_TABLES (.local/demo/tables.yaml);
4. runs the sync job for the whole date range with `dagster job execute`;
5. prints the watermark (`s3rs watermark get`) and the parquet files in S3.
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


def sync_range(bucket: str, prefix: str) -> tuple[str, str]:
    """From the first partition either stage has work in to the current one, as `s3rs sync`
    plans it: a second `make demo` does not re-read complete partitions."""
    from s3rs_assets.config import find_table, load_tables
    from s3rs_assets.io_manager import store_for
    from s3rs_assets.resources import S3Resource
    from s3rs_assets.work import plan_sync

    table = find_table(load_tables(), QUALIFIED)
    record = store_for(S3Resource(bucket=bucket, prefix=prefix)).read(QUALIFIED)
    plan = plan_sync(table, record)
    return plan.start, plan.end


def run_sync(first_day: str, last_day: str) -> None:
    tags = json.dumps(
        {
            "dagster/asset_partition_range_start": first_day,
            "dagster/asset_partition_range_end": last_day,
            # the UI's job page and timeline find runs of the code location by this tag
            ".dagster/repository": "__repository__@s3rs",
        }
    )
    cmd = [
        str(BIN / "dagster"),
        "job",
        "execute",
        "-m",
        "s3rs_assets.definitions",
        "-j",
        JOB,
        "--tags",
        tags,
    ]
    print("$ " + " ".join(cmd[:-1]) + f" '{tags}'", flush=True)
    started = time.perf_counter()
    rc = subprocess.call(cmd, cwd=REPO)
    if rc != 0:
        fail(f"the sync run failed (exit code {rc}); its log is above")
    print(f"ok: sync run finished in {time.perf_counter() - started:.1f} s")


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

    step(f"3/5 table list {os.environ['S3RS_TABLES']}")
    write_tables_yaml(Path(os.environ["S3RS_TABLES"]), first_day)

    if args.no_sync:
        step("4/5 sync: skipped (--no-sync)")
    else:
        first_day, last_day = sync_range(bucket, prefix)
        step(f"4/5 sync {first_day} .. {last_day} (job {JOB})")
        run_sync(first_day, last_day)

    step("5/5 result")
    rc = report(bucket, prefix)
    print(
        "\nNext: `make ui` shows the assets, runs and watermark metadata at http://127.0.0.1:3000"
    )
    return 0 if args.no_sync else rc


if __name__ == "__main__":
    sys.exit(main())
