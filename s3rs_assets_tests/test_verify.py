"""verify_table against a real MariaDB and PostgreSQL: equal data is ok, hand edits are found."""

from __future__ import annotations

import hashlib
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from decimal import Decimal

import psycopg
import pymysql
import pytest

from s3rs_assets import int_hash
from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError
from s3rs_assets.load import LoadTarget, load_files
from s3rs_assets.types import SourceColumn
from s3rs_assets.verify import (
    PartitionCheck,
    mysql_checksum_sql,
    sha256_hex,
    verify_table,
    warehouse_checksum_sql,
    warehouse_hash_expr,
)
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.test_load import make_table, pg, put_parquet

COLUMNS = [
    SourceColumn("id", "bigint", "bigint", nullable=False),
    SourceColumn("code", "varchar", "varchar(20)", nullable=False, char_length=20),
    SourceColumn("flag", "tinyint", "tinyint(1)"),
    SourceColumn("amount", "decimal", "decimal(12,3)", precision=12, scale=3),
    SourceColumn("update_at", "datetime", "datetime(6)"),
]
DAYS = [datetime(2024, 3, 1) + timedelta(days=i) for i in range(3)]
PARTITIONS = [(d.strftime("%Y-%m-%d"), d, d + timedelta(days=1)) for d in DAYS]


def _rows() -> list[dict]:
    rows = []
    for i in range(60):
        day = DAYS[i % 3]
        rows.append(
            {
                "id": i,
                "code": f"c-{i % 4}-é😀",  # composite key (code, id), utf8mb4
                "flag": i % 2 == 0,
                "amount": Decimal(i) / 8,
                # whole seconds (printed .000000 on both sides) and microseconds; ties too
                "update_at": day + timedelta(hours=i % 5, microseconds=0 if i % 3 else 1000 + i),
            }
        )
    rows.append(
        {
            "id": 99,
            "code": "x",
            "flag": None,
            "amount": None,
            "update_at": datetime(2024, 3, 1, 23, 59, 59, 999999),
        }
    )
    return rows


