"""The harness of the composition tests (`test_compose_*.py`, issue 16): one small table in
the real MariaDB, its target in the real PostgreSQL, a moto bucket and a Dagster home of
its own per example, and the `s3rs` command run in-process (click's CliRunner), so an
example costs its Dagster runs and little else.

What the tests read back is read from where each fact lives: MySQL, the warehouse table,
the warehouse's load ledger (`load.ledger_versions`), the parquet files in S3, the
watermark record. Nothing here decides anything the code under test decides.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pymysql
import yaml
from click.testing import CliRunner, Result

from s3rs_assets import cli
from s3rs_assets.io_manager import store_for
from s3rs_assets.load import ledger_versions
from s3rs_assets.resources import S3Resource
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT

PREFIX = "s3rs"
TABLE = "sm_orders"
DDL = (
    "CREATE TABLE `{t}` (id BIGINT NOT NULL PRIMARY KEY, update_at DATETIME(6) NOT NULL, "
    "amount DECIMAL(18,4) NOT NULL, note VARCHAR(64) NULL, KEY (update_at)) "
    "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)
#: id -> (update_at, amount, note): one row as both databases hold it
Row = tuple[datetime, Decimal, str | None]


def midnight(days_ago: int) -> datetime:
    """Midnight UTC `days_ago` days before today (MySQL and this host are both UTC)."""
    today = datetime.utcnow().replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=days_ago)


def tables_file(directory: Path, db: str, chunk_rows: int = 4, start_days_ago: int = 3,
                extra: list[dict] | None = None) -> Path:
    """The table list of a composition test module (Dagster builds its definitions once
    per process, so the list is fixed for the module)."""
    path = directory / "tables.yaml"
    entries = [{"name": f"{db}.{TABLE}", "start": f"{midnight(start_days_ago):%Y-%m-%d}",
                "lag": "0s", "partition": "daily", "chunk_rows": chunk_rows},
               *(extra or [])]
    path.write_text(yaml.safe_dump({"tables": entries}, sort_keys=False))
    return path


def invoke(*args: str, input: str | None = None) -> Result:
    """`s3rs ARGS` in this process; an exception the CLI does not turn into a message is a
    test failure (catch_exceptions=False)."""
    return CliRunner().invoke(cli.main, list(args), input=input, catch_exceptions=False)


@dataclass
class World:
    """One table's world: MySQL schema `db`, warehouse `pg_url`, the current bucket and
    Dagster home (both new per example: Dagster's event log is a recovery source of the
    record, so an old home would hand a new example the last one's watermark)."""

    db: str
    pg_url: str
    s3: Any  # boto3 client
    monkeypatch: Any
    tmp: Path
    table: str = TABLE
    bucket: str = ""
    home: Path | None = None
    examples: int = 0
    clock: datetime = field(default_factory=lambda: midnight(0))

    # ----------------------------------------------------------------- set-up

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def resource(self) -> S3Resource:
        return S3Resource(bucket=self.bucket, prefix=PREFIX)

    @property
    def store(self):
        return store_for(self.resource)

    @property
    def warehouse(self) -> WarehouseResource:
        return WarehouseResource(url=self.pg_url)

    def fresh(self, rows: dict[int, Row]) -> None:
        """A new example: the MySQL table holding `rows`, no target, no ledger entries, a
        new bucket and Dagster home."""
        self.examples += 1
        self.bucket = f"s3rs-compose-{uuid.uuid4().hex[:12]}"
        self.s3.create_bucket(Bucket=self.bucket)
        self.home = self.tmp / f"home{self.examples}"
        self.home.mkdir()
        (self.home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        self.monkeypatch.setenv("S3RS_S3_BUCKET", self.bucket)
        self.monkeypatch.setenv("DAGSTER_HOME", str(self.home))
        with self.mysql() as conn, conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{self.table}`")
            cur.execute(DDL.format(t=self.table))
        self.put(rows)
        self.drop_target()
        with self.pg() as c:
            for state in ("s3rs_load_ledger", "s3rs_target_state"):
                if c.execute("SELECT to_regclass(%s)", (f'"{self.db}".{state}',)).fetchone()[0]:
                    c.execute(f'DELETE FROM "{self.db}".{state} WHERE table_name = %s',
                              (self.table,))

    def mysql(self):
        return pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                               database=self.db, autocommit=True, charset="utf8mb4")

    def pg(self):
        return psycopg.connect(self.pg_url.replace("postgres:@", "postgres@"), autocommit=True)

    def mysql_now(self) -> datetime:
        with self.mysql() as conn, conn.cursor() as cur:
            cur.execute("SELECT NOW(6)")
            return cur.fetchone()[0]

    # ------------------------------------------------------------- changes in MySQL

    def put(self, rows: dict[int, Row]) -> None:
        """Insert or replace `rows` in MySQL."""
        if not rows:
            return
        with self.mysql() as conn, conn.cursor() as cur:
            cur.executemany(
                f"REPLACE INTO `{self.table}` (id, update_at, amount, note) "
                "VALUES (%s, %s, %s, %s)",
                [(i, *r) for i, r in rows.items()],
            )

    def delete(self, ids: list[int]) -> None:
        with self.mysql() as conn, conn.cursor() as cur:
            cur.executemany(f"DELETE FROM `{self.table}` WHERE id = %s", [(i,) for i in ids])

    # ------------------------------------------------------------- the target

    def target_exists(self) -> bool:
        with self.pg() as c:
            return c.execute("SELECT to_regclass(%s)",
                             (f'"{self.db}"."{self.table}"',)).fetchone()[0] is not None

    def drop_target(self) -> None:
        with self.pg() as c:
            c.execute(f'DROP TABLE IF EXISTS "{self.db}"."{self.table}"')

    def target_sql(self, sql: str) -> None:
        """`sql` with `{t}` the quoted target table (TRUNCATE, DELETE by hand)."""
        with self.pg() as c:
            c.execute(sql.format(t=f'"{self.db}"."{self.table}"'))

    # ------------------------------------------------------------- reading back

    def mysql_rows(self) -> dict[int, Row]:
        with self.mysql() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, update_at, amount, note FROM `{self.table}`")
            return {r[0]: tuple(r[1:]) for r in cur.fetchall()}

    def warehouse_rows(self) -> dict[int, Row]:
        """The target's rows ({} when it does not exist); a key held twice fails."""
        if not self.target_exists():
            return {}
        with self.pg() as c:
            got = c.execute(
                f'SELECT id, update_at, amount, note FROM "{self.db}"."{self.table}"'
            ).fetchall()
        out = {r[0]: tuple(r[1:]) for r in got}
        assert len(out) == len(got), "a key is held twice in the warehouse"
        return out

    def record(self):
        return self.store.read(self.name, fresh=True)

    def ledger(self) -> set[tuple[str, str]]:
        """(file key, md5) the warehouse's ledger holds for the target as it is now."""
        return ledger_versions(self.warehouse, self.db, self.table)

    def objects(self) -> dict[str, str]:
        """Data objects of the table in S3: key -> md5 (ETag of a single-part upload)."""
        prefix = self.resource.layout.data_table(self.db, self.table)
        out: dict[str, str] = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                       Prefix=prefix):
            out.update({o["Key"]: o["ETag"].strip('"') for o in page.get("Contents", [])})
        return out

    def file_rows(self, keys: list[str]) -> set[tuple[int, Row]]:
        """Every (id, row) version the parquet files `keys` hold."""
        out: set[tuple[int, Row]] = set()
        for k in keys:
            body = self.s3.get_object(Bucket=self.bucket, Key=k)["Body"].read()
            t = pq.read_table(io.BytesIO(body)).to_pylist()
            for r in t:
                ts = r["update_at"]
                ts = ts.replace(tzinfo=None) if ts.tzinfo else ts
                out.add((r["id"], (ts, r["amount"], r["note"])))
        return out

    def primary_key(self) -> str:
        return self.resource.layout.watermark_primary(self.name)

    def copy_keys(self) -> list[str]:
        """The record's spare copies (daily and session) in S3."""
        prefix = self.resource.layout.watermarks()
        keys = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                       Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])
                     if f"{self.name}" in o["Key"] and o["Key"] != self.primary_key()]
        return keys


@contextmanager
def crash_at(monkeypatch: Any, target: Any, attr: str, exc: type[BaseException],
             after: int = 0) -> Iterator[list[int]]:
    """Make `target.attr` raise `exc` on its call number `after` + 1 (the calls before run
    normally): a crash at a named point of a run, in this process. Yields the call count."""
    real = getattr(target, attr)
    calls = [0]

    def boom(*a: Any, **kw: Any) -> Any:
        calls[0] += 1
        if calls[0] == after + 1:
            raise exc(f"injected crash at {target.__name__}.{attr} (call {calls[0]})")
        return real(*a, **kw)

    with monkeypatch.context() as m:
        m.setattr(target, attr, boom)
        yield calls
