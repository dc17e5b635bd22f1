"""load_files against a real PostgreSQL and a moto S3: exactly once, never backwards.

Parquet files are written here with pyarrow in the shape stage 1 writes (one file per
object, columns exactly `arrow_schema(columns)`, naive timestamp[us], decimal128(p,s)),
under s3rs/data/<schema>/<table>/<partition>/<name>.parquet. No Spark.

`python -m s3rs_assets_tests.test_load [rows]` runs the timing comparison (`benchmark`).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from s3rs_assets.errors import ConfigError, IntegrityError, SourceSchemaError
from s3rs_assets.load import (
    LEDGER_TABLE,
    LoadTarget,
    ValueTooLongError,
    ensure_target,
    ledger_files,
    load_files,
)
from s3rs_assets.load.ddl import create_table_sql
from s3rs_assets.load.pgbinary import HEADER, TRAILER, binary_chunks
from s3rs_assets.types import SourceColumn, arrow_schema
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets.watermark import FileEntry

DEMO_COLUMNS = [
    SourceColumn("id", "bigint", "bigint", nullable=False),
    SourceColumn("customer_id", "int", "int"),
    SourceColumn("amount", "decimal", "decimal(18,4)", precision=18, scale=4),
    SourceColumn("name", "varchar", "varchar(100)", char_length=100),
    SourceColumn("note", "text", "text"),
    SourceColumn("payload", "json", "json"),
    SourceColumn("is_active", "tinyint", "tinyint(1)"),
    SourceColumn("big", "bigint", "bigint unsigned"),
    SourceColumn("duration", "time", "time"),
    SourceColumn("score", "double", "double"),
    SourceColumn("ratio", "float", "float"),
    SourceColumn("qty", "smallint", "smallint"),
    SourceColumn("birthday", "date", "date"),
    SourceColumn("token", "varbinary", "varbinary(16)", char_length=16),
    SourceColumn("created_at", "datetime", "datetime(6)"),
    SourceColumn("update_at", "datetime", "datetime(6)"),
]
NAMES = [c.name for c in DEMO_COLUMNS]
T0 = datetime(2024, 1, 1)


def row(id: int, update_at: datetime, **values: Any) -> dict[str, Any]:
    """A demo row: every column NULL unless given."""
    r = {n: None for n in NAMES}
    r.update(id=id, update_at=update_at, **values)
    return r


def demo_rows(n: int, start: int = 0, t: datetime = T0) -> list[dict[str, Any]]:
    return [
        row(
            i,
            t + timedelta(microseconds=i * 1001),
            customer_id=i % 1000,
            amount=Decimal(i % 100000) / 100,
            name=f"name {i} é😀",
            note=None if i % 7 == 0 else 'some longer text, with "quotes"\nand a newline',
            payload=f'{{"a": {i}, "b": [1, 2]}}',
            is_active=i % 2 == 0,
            big=Decimal(18446744073709551615 - i),
            duration="838:59:59",
            score=i * 0.5,
            ratio=1.5,
            qty=i % 30000,
            birthday=date(1990, 1, 1),
            token=i.to_bytes(8, "big"),
            created_at=t + timedelta(microseconds=i),
        )
        for i in range(start, start + n)
    ]


def make_table(rows: list[dict[str, Any]], columns: list[SourceColumn] = DEMO_COLUMNS) -> pa.Table:
    schema = arrow_schema(columns)
    return pa.table({f.name: [r.get(f.name) for r in rows] for f in schema}, schema=schema)


def data_key(target: LoadTarget, partition: str, name: str) -> str:
    return f"s3rs/data/{target.schema}/{target.table}/{partition}/{name}.parquet"


def put_parquet(
    s3_client: Any, bucket: str, key: str, table: pa.Table, cursor: str = "update_at"
) -> FileEntry:
    """Write one parquet object as stage 1 does and return its manifest entry."""
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=128 * 1024)
    data = buf.getvalue()
    s3_client.put_object(Bucket=bucket, Key=key, Body=data)
    cur = [v for v in table.column(cursor).to_pylist() if v is not None]
    return FileEntry(
        key=key,
        rows=table.num_rows,
        bytes=len(data),
        md5=hashlib.md5(data).hexdigest(),
        cursor_min=min(cur) if cur else None,
        cursor_max=max(cur) if cur else None,
    )


def put_rows(s3_client, bucket, target, partition, name, rows, columns=DEMO_COLUMNS) -> FileEntry:
    return put_parquet(
        s3_client, bucket, data_key(target, partition, name), make_table(rows, columns)
    )


def pg(pg_url: str, sql: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(pg_url) as c:
        return c.execute(sql, params).fetchall()


def target_rows(pg_url: str, target: LoadTarget, cols: str = "*") -> list[tuple]:
    return pg(pg_url, f'SELECT {cols} FROM "{target.schema}"."{target.table}" ORDER BY id')


def ledger(pg_url: str, target: LoadTarget) -> list[tuple]:
    return pg(
        pg_url,
        f'SELECT file_key, row_count, partition_key FROM "{target.schema}"."{LEDGER_TABLE}" '
        "WHERE table_name = %s ORDER BY file_key",
        (target.table,),
    )


@pytest.fixture
def warehouse(pg_url: str) -> WarehouseResource:
    return WarehouseResource(url=pg_url)


@pytest.fixture
def target() -> LoadTarget:
    """A fresh warehouse schema per test, so ledgers never meet."""
    return LoadTarget(
        schema=f"wh_{uuid.uuid4().hex[:10]}",
        table="orders",
        columns=list(DEMO_COLUMNS),
        primary_key=("id",),
        cursor="update_at",
        source_name="shop.orders",
    )


# ------------------------------------------------------------------------ empty target


def test_load_into_empty_target_keeps_every_type_exactly(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    rows = [
        row(
            1,
            datetime(2024, 1, 2, 3, 4, 5, 123456),
            customer_id=-2147483648,
            amount=Decimal("12345678901234.5678"),
            name='Zoë 😀 ünïcödé, "quoted"',
            note=None,
            payload='{"k": "v", "emoji": "😀", "n": [1, 2.50]}',
            is_active=True,
            big=Decimal("18446744073709551615"),
            duration="838:59:59",
            score=0.1 + 0.2,
            ratio=1.5,
            qty=-32768,
            birthday=date(1000, 1, 1),
            token=b"\x00\xff'\",\n\\",
            created_at=datetime(2024, 1, 1, 0, 0, 0, 1),
        ),
        row(
            2,
            datetime(2024, 1, 2, 23, 59, 59, 999999),
            amount=Decimal("-0.0001"),
            name="",
            note='line1\nline2\r\n\\.\n,"',
            payload="[]",
            is_active=False,
            big=Decimal(0),
            duration="-838:59:59",
            score=float("inf"),
            ratio=float("-inf"),
            qty=32767,
            birthday=date(9999, 12, 31),
            token=b"",
            created_at=datetime(9999, 12, 31, 23, 59, 59, 999999),
        ),
        row(3, datetime(2024, 1, 2)),  # every other column NULL
    ]
    f = put_rows(s3_client, bucket, target, "2024-01-02", "part-0000", rows)
    res = load_files(warehouse, s3_resource, target, "2024-01-02", [f])
    assert (res.files_loaded, res.files_skipped) == ([f.key], [])
    assert (res.rows_staged, res.rows_inserted, res.rows_deleted) == (3, 3, 0)
    assert res.ledger_rows == 3 and res.attempts == 1
    assert res.ddl[0] == f'CREATE SCHEMA IF NOT EXISTS "{target.schema}"'

    got = target_rows(pg_url, target)
    assert got[0] == tuple(rows[0][n] for n in NAMES)
    assert got[1] == tuple(rows[1][n] for n in NAMES)
    assert got[2] == tuple(rows[2][n] for n in NAMES)
    assert got[1][NAMES.index("name")] == "" and got[2][NAMES.index("name")] is None
    types = dict(
        pg(
            pg_url,
            "SELECT column_name, format_type(atttypid, atttypmod) "
            "FROM information_schema.columns c "
            "JOIN pg_attribute a ON a.attrelid = (quote_ident(c.table_schema) || '.' || "
            "quote_ident(c.table_name))::regclass AND a.attname = c.column_name "
            "WHERE table_schema = %s AND table_name = %s",
            (target.schema, target.table),
        )
    )
    assert types == {
        "id": "bigint",
        "customer_id": "integer",
        "amount": "numeric(18,4)",
        "name": "character varying(400)",
        "note": "character varying(65535)",
        "payload": "character varying(65535)",
        "is_active": "boolean",
        "big": "numeric(20,0)",
        "duration": "character varying(20)",
        "score": "double precision",
        "ratio": "real",
        "qty": "smallint",
        "birthday": "date",
        "token": "bytea",
        "created_at": "timestamp without time zone",
        "update_at": "timestamp without time zone",
    }
    assert ledger(pg_url, target) == [(f.key, 3, "2024-01-02")]


def test_float_specials_and_nan(warehouse, s3_resource, s3_client, bucket, pg_url, target):
    f = put_rows(
        s3_client, bucket, target, "d", "p0", [row(1, T0, score=float("nan"), ratio=float("nan"))]
    )
    load_files(warehouse, s3_resource, target, "d", [f])
    ((score, ratio),) = target_rows(pg_url, target, "score, ratio")
    assert math.isnan(score) and math.isnan(ratio)


# --------------------------------------------------------------- exactly once, never back


def test_same_files_twice_skip_via_ledger(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    files = [
        put_rows(s3_client, bucket, target, "2024-01-01", f"part-{i}", demo_rows(100, i * 100))
        for i in range(3)
    ]
    first = load_files(warehouse, s3_resource, target, "2024-01-01", files)
    assert first.rows_inserted == 300 and len(first.files_loaded) == 3
    second = load_files(warehouse, s3_resource, target, "2024-01-01", files)
    assert second.files_loaded == [] and second.files_skipped == [f.key for f in files]
    assert (second.rows_staged, second.rows_inserted, second.rows_deleted) == (0, 0, 0)
    assert second.ledger_rows == 300 and second.ddl == []
    assert pg(pg_url, f'SELECT count(*), count(DISTINCT id) FROM "{target.schema}".orders') == [
        (300, 300)
    ]
    assert ledger_files(warehouse, target, "2024-01-01") == {f.key: 100 for f in files}
    assert ledger_files(warehouse, target, "2024-01-02") == {}


def test_older_partition_after_newer_never_regresses(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    d1 = datetime(2024, 1, 2, 10)
    newer = put_rows(
        s3_client,
        bucket,
        target,
        "2024-01-02",
        "p0",
        [
            row(1, d1, name="v2 (newer)"),
            row(2, d1, name="only in D+1"),
        ],
    )
    load_files(warehouse, s3_resource, target, "2024-01-02", [newer])
    # Partition D re-extracted, still holding an OLDER version of row 1 (and a new row 3).
    older = put_rows(
        s3_client,
        bucket,
        target,
        "2024-01-01",
        "p0",
        [
            row(1, datetime(2024, 1, 1, 9), name="v1 (older)"),
            row(3, datetime(2024, 1, 1, 9), name="row 3"),
        ],
    )
    res = load_files(warehouse, s3_resource, target, "2024-01-01", [older])
    assert (res.rows_staged, res.rows_inserted, res.rows_deleted) == (2, 1, 0)
    assert res.rows_not_inserted == 1
    assert target_rows(pg_url, target, "id, name, update_at") == [
        (1, "v2 (newer)", d1),
        (2, "only in D+1", d1),
        (3, "row 3", datetime(2024, 1, 1, 9)),
    ]
    # A later version replaces it; an equal cursor replaces too (same version, re-read).
    newest = put_rows(
        s3_client,
        bucket,
        target,
        "2024-01-03",
        "p0",
        [
            row(1, datetime(2024, 1, 3), name="v3"),
            row(2, d1, name="re-read"),
        ],
    )
    res = load_files(warehouse, s3_resource, target, "2024-01-03", [newest])
    assert (res.rows_inserted, res.rows_deleted) == (2, 2)
    assert target_rows(pg_url, target, "id, name") == [(1, "v3"), (2, "re-read"), (3, "row 3")]


def test_newest_staged_version_wins_within_one_load(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    t = datetime(2024, 1, 1, 12)
    a = put_rows(
        s3_client,
        bucket,
        target,
        "d",
        "a",
        [
            row(1, t + timedelta(microseconds=2), name="newest"),
            row(2, t, name="two-old"),
            row(1, t, name="oldest"),  # two versions of key 1 inside one file
        ],
    )
    b = put_rows(
        s3_client,
        bucket,
        target,
        "d",
        "b",
        [
            row(1, t + timedelta(microseconds=1), name="middle"),
            row(2, t + timedelta(seconds=1), name="two-new"),
        ],
    )
    res = load_files(warehouse, s3_resource, target, "d", [a, b])
    assert (res.rows_staged, res.rows_inserted, res.rows_deleted) == (5, 2, 0)
    assert target_rows(pg_url, target, "id, name") == [(1, "newest"), (2, "two-new")]


def test_null_cursor_in_target_is_replaced(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    a = put_rows(s3_client, bucket, target, "d", "a", [row(1, None, name="no cursor")])
    load_files(warehouse, s3_resource, target, "d", [a])
    b = put_rows(s3_client, bucket, target, "d", "b", [row(1, T0, name="dated")])
    res = load_files(warehouse, s3_resource, target, "d", [b])
    assert (res.rows_deleted, res.rows_inserted) == (1, 1)
    c = put_rows(s3_client, bucket, target, "d", "c", [row(1, None, name="no cursor again")])
    res = load_files(warehouse, s3_resource, target, "d", [c])
    assert (res.rows_deleted, res.rows_inserted) == (0, 0)
    assert target_rows(pg_url, target, "id, name") == [(1, "dated")]


def test_rewritten_key_with_new_content_loads_again(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    key = data_key(target, "d", "chunk-0")
    first = put_parquet(s3_client, bucket, key, make_table([row(1, T0, name="a")]))
    load_files(warehouse, s3_resource, target, "d", [first])
    # The chunk is re-read after an update: same deterministic key, new content.
    second = put_parquet(
        s3_client, bucket, key, make_table([row(1, T0 + timedelta(hours=1), name="b"), row(2, T0)])
    )
    res = load_files(warehouse, s3_resource, target, "d", [second])
    assert res.files_loaded == [key] and res.rows_inserted == 2
    assert target_rows(pg_url, target, "id, name") == [(1, "b"), (2, None)]
    assert ledger_files(warehouse, target, "d") == {key: 2}
    assert res.ledger_rows == 2


# -------------------------------------------------------------------- crash and retry


class InjectedFailure(RuntimeError):
    """Raised by a test's `checkpoint=` observer to crash a load at that point."""


