"""The demo table generator, against the real MariaDB (its own throwaway schema)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pymysql
import pytest

from s3rs_assets import demo_data
from s3rs_assets.demo_data import (
    MAX_UNSIGNED_BIGINT,
    NAMES,
    SeedInfo,
    create_table,
    group_sizes,
    group_timestamps,
    seed,
)
from s3rs_assets.errors import ConfigError
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT

END = datetime(2026, 3, 8, 9, 30, 15, 250000)
SPAN = timedelta(days=3)
ROWS = 100_000


def _connect(database: str | None = None) -> pymysql.connections.Connection:
    return pymysql.connect(
        host=MYSQL_HOST,
        port=MYSQL_PORT,
        user="root",
        password="",
        database=database,
        charset="utf8mb4",
        autocommit=True,
    )


@pytest.fixture(scope="module")
def schema() -> Iterator[str]:
    name = f"s3rs_demo_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with _connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    with _connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(scope="module")
def conn(schema: str) -> Iterator[pymysql.connections.Connection]:
    c = _connect()  # deliberately no default database: everything must be qualified
    yield c
    c.close()


@pytest.fixture(scope="module")
def seeded(conn, schema: str) -> SeedInfo:
    create_table(conn, schema, "demo")
    return seed(conn, schema, "demo", ROWS, end=END, span=SPAN)


def q(conn, sql: str, args=None) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def row(conn, schema: str, id_: int) -> dict:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{schema}`.demo WHERE id = %s", (id_,))
        return cur.fetchone()


def test_table_has_the_22_columns(conn, schema, seeded):
    cols = q(
        conn,
        "SELECT column_name, column_type, is_nullable FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = 'demo' ORDER BY ordinal_position",
        (schema,),
    )
    assert [c[0] for c in cols] == list(demo_data.COLUMNS)
    types = {c[0]: c[1] for c in cols}
    assert types["partner_ref"] == "bigint(20) unsigned"
    assert types["amount"] == "decimal(18,4)"
    assert types["update_at"] == "datetime(6)"
    assert types["paid_at"] == "timestamp(6)"
    assert types["is_paid"] == "tinyint(1)"
    (charset,) = q(
        conn,
        "SELECT c.character_set_name FROM information_schema.tables t JOIN"
        " information_schema.collation_character_set_applicability c"
        " ON c.collation_name = t.table_collation"
        " WHERE t.table_schema = %s AND t.table_name = 'demo'",
        (schema,),
    )[0]
    assert charset == "utf8mb4"
    indexes = {r[2] for r in q(conn, f"SHOW INDEX FROM `{schema}`.demo")}
    assert indexes == {"PRIMARY", "idx_update_at"}


def test_counts_and_id_range(conn, schema, seeded):
    assert seeded.rows == ROWS
    assert (seeded.first_id, seeded.last_id) == (1, ROWS)
    count, lo, hi = q(conn, f"SELECT COUNT(*), MIN(id), MAX(id) FROM `{schema}`.demo")[0]
    assert (count, lo, hi) == (ROWS, 1, ROWS)


def test_ties_within_bounds(conn, schema, seeded):
    sizes = [r[0] for r in q(conn, f"SELECT COUNT(*) FROM `{schema}`.demo GROUP BY update_at")]
    assert len(sizes) == seeded.distinct_update_at
    assert min(sizes) >= 50 and max(sizes) <= 400
    assert len(set(sizes)) > 50  # the group size really varies


def test_update_at_spans_the_window(conn, schema, seeded):
    lo, hi = q(conn, f"SELECT MIN(update_at), MAX(update_at) FROM `{schema}`.demo")[0]
    assert (lo, hi) == (END - SPAN, END) == (seeded.min_update_at, seeded.max_update_at)
    # evenly spread: every 6 hours of the 3 days holds some rows
    buckets = q(
        conn,
        f"SELECT COUNT(DISTINCT FLOOR(TIMESTAMPDIFF(SECOND, %s, update_at) / 21600))"
        f" FROM `{schema}`.demo",
        (END - SPAN,),
    )[0][0]
    assert buckets == 13  # 12 six-hour slices plus the single `end` instant
    micro, whole = q(
        conn,
        f"SELECT SUM(MICROSECOND(update_at) <> 0), SUM(MICROSECOND(update_at) = 0)"
        f" FROM `{schema}`.demo",
    )[0]
    assert micro > 0 and whole > 0
    (bad,) = q(conn, f"SELECT COUNT(*) FROM `{schema}`.demo WHERE created_at > update_at")[0]
    assert bad == 0


def test_group_timestamps_are_strictly_increasing():
    for groups in (1, 2, 3, 500, 4500):
        ts = group_timestamps(groups, END, SPAN)
        assert len(ts) == groups and ts[-1] == END
        assert all(a < b for a, b in zip(ts, ts[1:], strict=False))
        if groups > 1:
            assert ts[0] == END - SPAN


@pytest.mark.parametrize("rows", [1, 49, 50, 400, 401, 449, 450, 12_345, 1_000_000])
def test_group_sizes(rows):
    sizes = group_sizes(rows, 50, 400)
    assert sum(sizes) == rows
    if rows >= 50:
        assert all(50 <= s <= 400 for s in sizes), sizes[-3:]
    assert group_sizes(rows, 50, 400) == sizes  # deterministic


def test_group_sizes_rejects_bad_bounds():
    with pytest.raises(ValueError):
        group_sizes(10, 0, 5)
    with pytest.raises(ValueError):
        group_sizes(10, 6, 5)


def test_utf8mb4_and_null_values_read_back_intact(conn, schema, seeded):
    names = {r[0] for r in q(conn, f"SELECT DISTINCT receiver_name FROM `{schema}`.demo")}
    assert names == {*NAMES, None}
    assert "𠮷野家 配送" in names and "Ça va 🚚 Express" in names and "王小明" in names
    # exact round trip of 4-byte characters, compared on the server too
    (n,) = q(
        conn, f"SELECT COUNT(*) FROM `{schema}`.demo WHERE receiver_name = %s", ("🚚📦 Lieferung",)
    )[0]
    assert n > 0
    cities = {r[0] for r in q(conn, f"SELECT DISTINCT receiver_city FROM `{schema}`.demo")}
    assert {"São Paulo", "深圳", "Tōkyō"} <= cities
    nulls = q(
        conn,
        "SELECT SUM(partner_ref IS NULL), SUM(receiver_name IS NULL), SUM(address IS NULL),"
        " SUM(fee IS NULL), SUM(weight_kg IS NULL), SUM(attrs IS NULL),"
        " SUM(delivery_date IS NULL), SUM(delivery_window IS NULL), SUM(paid_at IS NULL),"
        f" SUM(remark IS NULL), SUM(remark = '') FROM `{schema}`.demo",
    )[0]
    assert all(v > 0 for v in nulls), nulls


def test_text_with_control_characters(conn, schema, seeded):
    remarks = {r[0] for r in q(conn, f"SELECT DISTINCT remark FROM `{schema}`.demo WHERE id <= 8")}
    assert remarks == {
        None,
        "",
        "tab\tseparated\tvalue",
        "line one\nline two\r\nline three",
        "back\\slash C:\\temp\\\\x \\N",
        'it\'s "quoted" `twice`',
        "delivered ok #6",
        "comma, semicolon; pipe| caret^ 🚚",
    }
    long_address = row(conn, schema, 500)["address"]
    assert len(long_address) > 3000


def test_numeric_edge_values(conn, schema, seeded):
    assert row(conn, schema, 997)["partner_ref"] == MAX_UNSIGNED_BIGINT
    assert row(conn, schema, 97)["partner_ref"] == MAX_UNSIGNED_BIGINT - 97
    assert row(conn, schema, 1009)["amount"] == Decimal("99999999999999.9999")
    assert row(conn, schema, 1013)["amount"] == Decimal("-99999999999999.9999")
    assert row(conn, schema, 1019)["amount"] == 0
    assert row(conn, schema, 1021)["fee"] == Decimal("9999999999.99")
    assert row(conn, schema, 2017)["weight_kg"] == 1.5e300
    assert row(conn, schema, 2027)["weight_kg"] == 1e-300
    assert row(conn, schema, 2003)["quantity"] == 32767
    assert row(conn, schema, 2011)["quantity"] == -32768
    assert row(conn, schema, 3001)["status"] == 127
    assert row(conn, schema, 3011)["status"] == -128
    assert row(conn, schema, 4001)["delivery_date"] == date(9999, 12, 31)
    assert row(conn, schema, 4003)["delivery_date"] == date(1970, 1, 1)
    assert row(conn, schema, 29)["delivery_window"] == timedelta(hours=23, minutes=59, seconds=59)
    (negative, ge_max) = q(
        conn,
        f"SELECT SUM(amount < 0), SUM(partner_ref >= 18446744073709551000) FROM `{schema}`.demo",
    )[0]
    assert negative > ROWS // 20 and ge_max > 100
    assert {r[0] for r in q(conn, f"SELECT DISTINCT is_paid FROM `{schema}`.demo")} == {0, 1}


def test_json_and_temporal_columns(conn, schema, seeded):
    r = row(conn, schema, 5)
    attrs = json.loads(r["attrs"])
    assert attrs == {
        "channel": "partner",
        "priority": 2,
        "fragile": False,
        "tags": ["a", "t5"],
        "note": '🚚 fast "express"',
    }
    assert row(conn, schema, 9)["attrs"] is None
    assert r["created_at"] <= r["update_at"]
    assert isinstance(r["paid_at"], datetime)
    (bad_json,) = q(
        conn,
        f"SELECT COUNT(*) FROM `{schema}`.demo WHERE attrs IS NOT NULL AND NOT JSON_VALID(attrs)",
    )[0]
    assert bad_json == 0


def test_create_table_keeps_or_drops(conn, schema):
    create_table(conn, schema, "keep")
    seed(conn, schema, "keep", 500, end=END)
    create_table(conn, schema, "keep")  # IF NOT EXISTS: rows stay
    assert q(conn, f"SELECT COUNT(*) FROM `{schema}`.keep")[0][0] == 500
    create_table(conn, schema, "keep", drop=True)
    assert q(conn, f"SELECT COUNT(*) FROM `{schema}`.keep")[0][0] == 0


def test_append_with_first_id_and_determinism(conn, schema):
    for t in ("det_a", "det_b"):
        create_table(conn, schema, t, drop=True)
        seed(conn, schema, t, 3000, end=END, span=timedelta(hours=6))
    info = seed(
        conn,
        schema,
        "det_a",
        2000,
        end=END + timedelta(hours=1),
        span=timedelta(minutes=30),
        first_id=3001,
    )
    assert (info.first_id, info.last_id, info.rows) == (3001, 5000, 2000)
    assert q(conn, f"SELECT COUNT(*), MAX(id) FROM `{schema}`.det_a")[0] == (5000, 5000)
    # the first 3000 rows of both tables are identical, column by column
    cols = ", ".join(demo_data.COLUMNS)
    digest = (
        "SELECT SUM(CRC32(CONCAT_WS('|', {cols}, ISNULL(partner_ref), ISNULL(remark))))"
        " FROM `{schema}`.{t} WHERE id <= 3000"
    )
    a = q(conn, digest.format(cols=cols, schema=schema, t="det_a"))[0][0]
    b = q(conn, digest.format(cols=cols, schema=schema, t="det_b"))[0][0]
    assert a == b
    lo, hi = q(
        conn, f"SELECT MIN(update_at), MAX(update_at) FROM `{schema}`.det_a WHERE id > 3000"
    )[0]
    assert (lo, hi) == (END + timedelta(minutes=30), END + timedelta(hours=1))


def test_aware_end_and_session_time_zone_restored(conn, schema):
    create_table(conn, schema, "tz", drop=True)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+08:00'")
    end = datetime(2026, 3, 8, 17, 0, tzinfo=timezone(timedelta(hours=8)))
    info = seed(conn, schema, "tz", 200, end=end, span=timedelta(hours=1))
    assert info.max_update_at == datetime(2026, 3, 8, 9, 0)  # UTC, naive
    assert q(conn, "SELECT @@session.time_zone")[0][0] == "+08:00"
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    assert q(conn, f"SELECT MAX(update_at) FROM `{schema}`.tz")[0][0] == datetime(2026, 3, 8, 9, 0)


def test_bad_input_is_rejected(conn, schema):
    with pytest.raises(ConfigError):
        create_table(conn, schema, "demo`; DROP TABLE x; --")
    with pytest.raises(ConfigError):
        seed(conn, "no such schema", "demo", 10, end=END)
    with pytest.raises(ValueError):
        seed(conn, schema, "demo", 0, end=END)
    with pytest.raises(ValueError):
        seed(conn, schema, "demo", 10, end=END, span=timedelta(0))


def test_seed_200k_timed(conn, schema, capsys):
    create_table(conn, schema, "timed", drop=True)
    started = time.perf_counter()
    info = seed(conn, schema, "timed", 200_000, end=datetime.now(UTC) - timedelta(minutes=15))
    took = time.perf_counter() - started
    with capsys.disabled():
        print(
            f"\n[demo_data] seeded {info.rows:,} rows in {took:.2f} s "
            f"({info.rows / took:,.0f} rows/s, {info.distinct_update_at} timestamps)"
        )
    assert q(conn, f"SELECT COUNT(*) FROM `{schema}`.timed")[0][0] == 200_000
