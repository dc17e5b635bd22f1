"""Key values of every type compare equal after a JSON round trip of the record.

A run holds a position's key values as pymysql returns them (date, datetime, Decimal,
timedelta, bytes); the record read back from S3 must hold the same values, or the
checkpoint's compare-and-swap sees another run's progress (WatermarkConflict, issue 16
item 7). Records written before the tags (schema 2: untagged strings) still load and their
positions equal the run's own (`key_codec.canonical`).
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from decimal import Decimal

import psycopg
import pytest

from s3rs_assets import key_codec
from s3rs_assets.cursor import literal, position_token
from s3rs_assets.watermark import SCHEMA_VERSION, PartitionState, Position, WatermarkRecord
from s3rs_assets_tests.helpers import resources, sync, table_cfg

VALUES = [
    7,
    -(2**63),
    2**64 - 1,
    "plain",
    "2026-01-01",  # a VARCHAR key that looks like a date stays a string
    "",
    "ünïcødé 😀",
    b"\x00\xff\x10",
    b"",
    date(2026, 1, 1),
    date(1, 1, 1),
    datetime(2026, 1, 1, 10, 0, 0),
    datetime(9999, 12, 31, 23, 59, 59, 999999),
    datetime(2026, 1, 1, 10, 0, 0, 5),
    Decimal("12.3400"),
    Decimal("-99999999999999999999.99999999999999999"),
    Decimal("0.0000"),
    Decimal("0"),
    timedelta(hours=-838, minutes=-59, seconds=-59),
    timedelta(hours=838, minutes=59, seconds=59),
    timedelta(microseconds=1),
    timedelta(0),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_each_type_round_trips_through_the_record(value):
    pos = Position(c=datetime(2026, 1, 1), pk=[value, 1])
    rec = WatermarkRecord.new("db.t")
    rec.partitions["2026-01-01"] = PartitionState(
        window_start=datetime(2026, 1, 1), window_end=datetime(2026, 1, 2), cursor=pos)
    back = WatermarkRecord.from_json(rec.to_json()).partitions["2026-01-01"].cursor
    assert back.pk == [value, 1] and type(back.pk[0]) is type(value)
    assert back.key() == pos.key()
    assert position_token(back) == position_token(pos)
    assert key_codec.decode(json.loads(json.dumps(key_codec.encode(value)))) == value


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_a_schema_2_record_still_loads_and_compares_equal(value):
    """Schema 2 wrote the value as pydantic's JSON: a string for date, datetime, Decimal,
    timedelta (bytes were tagged already). It loads as that string and compares equal."""
    from pydantic import BaseModel

    class Old(BaseModel):
        pk: list

    old = json.loads(Old(pk=[key_codec.encode(value) if isinstance(value, bytes) else value])
                     .model_dump_json())["pk"]
    pos = Position(c=datetime(2026, 1, 1), pk=[value])
    doc = json.loads(WatermarkRecord.new("db.t").to_json())
    doc["schema_version"] = 2
    doc["partitions"] = {"2026-01-01": {
        "status": "partial", "window_start": "2026-01-01T00:00:00",
        "window_end": "2026-01-02T00:00:00", "cursor": {"c": "2026-01-01T00:00:00", "pk": old}}}
    rec = WatermarkRecord.from_json(json.dumps(doc))
    assert rec.schema_version == SCHEMA_VERSION
    back = rec.partitions["2026-01-01"].cursor
    assert back.key() == pos.key()
    assert position_token(back) == position_token(pos)


def test_tags_refuse_garbage():
    for bad in ({"$date": "2026-13-01"}, {"$decimal": "x"}, {"$hex": "zz"}, {"$time": "1"},
                {"$datetime": 5}):
        with pytest.raises(ValueError):
            key_codec.decode(bad)
    assert key_codec.decode({"$other": "x"}) == {"$other": "x"}


def test_time_literal_keeps_sign_and_microseconds(mysql_conn):
    with mysql_conn.cursor() as cur:
        for td in (timedelta(hours=-838, minutes=-59, seconds=-59), timedelta(microseconds=1),
                   timedelta(days=1, seconds=5)):
            cur.execute(f"SELECT CAST({literal(td)} AS TIME(6))")
            assert cur.fetchone()[0] == td


KEYS_DDL = (
    "d DATE NOT NULL, dt DATETIME(6) NOT NULL, amt DECIMAL(20,4) NOT NULL, "
    "s VARCHAR(10) NOT NULL, update_at DATETIME(6) NOT NULL, note VARCHAR(20), "
    "PRIMARY KEY (d, dt, amt, s), KEY (update_at)"
)


def _rows(first: int, n: int, day: int) -> list[tuple]:
    """Rows with ties on the cursor and on every key prefix."""
    out = []
    for i in range(first, first + n):
        out.append((
            date(2020, 1, 1 + i % 3),
            datetime(2021, 5, 5, 12, 0, 0, (i % 4) * 250_000),
            Decimal(f"{(i % 5) - 2}.{i:04d}"),
            f"s{i % 2}é{i}",
            datetime(2025, 1, day, 10 + i % 2, 0, 0, 123456),
            f"n{i}",
        ))
    return out


def test_composite_temporal_decimal_key_syncs_over_many_chunks(
    dropping_conn, mysql_db, mysql_url, pg_url, s3_resource, spark_resource
):
    """Issue 16 item 7: many checkpoints per run, several runs, never a WatermarkConflict."""
    conn = dropping_conn
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE key_types (" + KEYS_DDL + ")")
        conn.made.append("key_types")
        cur.executemany("INSERT INTO key_types VALUES (%s, %s, %s, %s, %s, %s)",
                        _rows(0, 40, 2))
    cfg = table_cfg(mysql_db, "key_types", chunk_rows=3, parallelism=2,
                    target="dw_keys.key_types")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    for n, (first, day) in enumerate([(40, 3), (60, 3), (80, 4)]):
        assert sync(cfg, res, start="2025-01-02", end="2025-01-04").success
        _same(conn, pg_url)
        with conn.cursor() as cur:  # more rows: onto synced days and a new one
            cur.executemany("INSERT INTO key_types VALUES (%s, %s, %s, %s, %s, %s)",
                            _rows(first, 20, day))
            cur.execute("UPDATE key_types SET update_at = '2025-01-04 09:00:00', "
                        "note = %s WHERE note = %s", (f"moved{n}", f"n{n * 7}"))
    assert sync(cfg, res, start="2025-01-02", end="2025-01-04").success
    assert _same(conn, pg_url) == 100


def _same(conn, pg_url: str) -> int:
    cols = "d, dt, amt, s, update_at, note"
    with conn.cursor() as cur:
        cur.execute(f"SELECT {cols} FROM key_types")
        mine = sorted(cur.fetchall())
    with psycopg.connect(pg_url) as pg:
        theirs = sorted(pg.execute(f"SELECT {cols} FROM dw_keys.key_types").fetchall())
    assert [tuple(r) for r in theirs] == [tuple(r) for r in mine]
    return len(mine)
