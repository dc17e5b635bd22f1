"""Weekly and monthly partitions keep the keyset's promises: no row lost or read twice at
chunk boundaries inside a window and across windows, backfills of a range, and
`watermark set` into the middle of a window.

Real MariaDB tables, a real SparkSession, the moto S3 server (the backup run of
test_backup.py, with Dagster's weekly and monthly partition definitions)."""

from __future__ import annotations

from datetime import datetime, timedelta

import dagster as dg
import pytest

from s3rs_assets.io_manager import store_for
from s3rs_assets.partitions import key_for, partitions_def, window, windows
from s3rs_assets.watermark import WatermarkRecord
from s3rs_assets.watermark.edits import apply_set
from s3rs_assets_tests.helpers import make_ties_table, table_cfg
from s3rs_assets_tests.test_backup import _ids, _run

#: 25 rows on one stamp at the end of a window, 25 at the start of the next (ties across
#: the chunk boundary and across the window boundary), and a few lonely rows
EDGES = {
    "weekly": (datetime(2025, 3, 9, 23, 59, 59), datetime(2025, 3, 10)),  # Sunday | Monday
    "monthly": (datetime(2025, 3, 31, 23, 59, 59, 999999), datetime(2025, 4, 1)),
}


def _rows(size: str) -> list[tuple[int, datetime]]:
    last, first = EDGES[size]
    rows = [(i, last) for i in range(1, 26)] + [(100 + i, first) for i in range(1, 26)]
    rows += [(200 + i, first + timedelta(days=20 * i, hours=i)) for i in range(1, 4)]
    return rows


@pytest.mark.parametrize("size", ["weekly", "monthly"])
@pytest.mark.parametrize("chunk", [1, 7, 25])
def test_ties_at_window_and_chunk_boundaries_are_read_once(
    size, chunk, mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, spark
):
    name = f"sizes_{size}_{chunk}"
    rows = _rows(size)
    make_ties_table(mysql_conn, name, rows)
    cfg = table_cfg(mysql_db, name, start="2025-02-01", partition=size, chunk_rows=chunk)
    pdef = partitions_def(cfg)
    keys = list(pdef.get_partition_keys_in_range(
        dg.PartitionKeyRange(pdef.get_first_partition_key(), key_for(pdef, datetime(2025, 6, 30)))
    ))
    _run(cfg, mysql_url, s3_resource, spark, f"{name}-1", keys=keys)
    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    assert _ids(s3_client, s3_resource.bucket, rec) == sorted(i for i, _ in rows)
    last, first = EDGES[size]
    # each stamp lies in its own window: the tie at the end of one, the next at the start
    assert key_for(pdef, last) != key_for(pdef, first)
    assert window(pdef, key_for(pdef, first))[0] == first
    assert all(rec.is_complete(k, s, e) for k, s, e in windows(pdef, keys))


def test_backfill_of_a_monthly_range_reads_only_that_range_again(
    mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, spark
):
    rows = _rows("monthly")
    make_ties_table(mysql_conn, "sizes_backfill", rows)
    cfg = table_cfg(mysql_db, "sizes_backfill", start="2025-02-01", partition="monthly",
                    chunk_rows=10)
    pdef = partitions_def(cfg)
    keys = ["2025-02-01", "2025-03-01", "2025-04-01", "2025-05-01", "2025-06-01"]
    _run(cfg, mysql_url, s3_resource, spark, "bf-1", keys=keys)
    first = store_for(s3_resource).read(cfg.name, fresh=True)
    april = {f.key for f in first.partitions["2025-04-01"].files}
    # a backfill of March..April: the complete windows are recomputed, exactly
    _run(cfg, mysql_url, s3_resource, spark, "bf-2", keys=["2025-03-01", "2025-04-01"])
    again = store_for(s3_resource).read(cfg.name, fresh=True)
    assert _ids(s3_client, s3_resource.bucket, again) == sorted(i for i, _ in rows)
    assert {f.key for f in again.partitions["2025-04-01"].files} == april  # same keys
    assert all(again.is_complete(k, s, e) for k, s, e in windows(pdef, keys))


def test_watermark_set_into_the_middle_of_a_month():
    cfg = table_cfg("db", "sizes_set", start="2024-01-01", partition="monthly")
    pdef = partitions_def(cfg)
    rec = WatermarkRecord.new(cfg.name)
    ts = datetime(2025, 3, 17, 12, 30)
    apply_set(rec, cfg, ts)
    rec.refresh()
    rec.check(table_name=cfg.name)
    march = rec.partitions["2025-03-01"]
    assert march.status == "partial" and march.cursor.c == ts
    before = [w for w in windows(pdef) if w[2] <= datetime(2025, 3, 1)]
    assert len(before) == 14 and all(rec.is_complete(*w) for w in before)
    assert len(rec.partitions) == 1 and len(rec.closed) == 1  # 14 months: one closed range
    assert not rec.is_complete(*[w for w in windows(pdef) if w[0] == "2025-04-01"][0])
