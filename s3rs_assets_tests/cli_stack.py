"""The local stack as the CLI tests use it: one table list for the session, the `stack`
fixture (MariaDB database, moto bucket, PostgreSQL database, a Dagster home, the S3RS_*
environment), seeded watermarks and the small helpers (`invoke`, `pg`, `mysql`, `day`).

Its fixtures reach every test file through conftest.py; the helpers are imported from here.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
import pymysql
import pytest
import yaml
from click.testing import CliRunner

from s3rs_assets import cli
from s3rs_assets.io_manager import store_for
from s3rs_assets.resources import S3Resource
from s3rs_assets.watermark import FileEntry, LoadState, PartitionState, Position
from s3rs_assets_tests.helpers import make_ties_table
from s3rs_assets_tests.mysql_server import MYSQL_HOST, MYSQL_PORT

PREFIX = "s3rs"
TODAY = datetime.now().replace(hour=0, minute=0, second=0, microsecond=0)


def day(n: int) -> datetime:
    """Midnight `n` days before the session's first day (source clock = this host's, both
    UTC here): the table list's start dates use it, so it stays fixed for the session even
    when a run crosses midnight; the open partition is `today()`, not `day(0)`."""
    return TODAY - timedelta(days=n)


def today() -> datetime:
    """Midnight of the day now: the open partition a sync reads to (a run may cross
    midnight after the module was imported, then `day(0)` is closed)."""
    return datetime.now().replace(hour=0, minute=0, second=0, microsecond=0)


def key_of(d: datetime) -> str:
    return d.strftime("%Y-%m-%d")


# ------------------------------------------------------------------------------- stack


@pytest.fixture(scope="session")
def cli_tables_file(tmp_path_factory, mysql_db):
    """One table list for every CLI/SSH/secrets test of the session (Dagster imports the
    definitions module once per process, so the list must not change between tests)."""
    path = tmp_path_factory.mktemp("cli") / "tables.yaml"
    common = {"lag": "0s", "partition": "daily"}
    entries = [
        {"name": f"{mysql_db}.cli_orders", "start": key_of(day(2)), "chunk_rows": 25,
         "parallelism": 2, **common},
        {"name": f"{mysql_db}.cli_broken", "start": key_of(day(1)), **common},
        {"name": f"{mysql_db}.cli_wm", "start": key_of(day(10)), **common},
        {"name": f"{mysql_db}.cli_files", "start": key_of(day(10)), "primary_key": ["id"],
         **common},
        {"name": f"{mysql_db}.cli_other", "start": key_of(day(10)), **common},
        {"name": f"{mysql_db}.cli_verify", "start": key_of(day(3)), **common},
        {"name": f"{mysql_db}.cli_sparse", "start": key_of(day(1100)), **common},
        {"name": f"{mysql_db}.cli_long", "start": key_of(day(7300)), **common},
        {"name": f"{mysql_db}.cli_history", "start": key_of(day(7300)), "chunk_rows": 8,
         **common},
        *({"name": f"{mysql_db}.cli_par{n}", "start": key_of(day(2)), "chunk_rows": 40,
           **common} for n in (1, 2, 3)),
        {"name": f"{mysql_db}.cli_stop", "start": key_of(day(2)), "chunk_rows": 40, **common},
        {"name": f"{mysql_db}.cli_closed", "start": key_of(day(2)), "chunk_rows": 40, **common},
        {"name": f"{mysql_db}.ssh_orders", "start": key_of(day(2)), "chunk_rows": 20, **common},
        {"name": f"{mysql_db}.secret_orders", "start": key_of(day(1)), "chunk_rows": 50,
         **common},
    ]
    path.write_text(yaml.safe_dump({"tables": entries}, sort_keys=False))
    return path


@dataclass
class Stack:
    db: str
    bucket: str
    s3: object  # boto3 client
    pg_url: str
    home: object  # DAGSTER_HOME path

    @property
    def resource(self) -> S3Resource:
        return S3Resource(bucket=self.bucket, prefix=PREFIX)

    @property
    def store(self):
        return store_for(self.resource)

    def name(self, table: str) -> str:
        return f"{self.db}.{table}"

    def etag(self, table: str) -> str | None:
        try:
            key = self.resource.layout.watermark_primary(self.name(table))
            return self.s3.head_object(Bucket=self.bucket, Key=key)["ETag"]
        except Exception:  # noqa: BLE001
            return None

    def listing(self) -> dict[str, str]:
        out = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket):
            out.update({o["Key"]: o["ETag"] for o in page.get("Contents", [])})
        return out


def ensure_definitions(tables_file) -> None:
    """Dagster loads `s3rs_assets.definitions` once per process: if another test module
    imported it with another table list, rebuild it from ours."""
    mod = sys.modules.get("s3rs_assets.definitions")
    if mod is None:
        return
    names = {t.name for t in mod.load_tables()}
    built = {
        ".".join(k.path[:2])
        for k in mod.whole_location().resolve_asset_graph().get_all_asset_keys()
    }
    if not names <= built:
        importlib.reload(mod)


@pytest.fixture
def stack(monkeypatch, mysql_db, mysql_url, pg_url, bucket, s3_client, tmp_path,
          cli_tables_file):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("S3RS_TABLES", str(cli_tables_file))
    monkeypatch.setenv("S3RS_S3_BUCKET", bucket)
    monkeypatch.setenv("S3RS_S3_PREFIX", PREFIX)
    monkeypatch.setenv("S3RS_MYSQL_URL", mysql_url)
    monkeypatch.setenv("S3RS_REDSHIFT_URL", pg_url)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for var in ("S3RS_LOG_FORMAT", "S3RS_SSH_HOST", "S3RS_SOURCE_TIMEZONE"):
        monkeypatch.delenv(var, raising=False)
    ensure_definitions(cli_tables_file)
    return Stack(mysql_db, bucket, s3_client, pg_url, home)


@pytest.fixture(autouse=True)
def _detach_log_handler():
    """The CLI installs its log handler on the root logger; take it off after each test."""
    import logging

    yield
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, "_s3rs_handler", False)]:
        root.removeHandler(h)


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(cli.main, list(args), input=input, catch_exceptions=False)


def pg(stack: Stack):
    return psycopg.connect(stack.pg_url.replace("postgres:@", "postgres@"), autocommit=True)


def mysql(db: str):
    return pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=db,
                           autocommit=True, charset="utf8mb4")


# ------------------------------------------------------------------ seeded watermarks


def _file(table: str, stack: Stack, partition: str, n: int, lo: datetime, hi: datetime,
          put: bool = True) -> FileEntry:
    key = f"{PREFIX}/data/{stack.db}/{table}/{partition}/part-{n}.parquet"
    body = f"fake parquet {key}".encode()
    if put:
        stack.s3.put_object(Bucket=stack.bucket, Key=key, Body=body)
    return FileEntry(key=key, rows=10 * n, bytes=len(body), md5="0" * 32, cursor_min=lo,
                     cursor_max=hi)


def seed(stack: Stack, table: str = "cli_wm", put: bool = True):
    """Days 10..5 complete with two files each, day 4 partial; days 10..6 loaded."""
    name = stack.name(table)

    def change(rec):
        for n in range(10, 3, -1):
            d = day(n)
            files = [
                _file(table, stack, key_of(d), 1, d + timedelta(hours=1), d + timedelta(hours=6),
                      put),
                _file(table, stack, key_of(d), 2, d + timedelta(hours=13),
                      d + timedelta(hours=20), put),
            ]
            complete = n > 4
            rec.partitions[key_of(d)] = PartitionState(
                status="complete" if complete else "partial", window_start=d,
                window_end=d + timedelta(days=1), files=files if complete else files[:1],
                cursor=Position(c=files[-1 if complete else 0].cursor_max, pk=[n * 100]),
                run_id="seed-run",
            )
            if n > 5:
                rec.loaded_partitions[key_of(d)] = LoadState(
                    files=[f.key for f in files], rows=sum(f.rows for f in files))
        rec.mysql_status = "success"
        rec.redshift_status = "success"

    store = stack.store
    record = store.update(name, change).record
    store.write_copies(name)  # as at a run's end
    return record


# ---------------------------------------------------------------------------- sync


def empty_warehouse(stack: Stack, *tables: str) -> None:
    """The warehouse side of `tables` as before any load: the targets dropped, their ledger
    entries deleted (the schema and the ledger table exist)."""
    from s3rs_assets.load.sql import create_ledger_sql

    with pg(stack) as c:
        c.execute(f'CREATE SCHEMA IF NOT EXISTS "{stack.db}"')
        c.execute(create_ledger_sql(stack.db))
        for t in tables:
            c.execute(f'DROP TABLE IF EXISTS "{stack.db}"."{t}"')
            c.execute(f'DELETE FROM "{stack.db}".s3rs_load_ledger WHERE table_name = %s', (t,))


@pytest.fixture
def orders(stack):
    """cli_orders: 30 rows two days ago (three stamps), 20 yesterday on one stamp, 10 half
    an hour ago; cli_broken absent; the warehouse side and the ledger empty."""
    rows = [(i, day(2) + timedelta(hours=3, microseconds=i % 3)) for i in range(1, 31)]
    rows += [(i, day(1) + timedelta(hours=5)) for i in range(31, 51)]  # 20 rows, one stamp
    rows += [(i, datetime.now() - timedelta(minutes=30)) for i in range(51, 61)]
    with mysql(stack.db) as conn:
        make_ties_table(conn, "cli_orders", rows)
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS cli_broken")
    empty_warehouse(stack, "cli_orders")
    return rows
