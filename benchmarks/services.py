"""The services a benchmark talks to: MariaDB/MySQL, PostgreSQL, S3 (moto), Dagster's home,
a Spark Connect server of its own.

URLs come from the environment as for s3rs itself (S3RS_MYSQL_URL; S3RS_BENCH_PG_URL or
S3RS_REDSHIFT_URL, which must be PostgreSQL; AWS_ENDPOINT_URL_S3). Every suite works in
the MySQL schema, PostgreSQL database and PostgreSQL schema `s3rs_bench`.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import psycopg
import pymysql

from benchmarks.harness import say
from s3rs_assets.config import DatabaseURL, TableConfig
from s3rs_assets.source import describe
from s3rs_assets.types import column_type

REPO = Path(__file__).resolve().parent.parent
#: MySQL schema, PostgreSQL database and schema of every suite (S3RS_BENCH_SCHEMA: the smoke
#: test uses a throwaway one, so it never touches a real run's tables).
SCHEMA = os.environ.get("S3RS_BENCH_SCHEMA") or "s3rs_bench"
if not re.fullmatch(r"[a-z_][a-z0-9_]{0,40}", SCHEMA):
    raise SystemExit(f"bench: S3RS_BENCH_SCHEMA={SCHEMA!r} is not a plain lower-case name")


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


def mysql_exec(u: DatabaseURL, *sql: str) -> list[tuple]:
    """Run statements in schema s3rs_bench; the last one's rows."""
    rows: list[tuple] = []
    with mysql_connect(u, SCHEMA) as conn, conn.cursor() as cur:
        for s in sql:
            cur.execute(s)
            rows = list(cur.fetchall())
    return rows


def ensure_mysql_schema(u: DatabaseURL) -> None:
    with mysql_connect(u) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{SCHEMA}` CHARACTER SET utf8mb4")


def pg_connect(u: DatabaseURL, database: str, autocommit: bool = True):
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


def pg_count(pg: DatabaseURL, table: str, schema: str = SCHEMA) -> int:
    with pg_connect(pg, SCHEMA) as conn:
        return int(conn.execute(f'SELECT COUNT(*) FROM "{schema}"."{table}"').fetchone()[0])


def plain_table_sql(name: str, columns) -> str:
    """A plain PostgreSQL table (no key, no index) with s3rs's column types."""
    cols = ", ".join(f'"{c.name}" {column_type(c).postgres}' for c in columns)
    return f'CREATE TABLE "{SCHEMA}"."{name}" ({cols})'


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
        return int(s.getsockname()[1])


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
            os.environ.pop("AWS_ENDPOINT_URL_S3", None)


def s3_client():
    return boto3.client("s3")


@contextmanager
def bucket(prefix: str = "s3rs-bench") -> Iterator[str]:
    """A fresh bucket, emptied and deleted afterwards."""
    name = f"{prefix}-{os.urandom(5).hex()}"
    s3_client().create_bucket(Bucket=name)
    try:
        yield name
    finally:
        delete_bucket(name)


def delete_bucket(name: str) -> int:
    client = s3_client()
    n = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):
            client.delete_objects(Bucket=name, Delete={"Objects": keys[i : i + 1000]})
            n += len(keys[i : i + 1000])
    client.delete_bucket(Bucket=name)
    return n


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


@contextmanager
def environ(**values: str) -> Iterator[None]:
    """os.environ with `values` set (the CLI processes inherit them), restored after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def spark_connect(master: str) -> Iterator[str]:
    """A Spark Connect server of the benchmark's own (a free port, a temporary state
    directory), stopped at the end; yields the URL runs attach with."""
    from s3rs_assets import spark_server

    state = Path(tempfile.mkdtemp(prefix="s3rs-bench-connect-"))
    settings = spark_server.ServerSettings(port=free_port(), master=master, state_dir=state)
    t0 = time.perf_counter()
    client = None
    try:
        proc = spark_server.launch(settings)
        spark_server.wait_ready(settings, proc)
        say(f"    Spark Connect server {settings.url} ready in {time.perf_counter() - t0:.1f} s")
        from pyspark.sql import SparkSession

        client = SparkSession.builder.remote(settings.url).getOrCreate()  # wait_ready's
        yield settings.url
    finally:
        if client is not None:
            # released while the server still answers: left open, its release at exit
            # retries against a stopped server for minutes
            with suppress(Exception):
                client.stop()
        spark_server.stop(state)


def source_columns(u: DatabaseURL, table: str):
    """The table as s3rs describes it (columns, primary key)."""
    cfg = TableConfig.from_dict({"name": f"{SCHEMA}.{table}", "start": "2025-01-01"})
    with mysql_connect(u, SCHEMA) as conn:
        return describe(conn, cfg)