@pytest.mark.parametrize("point", ["after_ledger", "after_copy", "after_merge", "before_commit"])
def test_crash_inside_the_transaction_commits_nothing(
    point, warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    base = put_rows(s3_client, bucket, target, "d", "base", [row(1, T0, name="before")])
    load_files(warehouse, s3_resource, target, "d", [base])
    files = [
        put_rows(
            s3_client,
            bucket,
            target,
            "d",
            "p1",
            [row(1, T0 + timedelta(hours=1), name="after"), *demo_rows(50, 10)],
        ),
        put_rows(s3_client, bucket, target, "d", "p2", demo_rows(50, 60)),
    ]

    def crash(name: str) -> None:
        if name == point:
            raise InjectedFailure(name)

    with pytest.raises(InjectedFailure):
        load_files(warehouse, s3_resource, target, "d", files, checkpoint=crash)
    assert target_rows(pg_url, target, "id, name") == [(1, "before")]
    assert ledger(pg_url, target) == [(base.key, 1, "d")]
    assert pg(
        pg_url,
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' "
        "AND datname = current_database()",
    ) == [(0,)]

    res = load_files(warehouse, s3_resource, target, "d", [base, *files])
    assert res.files_loaded == [f.key for f in files] and res.files_skipped == [base.key]
    again = load_files(warehouse, s3_resource, target, "d", [base, *files])
    assert again.files_loaded == []
    assert pg(pg_url, f'SELECT count(*) FROM "{target.schema}".orders') == [(101,)]
    assert sum(ledger_files(warehouse, target).values()) == 1 + 51 + 50  # rows per file
    assert pg(pg_url, f'SELECT count(DISTINCT id) FROM "{target.schema}".orders') == [(101,)]
    assert target_rows(pg_url, target, "id, name")[0] == (1, "after")


_CRASH_SCRIPT = """
import json, os, sys
from s3rs_assets.load import LoadTarget, load_files
from s3rs_assets.resources import S3Resource
from s3rs_assets.types import SourceColumn
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets.watermark import FileEntry
a = json.loads(sys.argv[1])
t = a["target"]
target = LoadTarget(t["schema"], t["table"], [SourceColumn(**c) for c in t["columns"]],
                    tuple(t["primary_key"]), t["cursor"], t["source_name"])
def die(name):
    if name == a["point"]:
        print("dying at", name, flush=True)
        os._exit(17)  # no rollback, no close: the process is gone
load_files(WarehouseResource(url=a["url"]), S3Resource(bucket=a["bucket"]), target, "d",
           [FileEntry(**f) for f in a["files"]], checkpoint=die)
"""


@pytest.mark.parametrize("point", ["after_copy", "before_commit"])
def test_killed_process_commits_nothing(
    point, warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    files = [
        put_rows(s3_client, bucket, target, "d", f"p{i}", demo_rows(500, i * 500)) for i in range(2)
    ]
    arg = {
        "point": point,
        "url": pg_url,
        "bucket": bucket,
        "files": [json.loads(f.model_dump_json()) for f in files],
        "target": {
            "schema": target.schema,
            "table": target.table,
            "primary_key": target.primary_key,
            "cursor": target.cursor,
            "source_name": target.source_name,
            "columns": [c.__dict__ for c in target.columns],
        },
    }
    proc = subprocess.run(
        [sys.executable, "-c", _CRASH_SCRIPT, json.dumps(arg)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert proc.returncode == 17, proc.stderr
    assert f"dying at {point}" in proc.stdout
    assert target_rows(pg_url, target) == [] and ledger(pg_url, target) == []
    res = load_files(warehouse, s3_resource, target, "d", files)  # must not block on stale locks
    assert res.files_loaded == [f.key for f in files] and res.attempts == 1
    assert pg(pg_url, f'SELECT count(*) FROM "{target.schema}".orders') == [(1000,)]
    assert sum(ledger_files(warehouse, target, "d").values()) == 1000


def test_racing_loaders_load_each_file_exactly_once(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    files = [
        put_rows(s3_client, bucket, target, "d", f"p{i}", demo_rows(2000, i * 2000))
        for i in range(4)
    ]
    # Overlapping file sets, started together; ensure_target races too (fresh schema).
    sets = [files[:3], files[1:], files, files[2:]]
    barrier = threading.Barrier(len(sets))
    results: list[Any] = [None] * len(sets)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = load_files(
                warehouse, s3_resource, target, "d", sets[i], backoff_seconds=0.05
            )
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(sets))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    loaded = sorted(k for r in results for k in r.files_loaded)
    assert loaded == sorted(f.key for f in files)  # each file loaded by exactly one loader
    assert any(r.attempts > 1 for r in results) or any(r.files_skipped for r in results)
    assert pg(pg_url, f'SELECT count(*), count(DISTINCT id) FROM "{target.schema}".orders') == [
        (8000, 8000)
    ]
    assert [(k, n) for k, n, _ in ledger(pg_url, target)] == sorted((f.key, 2000) for f in files)


# ------------------------------------------------------------------- schema evolution


def test_new_source_column_is_added_and_filled(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    old = put_rows(s3_client, bucket, target, "d1", "p0", demo_rows(3))
    load_files(warehouse, s3_resource, target, "d1", [old])

    coupon = SourceColumn("coupon", "varchar", "varchar(20)", char_length=20)
    cols = [*DEMO_COLUMNS, coupon]
    t2 = LoadTarget(target.schema, target.table, cols, ("id",), "update_at", target.source_name)
    new_rows = [dict(r, coupon=f"C{r['id']}") for r in demo_rows(2, 100, T0 + timedelta(days=1))]
    new = put_rows(s3_client, bucket, target, "d2", "p0", new_rows, cols)
    # A file of partition d2 still written before the column existed loads too (NULLs).
    late = put_rows(
        s3_client, bucket, target, "d2", "p1", demo_rows(1, 200, T0 + timedelta(days=1))
    )
    res = load_files(warehouse, s3_resource, t2, "d2", [new, late])
    assert res.ddl == [f'ALTER TABLE "{target.schema}"."orders" ADD COLUMN "coupon" VARCHAR(80)']
    assert res.rows_inserted == 3
    assert target_rows(pg_url, target, "id, coupon") == [
        (0, None),
        (1, None),
        (2, None),
        (100, "C100"),
        (101, "C101"),
        (200, None),
    ]
    assert ensure_target(warehouse, t2) == []
    # Loading with the old column list later (the column dropped in MySQL) still works.
    gone = put_rows(s3_client, bucket, target, "d3", "p0", [row(300, T0)])
    load_files(warehouse, s3_resource, target, "d3", [gone])
    assert target_rows(pg_url, target, "id, coupon")[-1] == (300, None)


def test_widening_changes_are_applied(warehouse, s3_resource, s3_client, bucket, pg_url, target):
    load_files(
        warehouse,
        s3_resource,
        target,
        "d",
        [put_rows(s3_client, bucket, target, "d", "p0", demo_rows(2))],
    )
    wider = [
        SourceColumn("name", "varchar", "varchar(200)", char_length=200)
        if c.name == "name"
        else SourceColumn("qty", "int", "int")
        if c.name == "qty"
        else SourceColumn("amount", "decimal", "decimal(24,4)", precision=24, scale=4)
        if c.name == "amount"
        else SourceColumn("customer_id", "smallint", "smallint")
        if c.name == "customer_id"  # narrower: kept
        else c
        for c in DEMO_COLUMNS
    ]
    t2 = LoadTarget(target.schema, target.table, wider, ("id",), "update_at", target.source_name)
    ddl = ensure_target(warehouse, t2)
    t = f'"{target.schema}"."orders"'
    assert ddl == [
        f'ALTER TABLE {t} ALTER COLUMN "amount" TYPE DECIMAL(24,4)',
        f'ALTER TABLE {t} ALTER COLUMN "name" TYPE VARCHAR(800)',
        f'ALTER TABLE {t} ALTER COLUMN "qty" TYPE INTEGER',
    ]
    big = [
        dict(r, amount=Decimal("12345678901234567890.1234"), qty=2_000_000_000, customer_id=7)
        for r in demo_rows(1, 10)
    ]
    load_files(
        warehouse,
        s3_resource,
        t2,
        "d",
        [put_rows(s3_client, bucket, target, "d", "p1", big, wider)],
    )
    assert target_rows(pg_url, target, "id, amount, qty, customer_id")[-1] == (
        10,
        Decimal("12345678901234567890.1234"),
        2_000_000_000,
        7,
    )
    assert pg(pg_url, f"SELECT count(*) FROM {t}") == [(3,)]


def test_incompatible_type_change_stops_the_table_untouched(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    f = put_rows(s3_client, bucket, target, "d", "p0", demo_rows(2))
    load_files(warehouse, s3_resource, target, "d", [f])
    before_types = pg(
        pg_url,
        "SELECT column_name, data_type, numeric_scale FROM information_schema.columns "
        "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
        (target.schema,),
    )
    changed = [
        SourceColumn("amount", "decimal", "decimal(18,2)", precision=18, scale=2)
        if c.name == "amount"
        else SourceColumn("qty", "varchar", "varchar(5)", char_length=5)
        if c.name == "qty"
        else c
        for c in DEMO_COLUMNS
    ] + [SourceColumn("coupon", "varchar", "varchar(20)", char_length=20)]
    t2 = LoadTarget(target.schema, target.table, changed, ("id",), "update_at", target.source_name)
    g = put_rows(
        s3_client,
        bucket,
        target,
        "d",
        "p1",
        [dict(r, qty=str(r["qty"])) for r in demo_rows(2, 10)],
        changed,
    )
    with pytest.raises(SourceSchemaError) as e:
        load_files(warehouse, s3_resource, t2, "d", [g])
    msg = str(e.value)
    assert f"{target.schema}.orders" in msg and "shop.orders" in msg
    assert "'amount' is DECIMAL(18,4) in the warehouse but now maps to DECIMAL(18,2)" in msg
    assert "'qty' is SMALLINT in the warehouse but now maps to VARCHAR(20)" in msg
    after_types = pg(
        pg_url,
        "SELECT column_name, data_type, numeric_scale FROM information_schema.columns "
        "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
        (target.schema,),
    )
    assert after_types == before_types  # not even the compatible new column was added
    assert pg(pg_url, f'SELECT count(*) FROM "{target.schema}".orders') == [(2,)]
    assert ledger(pg_url, target) == [(f.key, 2, "d")]


def test_value_too_long_names_table_column_and_key(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    short = [
        SourceColumn("name", "varchar", "varchar(2)", char_length=2) if c.name == "name" else c
        for c in DEMO_COLUMNS
    ]
    t2 = LoadTarget(target.schema, target.table, short, ("id",), "update_at", target.source_name)
    ok = put_rows(
        s3_client, bucket, target, "d", "p0", [row(1, T0, name="😀😀")], short
    )  # 8 bytes: fits
    # 3 emoji: 3 characters (PostgreSQL would take them) but 12 bytes > VARCHAR(8) in Redshift.
    bad = put_rows(
        s3_client,
        bucket,
        target,
        "d",
        "p1",
        [row(2, T0, name="ok"), row(3, T0, name="😀😀😀")],
        short,
    )
    with pytest.raises(ValueTooLongError) as e:
        load_files(warehouse, s3_resource, t2, "d", [ok, bad])
    msg = str(e.value)
    assert f"table {target.schema}.orders" in msg and "column 'name'" in msg
    assert "(id=3)" in msg and "12 bytes" in msg and "VARCHAR(8)" in msg and bad.key in msg
    assert target_rows(pg_url, target) == [] and ledger(pg_url, target) == []


# ----------------------------------------------------------------- integrity and input


def test_file_not_matching_its_manifest_loads_nothing(
    warehouse, s3_resource, s3_client, bucket, pg_url, target
):
    f = put_rows(s3_client, bucket, target, "d", "p0", demo_rows(5))
    with pytest.raises(IntegrityError, match="md5"):
        load_files(warehouse, s3_resource, target, "d", [f.model_copy(update={"md5": "0" * 32})])
    with pytest.raises(IntegrityError, match="manifest says 6"):
        load_files(warehouse, s3_resource, target, "d", [f.model_copy(update={"rows": 6})])
    assert target_rows(pg_url, target) == [] and ledger(pg_url, target) == []


def test_bad_input_is_refused(warehouse, s3_resource, target):
    with pytest.raises(ConfigError, match="listed twice"):
        f = FileEntry(key="k", rows=1, bytes=1, md5="x")
        load_files(warehouse, s3_resource, target, "d", [f, f])
    with pytest.raises(ConfigError, match="invalid"):
        LoadTarget("s", "t; DROP TABLE x", DEMO_COLUMNS, ("id",), "update_at", "a.b")
    with pytest.raises(ConfigError, match="primary key column 'nope'"):
        LoadTarget("s", "t", DEMO_COLUMNS, ("nope",), "update_at", "a.b")
    with pytest.raises(ConfigError, match="cursor column"):
        LoadTarget("s", "t", DEMO_COLUMNS, ("id",), "nope", "a.b")


def test_no_files_only_ensures_the_target(warehouse, s3_resource, pg_url, target):
    res = load_files(warehouse, s3_resource, target, "d", [])
    assert res.files_loaded == [] and len(res.ddl) == 4  # schema, ledger, state, table
    assert target_rows(pg_url, target) == []


def test_connection_failure_hides_the_password(s3_resource, target):
    wh = WarehouseResource(url="postgresql://someone:pa55-w0rd-xyz@127.0.0.1:1/nodb")
    with pytest.raises(ConfigError) as e:
        load_files(wh, s3_resource, target, "d", [])
    assert "pa55-w0rd-xyz" not in str(e.value) and "***" in str(e.value)
    assert (
        e.value.__cause__ is None
        and e.value.__context__ is None
        or "pa55" not in repr(e.value.__context__)
    )


# ------------------------------------------------------------------------- timing


def benchmark(
    pg_url: str, s3_resource: Any, s3_client: Any, n_rows: int = 200_000, files: int = 4
) -> dict[str, float]:
    """rows/s of (a) a plain psycopg COPY of the same parquet into a fresh table (download,
    decode, binary COPY encoding, COPY; no checks, staging, merge or ledger) and (b)
    load_files into an empty target. Prints and returns both; asserts nothing about time."""
    wh = WarehouseResource(url=pg_url)
    out: dict[str, float] = {}
    for rep in range(2):
        tgt = LoadTarget(
            f"bench_{uuid.uuid4().hex[:8]}",
            "orders",
            DEMO_COLUMNS,
            ("id",),
            "update_at",
            "shop.orders",
        )
        per = n_rows // files
        entries = [
            put_rows(s3_client, s3_resource.bucket, tgt, "d", f"p{i}", demo_rows(per, i * per))
            for i in range(files)
        ]
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute(f'CREATE SCHEMA "{tgt.schema}"')
            c.execute(
                create_table_sql(
                    LoadTarget(tgt.schema, "plain", DEMO_COLUMNS, ("id",), "update_at", "x"),
                    "postgres",
                )
            )
        t0 = time.perf_counter()
        with psycopg.connect(pg_url) as c, c.cursor() as cur:
            with cur.copy(f'COPY "{tgt.schema}"."plain" FROM STDIN (FORMAT binary)') as cp:
                cp.write(HEADER)
                for e in entries:
                    body = s3_client.get_object(Bucket=s3_resource.bucket, Key=e.key)["Body"].read()
                    for chunk in binary_chunks(pq.read_table(pa.BufferReader(body))):
                        cp.write(chunk)
                cp.write(TRAILER)
            c.commit()
        plain = n_rows / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        res = load_files(wh, s3_resource, tgt, "d", entries)
        loaded = n_rows / (time.perf_counter() - t0)
        assert res.rows_inserted == n_rows
        out = {
            "plain_copy_rows_per_s": plain,
            "load_files_rows_per_s": loaded,
            "ratio": loaded / plain,
            "copy_s": res.copy_seconds,
            "merge_s": res.merge_seconds,
            "total_s": res.seconds,
        }
        print(
            f"run {rep}: "
            + ", ".join(f"{k}={v:,.3f}" if v < 100 else f"{k}={v:,.0f}" for k, v in out.items())
        )
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute(f'DROP SCHEMA "{tgt.schema}" CASCADE')
    return out


@pytest.mark.slow
def test_benchmark_runs(pg_url, s3_resource, s3_client):
    out = benchmark(pg_url, s3_resource, s3_client, n_rows=20_000)
    assert out["plain_copy_rows_per_s"] > 0 and out["load_files_rows_per_s"] > 0


if __name__ == "__main__":
    from moto.server import ThreadedMotoServer

    from s3rs_assets.resources import S3Resource
    from s3rs_assets_tests.conftest import PG_DSN, free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ.update(
        AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{port}",
        AWS_ACCESS_KEY_ID="t",
        AWS_SECRET_ACCESS_KEY="t",
        AWS_DEFAULT_REGION="us-east-1",
    )
    import boto3

    client = boto3.client("s3")
    bucket_name = f"s3rs-bench-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket_name)
    db = f"s3rs_bench_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(PG_DSN, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{db}"')
    try:
        benchmark(
            f"postgresql://postgres@127.0.0.1:5432/{db}",
            S3Resource(bucket=bucket_name),
            client,
            n_rows=int(sys.argv[1]) if len(sys.argv) > 1 else 200_000,
        )
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        server.stop()
