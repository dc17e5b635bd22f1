"""Partition windows across daylight-saving changes: real instants, wall-clock cursors.

A DATETIME holds a wall-clock value. In New York on 2024-11-03 (Berlin: 2024-10-27) the
hour after 01:00 (Berlin: 02:00) happens twice, and on 2024-03-10 (Berlin: 2024-03-31) the
hour after 02:00 never happens. Windows must stay contiguous, never overlap, never be
"empty but incomplete", and every row of the repeated and the skipped hour must reach the
warehouse exactly once, with the watermark valid at every step.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import dagster as dg
import psycopg
import pymysql
import pytest

from s3rs_assets.clock import edge_reading, instant_of, lowest_reading_from
from s3rs_assets.io_manager import store_for
from s3rs_assets.partitions import key_for, partitions_def, window, windows
from s3rs_assets.source import safety_bound
from s3rs_assets.watermark import WatermarkRecord
from s3rs_assets.watermark.edits import apply_set
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import resources, sync, table_cfg

# zone -> (spring day, first skipped hour, autumn day, first repeated hour)
ZONES = {
    "America/New_York": (datetime(2024, 3, 10), 2, datetime(2024, 11, 3), 1),
    "Europe/Berlin": (datetime(2024, 3, 31), 2, datetime(2024, 10, 27), 2),
}
SIZES = {"hourly": dg.HourlyPartitionsDefinition, "daily": dg.DailyPartitionsDefinition}


def _pdef(size: str, zone: str) -> dg.TimeWindowPartitionsDefinition:
    return SIZES[size](start_date=datetime(2024, 3, 1), end_date=datetime(2024, 12, 1),
                       timezone=zone)


@pytest.mark.parametrize("zone", list(ZONES))
@pytest.mark.parametrize("size", list(SIZES))
def test_windows_are_contiguous_and_every_value_has_one_partition(zone, size):
    spring, gap_hour, autumn, fold_hour = ZONES[zone]
    pdef = _pdef(size, zone)
    ws = windows(pdef)
    assert len({k for k, _, _ in ws}) == len(ws)
    for (_, _, end), (key, start, _) in zip(ws, ws[1:], strict=False):
        assert start == end, f"{key} does not start where the previous window ends"
    assert all(start <= end for _, start, end in ws), "no window ends before it starts"
    # the parsed windows agree with Dagster's, converted one by one
    near = [w for w in ws if w[1].date() in (spring.date(), autumn.date())]
    assert near and all(window(pdef, k) == (s, e) for k, s, e in near)
    # one partition per wall-clock value, every minute of both days, gap values included
    for day in (spring, autumn):
        for minute in range(0, 24 * 60, 7):
            ts = day + timedelta(minutes=minute, microseconds=999_999)
            key = key_for(pdef, ts)
            holding = [k for k, s, e in ws if s <= ts < e]
            assert holding == [key], f"{ts} in {holding}, key_for says {key}"
    if size == "hourly":
        tz = ZoneInfo(zone)
        # the repeated hour: all its values belong to the first of Dagster's two partitions
        first = autumn.replace(hour=fold_hour)
        second_key = [k for k, _, _ in ws if len(k) > len("2024-11-03-01:00")]
        assert len(second_key) == 1
        first_key = first.strftime("%Y-%m-%d-%H:%M")
        assert window(pdef, first_key) == (first, first + timedelta(hours=1))
        assert window(pdef, second_key[0]) == (first + timedelta(hours=1),) * 2
        assert key_for(pdef, first + timedelta(minutes=30)) == first_key
        # the skipped hour: the window before it spans it in wall-clock time
        before = spring.replace(hour=gap_hour - 1)
        assert window(pdef, before.strftime("%Y-%m-%d-%H:%M")) == (
            before, before + timedelta(hours=2))
        assert key_for(pdef, spring.replace(hour=gap_hour, minute=30)) == before.strftime(
            "%Y-%m-%d-%H:%M")
        # both instants of the repeated reading map back to the same wall-clock value
        reading = first + timedelta(minutes=30)
        one, two = reading.replace(tzinfo=tz, fold=0), reading.replace(tzinfo=tz, fold=1)
        assert one.utcoffset() != two.utcoffset()
        assert edge_reading(one, tz) == reading and instant_of(reading, tz) == one
    else:
        (autumn_day,) = [w for w in ws if w[1] == autumn]
        assert autumn_day[2] == autumn + timedelta(days=1)


@pytest.mark.parametrize("zone", list(ZONES))
def test_watermark_set_past_the_repeated_hour_keeps_the_record_valid(zone, monkeypatch):
    spring, _, autumn, fold_hour = ZONES[zone]
    monkeypatch.setenv("S3RS_SOURCE_TIMEZONE", zone)
    cfg = table_cfg("db", f"set_{zone.split('/')[1].lower()}", partition="hourly",
                    start=autumn.strftime("%Y-%m-%d"))
    rec = WatermarkRecord.new(cfg.name)
    ts = autumn.replace(hour=fold_hour + 2, minute=15)
    apply_set(rec, cfg, ts)
    rec.refresh()
    rec.check(table_name=cfg.name)  # raised "empty window" before
    again = WatermarkRecord.from_json(rec.to_json(), table_name=cfg.name).check()
    pdef = partitions_def(cfg)
    before = [w for w in windows(pdef) if w[2] <= ts and w[2] > w[1]]
    # midnight .. the hour before ts, both repeated ones (closed as ranges, not entries)
    assert len(before) + 1 == fold_hour + 3
    assert all(again.is_complete(*w) for w in before)
    held = again.partitions[ts.strftime("%Y-%m-%d-%H:00")]
    assert held.status == "partial" and held.cursor.c == ts
    # closing the zero-width window keeps the closed ranges valid too
    (zero,) = [w for w in windows(pdef) if w[1] == w[2] and w[1].date() == autumn.date()]
    again.close_empty(*zero)
    again.check()
    assert again.is_complete(*zero)


# ------------------------------------------------------------- the safety bound

# (zone, UTC instant of MySQL's clock, session offset, expected bound with lag 5m)
CLOCKS = [
    # the first 01:xx in New York (EDT): held at 01:00 until the second 01:xx is over
    ("America/New_York", datetime(2024, 11, 3, 5, 50), "-04:00", datetime(2024, 11, 3, 1)),
    ("America/New_York", datetime(2024, 11, 3, 5, 4), "-04:00", datetime(2024, 11, 3, 0, 59)),
    # the second 01:xx (EST), and after it
    ("America/New_York", datetime(2024, 11, 3, 6, 10), "-05:00",
     datetime(2024, 11, 3, 1, 5)),
    ("America/New_York", datetime(2024, 11, 3, 7, 10), "-05:00",
     datetime(2024, 11, 3, 2, 5)),
    # Berlin repeats 02:xx
    ("Europe/Berlin", datetime(2024, 10, 27, 0, 30), "+02:00", datetime(2024, 10, 27, 2)),
    ("Europe/Berlin", datetime(2024, 10, 27, 1, 30), "+01:00",
     datetime(2024, 10, 27, 2, 25)),
    # spring: nothing is repeated, the bound follows the clock across the gap
    ("America/New_York", datetime(2024, 3, 10, 7, 10), "-04:00",
     datetime(2024, 3, 10, 3, 5)),
    ("UTC", datetime(2024, 11, 3, 5, 50), "+00:00", datetime(2024, 11, 3, 5, 45)),
]


@pytest.mark.parametrize(("zone", "utc", "offset", "expected"), CLOCKS)
def test_the_bound_waits_for_the_second_repeated_hour(zone, utc, offset, expected, mysql_db,
                                                      monkeypatch):
    """Rows written in the second 01:30 carry the readings of the first: a bound (and a
    cursor) that passed 01:30 in the first would never see them."""
    monkeypatch.setenv("S3RS_SOURCE_TIMEZONE", zone)
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=mysql_db)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET time_zone = '{offset}'")
            cur.execute("SET TIMESTAMP = %s", (utc.replace(tzinfo=UTC).timestamp(),))
        bound = safety_bound(conn, timedelta(minutes=5))
    finally:
        conn.close()
    assert bound.upper == expected
    held = expected < bound.server_now - timedelta(minutes=5)
    assert ("daylight saving" in bound.note) == held
    tz = ZoneInfo(zone)
    assert lowest_reading_from(utc.replace(tzinfo=UTC) - timedelta(minutes=5), tz) == expected


# ---------------------------------------------------------------- end to end


def _rows(zone: str) -> list[tuple[int, datetime]]:
    """Rows around both changes: both instants of a repeated reading (ids 3 and 4 stand for
    the summer- and the winter-time 01:30), values in the skipped hour, the edges."""
    spring, gap_hour, autumn, fold_hour = ZONES[zone]
    fold = autumn.replace(hour=fold_hour)
    gap = spring.replace(hour=gap_hour)
    stamps = [
        fold - timedelta(microseconds=1), fold, fold + timedelta(minutes=30),
        fold + timedelta(minutes=30), fold + timedelta(minutes=59, seconds=59),
        fold + timedelta(hours=1), fold + timedelta(hours=1, minutes=30),
        gap - timedelta(minutes=1), gap + timedelta(minutes=30), gap + timedelta(hours=1),
        gap + timedelta(hours=1, microseconds=1),
    ]
    return [(i + 1, ts) for i, ts in enumerate(stamps)]


@pytest.fixture
def dst_table(mysql_db):
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True)
    made: list[str] = []

    def make(name: str, rows: list[tuple[int, datetime]]) -> None:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
            cur.execute(f"CREATE TABLE `{name}` (id INT NOT NULL PRIMARY KEY, "
                        "update_at DATETIME(6) NOT NULL, KEY (update_at))")
            cur.executemany(f"INSERT INTO `{name}` VALUES (%s, %s)", rows)
        made.append(name)

    yield make
    with conn.cursor() as cur:
        for name in made:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
    conn.close()


@pytest.mark.parametrize(("zone", "size"), [("America/New_York", "hourly"),
                                          ("Europe/Berlin", "hourly"),
                                          ("Europe/Berlin", "daily")])
def test_both_changes_sync_exactly_end_to_end(zone, size, dst_table, mysql_db, mysql_url,
                                              pg_url, s3_resource, spark_resource,
                                              monkeypatch):
    spring, gap_hour, autumn, fold_hour = ZONES[zone]
    monkeypatch.setenv("S3RS_SOURCE_TIMEZONE", zone)
    city = zone.split("/")[1].lower()
    name = f"dst_{city}_{size}"
    rows = _rows(zone)
    dst_table(name, rows)
    cfg = table_cfg(mysql_db, name, partition=size, chunk_rows=2,
                    start=(spring - timedelta(days=1)).strftime("%Y-%m-%d"),
                    target=f"dw_dst.{name}")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    if size == "hourly":
        fmt = "%Y-%m-%d-%H:%M"
        ranges = [(spring.replace(hour=gap_hour - 2), spring.replace(hour=gap_hour + 2)),
                  (autumn.replace(hour=fold_hour - 1), autumn.replace(hour=fold_hour + 2))]
    else:
        fmt = "%Y-%m-%d"
        ranges = [(spring, spring), (autumn, autumn)]
    with dg.instance_for_test() as instance:
        for lo, hi in ranges:
            sync(cfg, res, start=lo.strftime(fmt), end=hi.strftime(fmt), instance=instance)
        # the autumn range again: a backfill, nothing stalls, nothing doubles
        lo, hi = ranges[-1]
        sync(cfg, res, start=lo.strftime(fmt), end=hi.strftime(fmt), instance=instance)
    with psycopg.connect(pg_url.replace("postgres:@", "postgres@")) as c:
        got = c.execute(f'SELECT id, update_at FROM "dw_dst"."{name}" ORDER BY id').fetchall()
    assert got == rows, "every row once, wall-clock values exactly as MySQL holds them"
    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    rec.check(table_name=cfg.name)
    assert rec.mysql_rows_extracted == rec.redshift_rows_loaded == len(rows)
    by_partition = {k: p.rows for k, p in rec.partitions.items() if p.rows}
    pdef = partitions_def(cfg)
    expected: dict[str, int] = {}
    for _, ts in rows:
        expected[key_for(pdef, ts)] = expected.get(key_for(pdef, ts), 0) + 1
    assert by_partition == expected
    if size == "hourly":
        fold_key = autumn.replace(hour=fold_hour).strftime(fmt)
        assert by_partition[fold_key] == 4, "both instants of the repeated hour, one window"
        assert not any(len(k) > len(fold_key) for k in rec.partitions), (
            "the second repeated hour holds nothing and needs no entry")
