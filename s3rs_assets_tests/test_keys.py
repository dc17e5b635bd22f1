"""Primary keys that are not integers: BINARY(16) UUIDs and VARCHAR keys in binary and
case-insensitive collations.

A BINARY key value is rarely UTF-8, so the watermark record stores it tagged and
hex-encoded; the keyset predicates get it back as bytes (a hex literal), and MySQL orders
and compares every key in its own collation, so chunk boundaries fall anywhere without
losing or repeating a row.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import psycopg
import pytest

from s3rs_assets.cursor import after, literal, position_token
from s3rs_assets.io_manager import store_for
from s3rs_assets.source import describe, plan_chunk
from s3rs_assets.watermark import PartitionState, Position, WatermarkRecord
from s3rs_assets_tests.helpers import resources, sync, table_cfg

DAY = datetime(2025, 3, 4)
UPPER = datetime(2025, 3, 5)
# a BINARY(16) UUID that is not UTF-8, and one that is all zero bytes
ODD = [bytes.fromhex("ff00fe01c3" + "00" * 11), bytes(16)]


def _uuids(n: int) -> list[bytes]:
    return ODD + [uuid.UUID(int=((i + 1) * 0x9E3779B97F4A7C15) % 2**128).bytes
                   for i in range(n - 2)]


@pytest.fixture
def conn(dropping_conn):
    return dropping_conn


def _make(conn, name: str, key_ddl: str, rows: list[tuple]) -> None:
    """(key, update_at, note) rows; few distinct update_at values (ties)."""
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        cur.execute(f"CREATE TABLE `{name}` (k {key_ddl} NOT NULL PRIMARY KEY, "
                    "update_at DATETIME(6) NOT NULL, note VARCHAR(20), KEY (update_at)) "
                    "DEFAULT CHARSET=utf8mb4")
        cur.executemany(f"INSERT INTO `{name}` VALUES (%s, %s, %s)", rows)
    conn.made.append(name)


def _walk(conn, src, chunk: int) -> list:
    """Plan chunk after chunk from a position that went through the record's JSON each time
    (as a checkpoint does), reading each sub-range; the keys in read order."""
    pos = Position(c=DAY)
    seen: list = []
    with conn.cursor() as cur:
        while (plan := plan_chunk(conn, src, pos, UPPER, chunk, 2)) is not None:
            for r in plan.ranges:
                cur.execute(f"SELECT k FROM {src.qualified} WHERE {r.predicate(src.keys)}")
                seen.extend(row[0] for row in cur.fetchall())
            rec = WatermarkRecord.new(src.table)
            rec.partitions["p"] = PartitionState(window_start=DAY, window_end=UPPER,
                                                 cursor=plan.end)
            pos = WatermarkRecord.from_json(rec.refresh().to_json()).partitions["p"].cursor
            assert pos == plan.end, "the checkpoint reads back exactly"
    return seen


def _mysql_order(conn, name: str) -> list:
    with conn.cursor() as cur:
        cur.execute(f"SELECT k FROM `{name}` ORDER BY update_at, k")
        return [r[0] for r in cur.fetchall()]


def test_binary_key_positions_are_stored_tagged_and_read_back_as_bytes():
    pos = Position(c=DAY, pk=[ODD[0], 7])
    rec = WatermarkRecord.new("db.t")
    rec.partitions["p"] = PartitionState(window_start=DAY, window_end=UPPER, cursor=pos)
    text = rec.refresh().to_json()  # raised "invalid utf-8" before
    assert '{"$hex":"ff00fe01c3' in text
    back = WatermarkRecord.from_json(text).partitions["p"].cursor
    assert back.pk == [ODD[0], 7] and isinstance(back.pk[0], bytes)
    assert position_token(back) == position_token(pos)
    assert literal(ODD[0]) == "X'ff00fe01c30000000000000000000000'"
    assert "X'ff00fe01c3" in after(back, describe_keys())
    assert "0xff00fe01c3" in str(back)


def describe_keys():
    from s3rs_assets.cursor import KeyColumns

    return KeyColumns("update_at", ("k",))


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_binary16_keys_walk_exactly_across_chunk_boundaries(conn, mysql_db, chunk):
    keys = _uuids(40)
    rows = [(k, DAY + timedelta(hours=1 + i % 3), f"n{i}") for i, k in enumerate(keys)]
    _make(conn, "bin_walk", "BINARY(16)", rows)
    src = describe(conn, table_cfg(mysql_db, "bin_walk"))
    seen = _walk(conn, src, chunk)
    assert seen == _mysql_order(conn, "bin_walk"), "MySQL's order, each key once"
    assert sorted(seen) == sorted(keys)


# utf8mb4_bin orders 'B' < 'a' and tells 'a' from 'A'; general_ci orders 'a' < 'B' and
# cannot hold both 'a' and 'A' in one key. Both walks must follow MySQL, not Python.
COLLATED = {
    "utf8mb4_bin": ["a", "A", "b", "B", "á", "Á", "z", "Z", "_", "ä"],
    "utf8mb4_general_ci": ["a", "B", "c", "D", "é", "F", "_", "z", "Ö", "x"],
}


@pytest.mark.parametrize("collation", list(COLLATED))
@pytest.mark.parametrize("chunk", [1, 2, 4])
def test_varchar_keys_walk_in_the_collation_order(conn, mysql_db, collation, chunk):
    keys = COLLATED[collation]
    rows = [(k, DAY + timedelta(hours=1 + i % 2), f"n{i}") for i, k in enumerate(keys)]
    name = f"coll_{collation.split('_')[1]}"
    _make(conn, name, f"VARCHAR(8) CHARACTER SET utf8mb4 COLLATE {collation}", rows)
    src = describe(conn, table_cfg(mysql_db, name))
    seen = _walk(conn, src, chunk)
    assert seen == _mysql_order(conn, name)
    assert sorted(seen) == sorted(keys) and len(set(seen)) == len(keys)


def _pg(pg_url: str, table: str) -> list[tuple]:
    with psycopg.connect(pg_url.replace("postgres:@", "postgres@")) as c:
        rows = c.execute(f'SELECT k, update_at, note FROM "dw_keys"."{table}"').fetchall()
    return sorted((bytes(k) if isinstance(k, memoryview | bytes) else k, t, n)
                  for k, t, n in rows)


def test_binary_and_collated_keys_sync_exactly_end_to_end(conn, mysql_db, mysql_url, pg_url,
                                                           s3_resource, spark_resource):
    tables = {
        "e2e_bin": ("BINARY(16)", _uuids(30)),
        "e2e_cs": ("VARCHAR(8) COLLATE utf8mb4_bin", COLLATED["utf8mb4_bin"]),
        "e2e_ci": ("VARCHAR(8) COLLATE utf8mb4_general_ci", COLLATED["utf8mb4_general_ci"]),
    }
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    for name, (ddl, keys) in tables.items():
        rows = [(k, DAY + timedelta(hours=1 + i % 3), f"n{i}") for i, k in enumerate(keys)]
        _make(conn, name, ddl, rows)
        cfg = table_cfg(mysql_db, name, chunk_rows=3, parallelism=2,
                        target=f"dw_keys.{name}")
        result = sync(cfg, res, partition=DAY.strftime("%Y-%m-%d"))
        failed = [c.description for c in result.get_asset_check_evaluations() if not c.passed]
        assert not failed, f"{name}: {failed}"
        assert _pg(pg_url, name) == sorted(rows), f"{name}: every row once, exactly"
        rec = store_for(s3_resource).read(cfg.name, fresh=True)
        assert rec.mysql_rows_extracted == rec.redshift_rows_loaded == len(rows)
        last = rec.partitions[DAY.strftime("%Y-%m-%d")].cursor
        assert last.pk == [_mysql_order(conn, name)[-1]]