def _both_sides(
    env: tuple, ddl: str, columns: list[SourceColumn], key: list[str], rows: list[dict]
) -> tuple[WarehouseResource, LoadTarget, TableConfig]:
    """`rows` in a new MySQL table (`ddl`: its columns) and, one parquet file per
    partition, loaded into the warehouse as stage 2 loads them."""
    mysql_conn, pg_url, s3_resource, s3_client, bucket = env
    table = f"t_{uuid.uuid4().hex[:8]}"
    names = [c.name for c in columns]
    with mysql_conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{table}` ({ddl}, KEY (update_at))")
        cur.executemany(
            f"INSERT INTO `{table}` ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})",
            [tuple(r[n] for n in names) for r in rows],
        )
    db = mysql_conn.db.decode() if isinstance(mysql_conn.db, bytes) else mysql_conn.db
    cfg = TableConfig.from_dict(
        {
            "name": f"{db}.{table}",
            "primary_key": key,
            "target": f"vf_{uuid.uuid4().hex[:8]}.{table}",
        }
    )
    target = LoadTarget.from_table_config(cfg, columns)
    wh = WarehouseResource(url=pg_url)
    for name, start, end in PARTITIONS:
        part = [r for r in rows if start <= r["update_at"] < end]
        s3key = f"s3rs/data/{cfg.schema}/{table}/{name}/part-0.parquet"
        f = put_parquet(s3_client, bucket, s3key, make_table(part, columns))
        load_files(wh, s3_resource, target, name, [f])
    return wh, target, cfg


@pytest.fixture
def env(mysql_conn, pg_url, s3_resource, s3_client, bucket):
    return mysql_conn, pg_url, s3_resource, s3_client, bucket


@pytest.fixture
def loaded(env):
    return _both_sides(
        env,
        "id BIGINT NOT NULL, code VARCHAR(20) NOT NULL, flag TINYINT(1), amount DECIMAL(12,3), "
        "update_at DATETIME(6), PRIMARY KEY (code, id)",
        COLUMNS,
        ["code", "id"],
        _rows(),
    )


INT_COLUMNS = [
    SourceColumn("shard", "int", "int", nullable=False),
    SourceColumn("id", "bigint", "bigint", nullable=False),
    SourceColumn("amount", "decimal", "decimal(12,3)", precision=12, scale=3),
    SourceColumn("update_at", "datetime", "datetime(6)"),
]


@pytest.fixture
def loaded_ints(env):
    """A composite integer key (INT, BIGINT) and a DATETIME(6) cursor: the checksum is
    int_hash's integer arithmetic on both sides. Keys near both ends of BIGINT, negative
    shards, ties, whole seconds and microseconds."""
    rows = [
        {
            "shard": (i % 7) - 3,
            "id": [i, -(2**63) + i, 2**63 - 1 - i, 2**29 * i + 1][i % 4],
            "amount": Decimal(i) / 8,
            "update_at": DAYS[i % 3] + timedelta(hours=i % 5, microseconds=0 if i % 3 else 7 + i),
        }
        for i in range(60)
    ]
    ddl = (
        "shard INT NOT NULL, id BIGINT NOT NULL, amount DECIMAL(12,3), update_at DATETIME(6), "
        "PRIMARY KEY (shard, id)"
    )
    return (*_both_sides(env, ddl, INT_COLUMNS, ["shard", "id"], rows), rows)


def test_integer_keys_are_checksummed_with_integer_arithmetic(loaded_ints, mysql_conn, pg_url):
    """Both sides' sums equal int_hash's Python reference per partition (no text digest in either
    text), and a deleted row, a cursor moved by 1 us, one moved by exactly 2^31-1 us (the
    old modular hash's blind shift) and a changed key are each found in their partition."""
    wh, target, cfg, rows = loaded_ints
    texts = [mysql_checksum_sql(cfg.name, target, 3), warehouse_checksum_sql(target, "postgres", 3)]
    assert all("SHA2" not in t and "sha256" not in t for t in texts), texts
    checks = verify_table(mysql_conn, wh, target, cfg, PARTITIONS)
    assert all(c.ok for c in checks), [c.describe() for c in checks]
    for c, (_, start, end) in zip(checks, PARTITIONS, strict=True):
        want = sum(
            int_hash.row_hash(
                int_hash.row_digits(
                    [(r["shard"], 2), (r["id"], 3)], int_hash.cursor_digits(r["update_at"], False)
                )
            )
            for r in rows
            if start <= r["update_at"] < end
        )
        assert c.mysql_checksum == c.warehouse_checksum == want
    t = f'"{target.schema}"."{target.table}"'
    by_day = [[r for r in rows if s <= r["update_at"] < e] for _, s, e in PARTITIONS]
    edits = [  # one per partition, each a row that stays inside its window
        f"DELETE FROM {t} WHERE id = {by_day[0][0]['id']} AND shard = {by_day[0][0]['shard']}",
        f"UPDATE {t} SET update_at = update_at + interval '1 microsecond' "
        f"WHERE id = {by_day[1][0]['id']} AND shard = {by_day[1][0]['shard']}",
        f"UPDATE {t} SET id = id + 1 WHERE id = {by_day[2][0]['id']} "
        f"AND shard = {by_day[2][0]['shard']}",
    ]
    for i, sql in enumerate(edits):
        pg(pg_url, sql + " RETURNING id")
        bad = [
            c.partition for c in verify_table(mysql_conn, wh, target, cfg, PARTITIONS) if not c.ok
        ]
        assert bad == [p[0] for p in PARTITIONS[: i + 1]], (sql, bad)
    # exactly 2^31 - 1 microseconds (~35.8 min) later, in the same day
    pg(
        pg_url,
        f"UPDATE {t} SET update_at = update_at - interval '1 microsecond' "
        f"WHERE id = {by_day[1][0]['id']} AND shard = {by_day[1][0]['shard']} RETURNING id",
    )
    assert verify_table(mysql_conn, wh, target, cfg, PARTITIONS[1:2])[0].ok
    moved = by_day[1][0]
    assert moved["update_at"].hour < 20  # the shifted cursor stays in its window
    pg(
        pg_url,
        f"UPDATE {t} SET update_at = update_at + interval '2147483647 microseconds' "
        f"WHERE id = {moved['id']} AND shard = {moved['shard']} RETURNING id",
    )
    assert not verify_table(mysql_conn, wh, target, cfg, PARTITIONS[1:2])[0].ok


def test_integer_checksum_sql_texts():
    """The Redshift text sums the integer hash as DECIMAL(38,0) (its SUM of a BIGINT would
    overflow); PostgreSQL computes the cursor's parts once per row in a subquery."""
    t = LoadTarget("dw", "x", INT_COLUMNS, ("shard", "id"), "update_at", "a.x")
    red = warehouse_checksum_sql(t, "redshift", 1)
    assert "SHA2" not in red and 'AS DECIMAL(38,0))), 0) FROM "dw"."x"' in red, red
    pgsql = warehouse_checksum_sql(t, "postgres", 1)
    assert pgsql.count("date_part('epoch'") == 1 and "OFFSET 0" in pgsql, pgsql
    assert "TO_SECONDS(`update_at`)" in mysql_checksum_sql("a.x", t, 1)
    text_key = LoadTarget("dw", "x", COLUMNS, ("code", "id"), "update_at", "a.x")
    assert "SHA2(" in warehouse_checksum_sql(text_key, "redshift", 1)


def test_equal_tables_are_ok(loaded, mysql_conn):
    wh, target, cfg = loaded
    checks = verify_table(mysql_conn, wh, target, cfg, PARTITIONS)
    assert [c.partition for c in checks] == [p[0] for p in PARTITIONS]
    assert all(c.ok for c in checks), [c.describe() for c in checks]
    assert [c.mysql_rows for c in checks] == [21, 20, 20]
    assert all(c.mysql_checksum == c.warehouse_checksum > 0 for c in checks)
    # one window at a time (no CASE, no GROUP BY): the same counts and checksums
    assert [verify_table(mysql_conn, wh, target, cfg, [p])[0] for p in PARTITIONS] == checks
    # An empty window is ok too (0 rows, checksum 0 on both sides).
    empty = verify_table(
        mysql_conn, wh, target, cfg, [("2030-01-01", datetime(2030, 1, 1), datetime(2030, 1, 2))]
    )
    assert empty == [
        PartitionCheck("2030-01-01", 0, 0, 0, 0, True, datetime(2030, 1, 1), datetime(2030, 1, 2))
    ]


def test_hand_edits_are_detected_per_partition(loaded, mysql_conn, pg_url):
    wh, target, cfg = loaded
    t = f'"{target.schema}"."{target.table}"'
    pg(pg_url, f"DELETE FROM {t} WHERE id = 3 RETURNING id")  # day 1 loses a row
    # day 2: one row's cursor moved by a microsecond, still inside its window
    pg(
        pg_url,
        f"UPDATE {t} SET update_at = update_at + interval '1 microsecond' "
        "WHERE id = 4 RETURNING id",
    )
    checks = verify_table(mysql_conn, wh, target, cfg, PARTITIONS)
    by = {c.partition: c for c in checks}
    d1, d2, d3 = (by[p[0]] for p in PARTITIONS)
    assert not d1.ok and (d1.mysql_rows, d1.warehouse_rows) == (21, 20)
    assert not d2.ok and d2.mysql_rows == d2.warehouse_rows == 20
    assert d2.mysql_checksum != d2.warehouse_checksum
    assert d3.ok
    assert "checksums" in d2.describe() and "21 rows in MySQL, 20" in d1.describe()


def test_mysql_and_the_warehouse_compute_their_sides_at_once(loaded, mysql_conn, pg_url):
    """The two checksum queries overlap (the comparison takes the slower side's time, not
    the sum): with the table locked on both sides, both queries are seen waiting at the
    same moment; once the locks go, the comparison ends right."""
    wh, target, cfg = loaded
    db = mysql_conn.db.decode() if isinstance(mysql_conn.db, bytes) else mysql_conn.db
    mysql_locker = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=db)
    with mysql_locker, psycopg.connect(pg_url) as pg_locker, ThreadPoolExecutor(1) as pool:
        mysql_locker.cursor().execute(f"LOCK TABLES `{cfg.table}` WRITE")
        pg_locker.execute(f'LOCK TABLE "{target.schema}"."{target.table}" IN ACCESS EXCLUSIVE MODE')
        compared = pool.submit(verify_table, mysql_conn, wh, target, cfg, PARTITIONS)
        try:
            both = False
            for _ in range(200):  # up to 20 s
                with mysql_locker.cursor() as cur:
                    cur.execute(
                        "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                        "WHERE ID = %s AND STATE LIKE '%%lock%%'",
                        (mysql_conn.thread_id(),),
                    )
                    mysql_waits = cur.fetchone()[0] == 1
                pg_waits = (
                    pg(
                        pg_url,
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE %s",
                        (f"%{target.table}%",),
                    )[0][0]
                    == 1
                )
                if both := mysql_waits and pg_waits:
                    break
                time.sleep(0.1)
            assert both, "one side's checksum waited for the other's"
        finally:
            mysql_locker.cursor().execute("UNLOCK TABLES")
            pg_locker.rollback()
        checks = compared.result(timeout=60)
    assert [c.mysql_rows for c in checks] == [21, 20, 20]
    assert all(c.ok for c in checks), [c.describe() for c in checks]


def test_missing_target_counts_as_zero_rows(mysql_conn, pg_url, loaded):
    wh, target, cfg = loaded
    gone = LoadTarget(
        "nowhere_schema",
        target.table,
        target.columns,
        target.primary_key,
        target.cursor,
        target.source_name,
    )
    checks = verify_table(mysql_conn, wh, gone, cfg, PARTITIONS[:1])
    assert checks[0].warehouse_rows == 0 and checks[0].mysql_rows == 21 and not checks[0].ok


def test_bad_windows_and_cursor_are_refused(loaded, mysql_conn):
    wh, target, cfg = loaded
    with pytest.raises(ConfigError, match="start >= end"):
        verify_table(mysql_conn, wh, target, cfg, [("x", DAYS[1], DAYS[0])])
    other = TableConfig.from_dict({"name": cfg.name, "cursor": "created_at"})
    with pytest.raises(ConfigError, match="cursor"):
        verify_table(mysql_conn, wh, target, other, PARTITIONS)


_T = LoadTarget("dw", "orders", COLUMNS, ("code", "id"), "update_at", "shop.orders")


def test_checksum_sql_texts():
    assert mysql_checksum_sql("shop.orders", _T, 2) == (
        "SELECT CASE WHEN `update_at` >= %s AND `update_at` < %s THEN 0 "
        "WHEN `update_at` >= %s AND `update_at` < %s THEN 1 END AS `p`, COUNT(*), "
        "COALESCE(SUM(CAST(CONV(SUBSTRING(SHA2(CONCAT(CONVERT(`code` USING utf8mb4), '|', "
        "CAST(`id` AS CHAR), '|', DATE_FORMAT(`update_at`, '%%Y-%%m-%%d %%H:%%i:%%s.%%f')), "
        "256), 1, 15), 16, 10) AS UNSIGNED)), 0) FROM `shop`.`orders` "
        "WHERE `update_at` >= %s AND `update_at` < %s GROUP BY `p`"
    )
    assert warehouse_hash_expr(_T, "postgres") == (
        "('x' || SUBSTR(encode(substring(sha256(convert_to(\"code\" || '|' || "
        "CAST(\"id\" AS VARCHAR) || '|' || TO_CHAR(\"update_at\", 'YYYY-MM-DD HH24:MI:SS.US'), "
        "'UTF8')) from 1 for 8), 'hex'), 1, 15))::BIT(60)::BIGINT"
    )
    assert warehouse_checksum_sql(_T, "redshift", 2) == (
        'SELECT CASE WHEN "update_at" >= %s AND "update_at" < %s THEN 0 '
        'WHEN "update_at" >= %s AND "update_at" < %s THEN 1 END AS "p", COUNT(*), '
        'COALESCE(SUM(CAST(STRTOL(SUBSTRING(SHA2("code" || \'|\' || CAST("id" AS VARCHAR) || '
        "'|' || TO_CHAR(\"update_at\", 'YYYY-MM-DD HH24:MI:SS.US'), 256), 1, 15), 16) "
        "AS DECIMAL(38,0))), 0) "
        'FROM "dw"."orders" WHERE "update_at" >= %s AND "update_at" < %s GROUP BY 1'
    )
    # one window (a sync's usual check): one aggregate row, no CASE and no GROUP BY
    one = warehouse_checksum_sql(_T, "redshift", 1)
    assert one.startswith('SELECT 0 AS "p", COUNT(*), ') and "CASE" not in one
    assert one.endswith('WHERE "update_at" >= %s AND "update_at" < %s')
    assert mysql_checksum_sql("shop.orders", _T, 1).endswith(
        "FROM `shop`.`orders` WHERE `update_at` >= %s AND `update_at` < %s"
    )


def test_boolean_and_date_keys_print_alike():
    cols = [
        SourceColumn("flag", "tinyint", "tinyint(1)"),
        SourceColumn("d", "date", "date"),
        SourceColumn("update_at", "datetime", "datetime"),
    ]
    t = LoadTarget("dw", "x", cols, ("flag", "d"), "update_at", "a.x")
    assert warehouse_hash_expr(t, "redshift").startswith(
        "CAST(STRTOL(SUBSTRING(SHA2(CASE WHEN \"flag\" THEN '1' ELSE '0' END || '|' || "
        "TO_CHAR(\"d\", 'YYYY-MM-DD') || '|' ||"
    )
    assert "IF(`flag` <> 0, '1', '0'), '|', DATE_FORMAT(`d`, '%%Y-%%m-%%d')" in mysql_checksum_sql(
        "a.x", t, 1
    )


def test_sha256_digits_agree_on_every_side(mysql_conn, pg_url):
    """`sha256_hex` is the row hash's digits and reconcile's string-key segments: MariaDB,
    PostgreSQL and Python must print the same digits at every position, for any text
    (non-ASCII included: each hashes the UTF-8 bytes), or a key lands in different segments
    on the two sides and reconcile reports a difference that is not there."""
    texts = ["", "a", "A|1|2026-11-29 00:00:00.000000", "Grüße 東京 🙂", "x" * 300, "a\tb\nc"]
    spans = [(1, 1), (2, 1), (3, 1), (1, 2), (2, 3), (1, 15), (7, 9), (33, 32), (64, 1),
             (1, 64)]
    with mysql_conn.cursor() as cur, psycopg.connect(pg_url) as pg_conn:
        for text in texts:
            digest = hashlib.sha256(text.encode()).hexdigest()
            for start, count in spans:
                want = digest[start - 1 : start - 1 + count]
                cur.execute(f"SELECT {sha256_hex('%s', 'mysql', start, count)}", (text,))
                got_pg = pg_conn.execute(
                    f"SELECT {sha256_hex('%s::text', 'postgres', start, count)}", (text,)
                ).fetchone()[0]
                assert (cur.fetchone()[0], got_pg) == (want, want), (text, start, count)
