"""The key-mode arithmetic hash (int_hash.py): the same number in Python, MySQL
and PostgreSQL (and the Redshift text in test_reconcile_sql), and no blind spot at a round
shift (issue 16 item 11: the old hash missed every cursor moved by exactly 2^31-1 us)."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta

import psycopg
import pytest

from s3rs_assets import int_hash as hashing
from s3rs_assets.load import LoadTarget
from s3rs_assets.reconcile.sql import TableSQL
from s3rs_assets.types import SourceColumn
from s3rs_assets_tests.reconcile_fixtures import Env, copy_to_warehouse, make_env, new_table

P = 2**31 - 1
#: shifts (microseconds) a bug or a clock could plausibly apply; the first was blind
SHIFTS = [P, 2 * P, 2**29, 2**30, 2**31, 2**32, 1, 1_000_000, 60_000_000, 3_600_000_000,
          86_400_000_000, 7 * 86_400_000_000, 1_000_000_000, 10**12, -P, -3_600_000_000]


@pytest.fixture
def env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource) -> Env:
    return make_env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource)


def old_hash(key: int, micros: int) -> int:
    """The hash before: key and cursor reduced modulo 2^31-1 first (kept to show the
    blind spot the new one does not have)."""
    k, m = key % P, micros % P
    x, y = (k * 48271 + m) % P, (k * 69621 + m * 16807 + 1) % P
    return x * x % P + 2**31 * (y * y % P)


EPOCH = datetime(1970, 1, 1)


def micros(t: datetime) -> int:
    d = t - EPOCH
    return (d.days * 86400 + d.seconds) * 10**6 + d.microseconds


def new_hash(key: int, us: int, key_digits: int = 3) -> int:
    cursor = EPOCH + timedelta(microseconds=us)
    return hashing.row_hash(
        hashing.row_digits([(key, key_digits)], hashing.cursor_digits(cursor, False))
    )


def _rows(n: int, seed: int) -> list[tuple[int, int]]:
    """(key, cursor micros): small, large and negative keys, cursors from 1000 to 9998."""
    rnd = random.Random(seed)
    lo, hi = micros(datetime(1000, 1, 1)), micros(datetime(9998, 1, 1))
    keys = [rnd.randrange(-2**63, 2**63) for _ in range(n // 4)]
    keys += [rnd.randrange(0, 10**6) for _ in range(n // 4)]
    keys += [rnd.randrange(-10**6, 0) for _ in range(n // 4)]
    keys += list(range(n - len(keys)))
    return [(k, rnd.randrange(lo, hi)) for k in keys]


def test_the_old_hash_was_blind_at_2_31_minus_1_and_the_new_one_is_not():
    rows = _rows(10_000, 1)
    assert sum(old_hash(k, m) == old_hash(k, m + P) for k, m in rows) == 10_000
    for shift in SHIFTS:
        same = sum(new_hash(k, m) == new_hash(k, m + shift) for k, m in rows)
        assert same == 0, shift


def test_random_shifts_and_key_changes_never_collide():
    rnd = random.Random(7)
    rows = _rows(4_000, 2)
    for _ in range(25):
        shift = rnd.choice([rnd.randrange(1, 2**40), rnd.randrange(1, 10**6) * 10**6,
                            rnd.randrange(1, 2**20)]) * rnd.choice([1, -1])
        assert all(new_hash(k, m) != new_hash(k, m + shift) for k, m in rows), shift
    # keys moved by round numbers (P, powers of two, 10^k) with the cursor kept
    for delta in (P, 2**29, 2**31, 2**32, 2**58, 10**6, 10**9):
        assert all(new_hash(k, m) != new_hash(k + delta, m) for k, m in rows
                   if -2**63 <= k + delta < 2**63), delta
    # two rows swapping cursors change the sum
    pairs = list(zip(rows[::2], rows[1::2], strict=False))
    for (k1, m1), (k2, m2) in pairs:
        assert new_hash(k1, m1) + new_hash(k2, m2) != new_hash(k1, m2) + new_hash(k2, m1)


#: MySQL key type -> values; cursor type -> values (NULL and zero dates added)
KEYS = {
    "bigint": [-(2**63), 2**63 - 1, -1, 0, P, -P, 2**29, -(2**29), 2**58, -(2**58) - 1],
    "bigint unsigned": [2**64 - 1, 0, 2**63, P, 2**58 - 1],
    "int": [-(2**31), 2**31 - 1, 5, -(2**29) - 3],
    "int unsigned": [2**32 - 1, 0, 2**29],
    "mediumint": [-(2**23), 2**23 - 1],
    "smallint unsigned": [65535, 0],
    "tinyint": [-128, 127],
}
CURSORS = {
    "datetime(6)": ["1000-01-01 00:00:00", "1960-05-01 00:00:00.5", "1969-12-31 23:59:59.999999",
                    "1970-01-01 00:00:00", "9999-12-31 23:59:59.999999",
                    "2024-03-10 02:30:00.000001"],
    "datetime": ["1000-01-01 00:00:00", "9999-12-31 23:59:59", "2025-01-01 00:00:00"],
    "datetime(3)": ["1955-01-01 00:00:00.123", "2025-01-01 00:00:00.999"],
    "timestamp(6)": ["1970-01-01 00:00:01", "2038-01-19 03:14:07.999999",
                     "2024-03-10 02:30:00.123456"],
    "date": ["1000-01-01", "1969-12-31", "9999-12-31", "2024-02-29"],
}
ZERO = {"date": ["0000-00-00", "2024-02-00"], "datetime(6)": ["0000-00-00 00:00:00",
        "2024-00-15 10:00:00"], "datetime": ["2024-02-00 10:00:00"], "datetime(3)": [],
        "timestamp(6)": ["0000-00-00 00:00:00"]}


def _reference(key_type: str, key: int, cursor: str | None, is_date: bool) -> int:
    data_type = key_type.split()[0]
    if cursor is None or cursor.startswith("0000") or "-00" in cursor:
        value = None
    else:
        value = datetime.fromisoformat(cursor)
    digits = hashing.row_digits([(key, hashing.digits_for(data_type))],
                                hashing.cursor_digits(value, is_date))
    return hashing.row_hash(digits)


@pytest.mark.parametrize("cursor_type", list(CURSORS))
@pytest.mark.parametrize("key_type", list(KEYS))
def test_python_mysql_and_postgres_compute_the_same_number(env, key_type, cursor_type):
    env.mysql_exec("SET SESSION sql_mode = ''")  # zero dates below
    cfg = new_table(env, f"id {key_type} NOT NULL PRIMARY KEY, update_at {cursor_type} NULL")
    cursors = [*CURSORS[cursor_type], None, *ZERO[cursor_type]]
    expected = {}
    for i, key in enumerate(KEYS[key_type]):
        c = cursors[i % len(cursors)]
        env.mysql_exec(f"INSERT INTO `{cfg.table}` VALUES (%s, %s)", (key, c))
        stored = env.mysql_exec(f"SELECT CAST(update_at AS CHAR) FROM `{cfg.table}` "
                                "WHERE id = %s", (key,))[0][0]
        expected[str(key)] = _reference(key_type, key, stored, cursor_type == "date")
    target = copy_to_warehouse(env, cfg)
    mside = TableSQL("mysql", cfg.schema, cfg.table, target, "key")
    wside = TableSQL("postgres", target.schema, target.table, target, "key")
    assert mside.arithmetic and wside.arithmetic
    mine = env.mysql_exec(f"SELECT CAST(id AS CHAR), {mside.row_hash()} FROM `{cfg.table}`")
    theirs = env.pg(f'SELECT CAST(id AS VARCHAR), {wside.row_hash()} '
                    f'FROM "{target.schema}"."{target.table}"')
    assert {k: int(h) for k, h in mine} == expected
    assert {k: int(h) for k, h in theirs} == expected
    assert env.reconcile(cfg, threshold=2).total == 0


def test_composite_integer_key_is_arithmetic_and_matches(env):
    cfg = new_table(env, "a INT NOT NULL, b BIGINT UNSIGNED NOT NULL, update_at DATETIME(6), "
                         "PRIMARY KEY (a, b)")
    rows = [(-5, 2**64 - 1, datetime(1969, 7, 20, 20, 17, 40)), (7, 0, None),
            (2**31 - 1, 2**33, datetime(2025, 3, 1, 8, 0, 0, 1))]
    with env.mysql_conn.cursor() as cur:
        cur.executemany(f"INSERT INTO `{cfg.table}` VALUES (%s, %s, %s)", rows)
    target = copy_to_warehouse(env, cfg)
    mside = TableSQL("mysql", cfg.schema, cfg.table, target, "key")
    wside = TableSQL("postgres", target.schema, target.table, target, "key")
    assert mside.arithmetic and wside.arithmetic
    want = {f"{a}|{b}": hashing.row_hash(
        hashing.row_digits([(a, 2), (b, 3)], hashing.cursor_digits(c, False))) for a, b, c in rows}
    mine = env.mysql_exec(f"SELECT CONCAT(a, '|', b), {mside.row_hash()} FROM `{cfg.table}`")
    theirs = env.pg(f"SELECT a || '|' || b, {wside.row_hash()} "
                    f'FROM "{target.schema}"."{target.table}"')
    assert {k: int(h) for k, h in mine} == want == {k: int(h) for k, h in theirs}


def _target(name: str, cursor: str) -> LoadTarget:
    cols = [SourceColumn("id", "bigint", "bigint", nullable=False),
            SourceColumn("c", "datetime", "datetime(6)"),
            SourceColumn("c2", "datetime", "datetime(6)")]
    return LoadTarget("public", name, cols, ("id",), cursor, f"x.{name}")


@pytest.mark.parametrize("shift", [P, 2**29, 3_600_000_000, 86_400_000_000])
def test_no_shift_collides_in_either_database(env, shift):
    """10,000 rows, each with its cursor and the cursor moved by `shift`: no row's hash is
    the same, computed by MySQL and by PostgreSQL themselves."""
    name = f"rc_shift_{uuid.uuid4().hex[:8]}"
    rnd = random.Random(shift)
    base = datetime(1900, 1, 1)
    rows = []
    for i in range(10_000):
        c = base + timedelta(microseconds=rnd.randrange(0, 4 * 10**15))
        rows.append((rnd.choice([i, -i, i * P, 2**62 - i]), c, c + timedelta(microseconds=shift)))
    env.mysql_exec(f"CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, c DATETIME(6), "
                   "c2 DATETIME(6))")
    with env.mysql_conn.cursor() as cur:
        cur.executemany(f"INSERT IGNORE INTO `{name}` VALUES (%s, %s, %s)", rows)
    env.pg(f'CREATE TABLE public."{name}" (id BIGINT PRIMARY KEY, c TIMESTAMP, c2 TIMESTAMP)')
    with env.mysql_conn.cursor() as cur:
        cur.execute(f"SELECT id, c, c2 FROM `{name}`")
        stored = cur.fetchall()
    with (
        psycopg.connect(env.pg_url, autocommit=True) as pg,
        pg.cursor() as cur,
        cur.copy(f'COPY public."{name}" (id, c, c2) FROM STDIN') as cp,
    ):
        for r in stored:
            cp.write_row(r)
    try:
        for side, run, table in (("mysql", env.mysql_exec, f"`{name}`"),
                                 ("postgres", env.pg, f'public."{name}"')):
            a = TableSQL(side, "x", name, _target(name, "c"), "key")  # type: ignore[arg-type]
            b = TableSQL(side, "x", name, _target(name, "c2"), "key")  # type: ignore[arg-type]
            (n, same), = run(f"SELECT COUNT(*), SUM(CASE WHEN {a.row_hash()} = {b.row_hash()} "
                             f"THEN 1 ELSE 0 END) FROM {table}")
            assert int(n) == len(stored) and int(same) == 0, (side, shift)
    finally:
        env.mysql_exec(f"DROP TABLE `{name}`")
        env.pg(f'DROP TABLE public."{name}"')


def test_reconcile_finds_a_cursor_moved_by_2_31_minus_1_us_and_a_key_moved_by_it(env):
    cfg = new_table(env, "id BIGINT NOT NULL PRIMARY KEY, update_at DATETIME(6) NOT NULL")
    t0 = datetime(2025, 3, 1, 8)
    with env.mysql_conn.cursor() as cur:
        cur.executemany(f"INSERT INTO `{cfg.table}` VALUES (%s, %s)",
                        [(i, t0 + timedelta(seconds=i)) for i in range(100)])
    copy_to_warehouse(env, cfg)
    env.mysql_exec(f"UPDATE `{cfg.table}` SET update_at = update_at - INTERVAL {P} MICROSECOND "
                   "WHERE id = 40")
    report = env.reconcile(cfg, threshold=1000)
    assert report.counts() == {"missing": 0, "extra": 0, "differs": 1}
    # a key replaced by key + p with the same cursor: the count is unchanged
    env.mysql_exec(f"UPDATE `{cfg.table}` SET update_at = update_at + INTERVAL {P} MICROSECOND "
                   "WHERE id = 40")
    env.mysql_exec(f"UPDATE `{cfg.table}` SET id = id + {P} WHERE id = 60")
    report = env.reconcile(cfg, threshold=1000)
    assert report.counts() == {"missing": 1, "extra": 1, "differs": 0}
