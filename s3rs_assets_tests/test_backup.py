"""The backup run (backup.py) over long, mostly empty histories: cost follows the rows.

Real MariaDB tables, a real SparkSession, the moto S3 server. S3 calls and MySQL
connections are counted on the real clients (botocore hooks, a wrapped `connect`), never
timed: a 12-year daily table with rows on a dozen days costs a few watermark writes and one
MySQL connection, not thousands.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import dagster as dg
import pytest

from s3rs_assets.backup import BackupRun
from s3rs_assets.backup.extract import Extractor
from s3rs_assets.errors import WatermarkConflict
from s3rs_assets.io_manager import store_for
from s3rs_assets.partitions import partitions_def, windows
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.source import describe
from s3rs_assets.watermark import SCHEMA_VERSION, WatermarkRecord
from s3rs_assets_tests.helpers import make_ties_table, read_manifest_ids, table_cfg

START = datetime(2014, 1, 1)
# one busy day (ties across a chunk boundary), a quiet decade, a few lonely rows
BUSY = datetime(2016, 7, 9)
LONELY = [datetime(2014 + y, 3, 1 + y, 12) for y in range(12)]


def _rows() -> list[tuple[int, datetime]]:
    rows = [(i, BUSY + timedelta(hours=3)) for i in range(1, 31)]  # 30 rows, one stamp
    rows += [(100 + i, ts) for i, ts in enumerate(LONELY)]
    return rows


class Counter:
    """S3 calls of every client the S3 resource builds (watermark keys only) and MySQL
    connections opened through the resource."""

    def __init__(self) -> None:
        self.s3: list[tuple[str, str]] = []
        self.mysql = 0
        self._clients: set[int] = set()

    def attach(self, client: Any) -> Any:
        if id(client) not in self._clients:
            self._clients.add(id(client))
            client.meta.events.register("before-parameter-build.s3", self._record)
        return client

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        key = params.get("Key") or ""
        if "/watermarks/" in key:
            self.s3.append((model.name, key))

    def writes(self) -> int:
        return sum(1 for op, _ in self.s3 if op == "PutObject")


@pytest.fixture
def counted(monkeypatch) -> Counter:
    counter = Counter()
    client, connect = S3Resource.client, MySQLResource.connect

    def counted_client(self: S3Resource) -> Any:
        return counter.attach(client(self))

    def counted_connect(self: MySQLResource) -> Any:
        counter.mysql += 1
        return connect(self)

    monkeypatch.setattr(S3Resource, "client", counted_client)
    monkeypatch.setattr(MySQLResource, "connect", counted_connect)
    return counter


def _run(cfg, mysql_url, s3_resource, spark, run_id: str, keys=None, **kw) -> BackupRun:
    mysql = MySQLResource(url=mysql_url)
    store = store_for(s3_resource, run_id)
    pdef = partitions_def(cfg)
    with mysql.connection() as conn:
        src = describe(conn, cfg)
        ex = Extractor(spark=spark, mysql=mysql, s3=s3_resource, src=src,
                       table_name=cfg.name, parallelism=cfg.parallelism)
        run = BackupRun(ex, store, windows=windows(pdef, keys),
                        upper=kw.pop("upper", datetime(2026, 1, 1)),
                        chunk_rows=cfg.chunk_rows, run_id=run_id, **kw)
        run.results = run.run()
    mysql.teardown_after_execution(None)
    return run


def _ids(s3_client, bucket, rec: WatermarkRecord) -> list[int]:
    keys = [f.key for p in rec.partitions.values() for f in p.files]
    return sorted(read_manifest_ids(s3_client, bucket, keys))


def test_twelve_years_of_days_cost_what_their_rows_cost(
    mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, spark, counted
):
    make_ties_table(mysql_conn, "long_history", _rows())
    cfg = table_cfg(mysql_db, "long_history", start=f"{START:%Y-%m-%d}", chunk_rows=8)
    pdef = partitions_def(cfg)
    keys = pdef.get_partition_keys_in_range(dg.PartitionKeyRange("2014-01-01", "2025-12-31"))
    assert len(keys) > 4000
    run = _run(cfg, mysql_url, s3_resource, spark, "run-1", keys=list(keys))

    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    assert _ids(s3_client, s3_resource.bucket, rec) == sorted(i for i, _ in _rows())
    # entries only for the 13 days that hold rows; everything else is a closed range
    assert len(rec.partitions) == 13 and all(
        p.status == "complete" for p in rec.partitions.values())
    assert all(rec.is_complete(k, s, e) for k, s, e in windows(pdef, list(keys)))
    assert len(rec.closed) == 14  # before, between and after the 13 days
    # 42 rows in batches of 8: 6 checkpoint writes (one batch may hold many days); one
    # read of the (missing) record and of its backups; one MySQL connection
    assert run.batches == 6
    assert counted.writes() == run.batches
    assert counted.mysql == 1
    # the record's size follows the partitions that hold data
    size = len(rec.to_json().encode())
    assert size < 16_000, size
    assert json.loads(rec.to_json())["closed"][0]["start"] == "2014-01-01T00:00:00"

    # a second run with nothing new: no Spark job, one write (the closings it re-confirms
    # are already closed), still one connection
    before = counted.writes()
    again = _run(cfg, mysql_url, s3_resource, spark, "run-2", keys=list(keys)[-30:])
    assert again.batches <= 1 and counted.writes() - before <= 1
    assert counted.mysql == 2


def test_a_crash_in_a_long_empty_stretch_is_read_again_exactly(
    mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, spark, monkeypatch
):
    """The run dies at its second checkpoint (after 8 rows are written and checkpointed):
    the rerun reads the rest, no row twice, and no closed range hides an unread day."""
    make_ties_table(mysql_conn, "long_crash", _rows())
    cfg = table_cfg(mysql_db, "long_crash", start=f"{START:%Y-%m-%d}", chunk_rows=8)
    keys = list(partitions_def(cfg).get_partition_keys())[: 12 * 366]
    real = BackupRun._apply
    calls = {"n": 0}

    def dying(self, rec, slots):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("killed between the read and the checkpoint")
        return real(self, rec, slots)

    monkeypatch.setattr(BackupRun, "_apply", dying)
    with pytest.raises(RuntimeError, match="killed"):
        _run(cfg, mysql_url, s3_resource, spark, "run-1", keys=keys)
    monkeypatch.setattr(BackupRun, "_apply", real)
    half = store_for(s3_resource).read(cfg.name, fresh=True)
    assert half.mysql_rows_extracted == 8  # the first batch only
    _run(cfg, mysql_url, s3_resource, spark, "run-2", keys=keys)
    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    ids = _ids(s3_client, s3_resource.bucket, rec)
    assert ids == sorted(i for i, _ in _rows()), "every row once"
    assert rec.mysql_rows_extracted == len(ids)


def test_rows_behind_a_closed_range_are_found_by_a_backfill(
    mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, spark
):
    """A closed (empty) day that later holds a row (a straggler committed by the
    application's own clock) is read again when its partition is backfilled."""
    make_ties_table(mysql_conn, "long_late", _rows()[:30])
    cfg = table_cfg(mysql_db, "long_late", start="2016-07-01", chunk_rows=100)
    keys = ["2016-07-0" + str(d) for d in range(1, 10)]
    _run(cfg, mysql_url, s3_resource, spark, "run-1", keys=keys)
    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    assert list(rec.partitions) == ["2016-07-09"]
    with mysql_conn.cursor() as cur:
        cur.execute("INSERT INTO long_late (id, update_at, amount) VALUES "
                    "(900, '2016-07-03 10:00:00', 1)")
    _run(cfg, mysql_url, s3_resource, spark, "run-2", keys=["2016-07-03"])
    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    assert rec.partitions["2016-07-03"].rows == 1 and rec.partitions["2016-07-03"].recomputes == 1
    assert not rec.closed_range(datetime(2016, 7, 3), datetime(2016, 7, 4))
    assert rec.is_complete("2016-07-02", datetime(2016, 7, 2), datetime(2016, 7, 3))


def test_another_run_that_wrote_different_files_stops_this_one(
    mysql_conn, mysql_db, mysql_url, s3_resource, spark, monkeypatch
):
    """Issue 9 item 12: equal plan ends are not enough to merge with another run's
    checkpoint; the objects' checksums must match too."""
    make_ties_table(mysql_conn, "long_race", _rows()[:30])
    cfg = table_cfg(mysql_db, "long_race", start="2016-07-09", chunk_rows=10)
    keys = ["2016-07-09"]
    real = BackupRun._write
    state = {"done": False}

    def racing(self, slots):
        if not state["done"]:
            state["done"] = True
            # another run checkpoints the same chunk with another upload of its objects
            other = _run(cfg, mysql_url, s3_resource, spark, "other", keys=keys,
                         row_budget=10)
            assert other.planned == 10

            def tamper(rec):
                for f in rec.partitions["2016-07-09"].files:
                    f.md5 = "0" * 32

            store_for(s3_resource, "other").update(cfg.name, tamper)
        return real(self, slots)

    monkeypatch.setattr(BackupRun, "_write", racing)
    with pytest.raises(WatermarkConflict, match="changed by another run"):
        _run(cfg, mysql_url, s3_resource, spark, "mine", keys=keys, row_budget=10)


def test_an_old_record_is_read_and_written_back_compact():
    v1 = {
        "schema_version": 1,
        "table_name": "shop.orders",
        "partitions": {
            "2025-01-01": {"status": "complete", "window_start": "2025-01-01T00:00:00",
                           "window_end": "2025-01-02T00:00:00"},
            "2025-01-02": {"status": "complete", "window_start": "2025-01-02T00:00:00",
                           "window_end": "2025-01-03T00:00:00"},
            "2025-01-03": {"status": "partial", "window_start": "2025-01-03T00:00:00",
                           "window_end": "2025-01-04T00:00:00",
                           "cursor": {"c": "2025-01-03T10:00:00", "pk": [7]}},
        },
    }
    rec = WatermarkRecord.from_json(json.dumps(v1))
    assert rec.schema_version == SCHEMA_VERSION and list(rec.partitions) == ["2025-01-03"]
    assert [(r.start, r.end) for r in rec.closed] == [
        (datetime(2025, 1, 1), datetime(2025, 1, 3))]
    assert rec.is_complete("2025-01-02", datetime(2025, 1, 2), datetime(2025, 1, 3))
    again = WatermarkRecord.from_json(rec.to_json())
    assert again == rec and "\n" not in rec.to_json()


def test_mysql_connection_of_a_run_is_reopened_when_the_server_drops_it(mysql_url, mysql_conn):
    mysql = MySQLResource(url=mysql_url)
    with mysql.connection() as conn:
        first = conn.thread_id()
    with mysql_conn.cursor() as cur:
        cur.execute(f"KILL {first}")
    with mysql.connection() as conn:
        assert conn.thread_id() != first
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
    mysql.teardown_after_execution(None)
