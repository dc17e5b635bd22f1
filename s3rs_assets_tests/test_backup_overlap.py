"""Overlapped backup batches (backup/run.py): batch k+1 is read while batch k is
checkpointed, and that changes nothing but the wall time.

Real MariaDB tables with many ties at chunk boundaries, a real SparkSession, the moto S3
server (in this process: its PUTs, whoever sends them, Spark's Python workers included, are
counted on the server's backend). Counts and contents only, never timings.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from moto.s3.models import S3Backend

from s3rs_assets.backup import BackupRun
from s3rs_assets.backup.extract import Extractor
from s3rs_assets.io_manager import store_for
from s3rs_assets.partitions import partitions_def, windows
from s3rs_assets.resources import MySQLResource
from s3rs_assets.source import describe
from s3rs_assets.watermark import WatermarkRecord
from s3rs_assets_tests.helpers import make_ties_table, read_manifest_ids, read_parquet, table_cfg

DAY = datetime(2025, 3, 1)
KEYS = ["2025-03-01", "2025-03-02", "2025-03-03"]
CHUNK = 10


def _rows() -> list[tuple[int, datetime]]:
    """Ties of 7 rows per stamp on the first day, 13 on the third: every 10-row chunk
    boundary falls inside a tie; the second day is empty."""
    rows = [(i, DAY + timedelta(minutes=i // 7)) for i in range(1, 71)]
    rows += [(1000 + i, DAY + timedelta(days=2, hours=1 + i // 13)) for i in range(39)]
    return rows


@pytest.fixture
def puts(monkeypatch) -> Counter:
    """PutObject calls the moto server receives, by kind ("data" or "watermark") and table."""
    seen: Counter = Counter()
    real = S3Backend.put_object

    def counted(self: S3Backend, bucket_name: str, key_name: str, *a: Any, **kw: Any) -> Any:
        kind = "watermark" if "/watermarks/" in key_name else "data"
        table = next((t for t in ("ovl_serial", "ovl_over", "ovl_crash") if t in key_name), "")
        seen[(kind, table)] += 1
        return real(self, bucket_name, key_name, *a, **kw)

    monkeypatch.setattr(S3Backend, "put_object", counted)
    return seen


def _run(cfg, mysql_url, s3_resource, spark, run_id: str, **kw: Any) -> BackupRun:
    mysql = MySQLResource(url=mysql_url)
    try:
        with mysql.connection() as conn:
            src = describe(conn, cfg)
            ex = Extractor(spark=spark, mysql=mysql, s3=s3_resource, src=src,
                           table_name=cfg.name, parallelism=cfg.parallelism)
            run = BackupRun(ex, store_for(s3_resource, run_id),
                            windows=windows(partitions_def(cfg), KEYS),
                            upper=datetime(2026, 1, 1), chunk_rows=cfg.chunk_rows,
                            run_id=run_id, **kw)
            run.results = run.run()
            return run
    finally:
        mysql.teardown_after_execution(None)


def _record(s3_resource, cfg) -> WatermarkRecord:
    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    assert rec is not None
    return rec


def _keys(rec: WatermarkRecord) -> list[str]:
    return [f.key for p in rec.partitions.values() for f in p.files]


def test_overlapped_batches_write_what_the_serial_path_writes(
    mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, spark, puts, monkeypatch
):
    in_flight: dict[str, list[bool]] = {"serial": [], "over": []}
    real_apply = BackupRun._apply

    def watched(self: BackupRun, rec, parts):
        in_flight["over" if self.overlap else "serial"].append(self._inflight is not None)
        return real_apply(self, rec, parts)

    monkeypatch.setattr(BackupRun, "_apply", watched)
    runs, recs = {}, {}
    for name, overlap in (("serial", False), ("over", True)):
        make_ties_table(mysql_conn, f"ovl_{name}", _rows())
        cfg = table_cfg(mysql_db, f"ovl_{name}", start="2025-03-01", chunk_rows=CHUNK,
                        parallelism=2)
        runs[name] = _run(cfg, mysql_url, s3_resource, spark, f"run-{name}", overlap=overlap)
        recs[name] = _record(s3_resource, cfg)

    serial, over = recs["serial"], recs["over"]
    # the same rows, every column, each once; the same cursors, statuses and object layout
    tables = {n: read_parquet(s3_client, s3_resource.bucket, _keys(r)) for n, r in recs.items()}
    assert tables["over"].num_rows == len(_rows())
    assert tables["over"].sort_by("id").equals(tables["serial"].sort_by("id"))
    assert sorted(read_manifest_ids(s3_client, s3_resource.bucket, _keys(over))) == sorted(
        i for i, _ in _rows())
    for key in KEYS:
        a, b = serial.partitions.get(key), over.partitions.get(key)
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert (a.cursor, a.status, a.rows) == (b.cursor, b.status, b.rows)
            assert [(f.rows, f.md5) for f in a.files] == [(f.rows, f.md5) for f in b.files]
    assert serial.closed == over.closed
    assert runs["serial"].batches == runs["over"].batches > 5
    # the overlap happened: every checkpoint but the last ran with the next batch's read
    # already started; the serial path never had one in flight
    assert in_flight["over"][:-1] and all(in_flight["over"][:-1])
    assert not any(in_flight["serial"])
    # S3 PUTs unchanged: one per object, one watermark write per batch, in both paths
    assert puts[("data", "ovl_over")] == puts[("data", "ovl_serial")] == len(_keys(over))
    assert puts[("watermark", "ovl_over")] == puts[("watermark", "ovl_serial")]


def test_a_crash_in_an_overlapped_batch_keeps_the_last_durable_checkpoint(
    mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, spark, monkeypatch
):
    """The third batch's read dies after writing its objects, while the second batch is
    being checkpointed: the record ends at the second batch, and the next run reads the rest
    exactly (no row lost, none twice)."""
    make_ties_table(mysql_conn, "ovl_crash", _rows())
    cfg = table_cfg(mysql_db, "ovl_crash", start="2025-03-01", chunk_rows=CHUNK, parallelism=2)
    real_read = Extractor.read
    calls = {"read": 0}

    def dying(self: Extractor, items):
        calls["read"] += 1
        files = real_read(self, items)
        if calls["read"] == 3:
            raise RuntimeError("killed in the middle of an overlapped batch")
        return files

    monkeypatch.setattr(Extractor, "read", dying)
    with pytest.raises(RuntimeError, match="killed"):
        _run(cfg, mysql_url, s3_resource, spark, "run-1")
    assert calls["read"] == 3  # no fourth batch was started after the failure
    half = _record(s3_resource, cfg)
    assert half.mysql_rows_extracted == 2 * CHUNK  # the two batches checkpointed before it
    ids = sorted(read_manifest_ids(s3_client, s3_resource.bucket, _keys(half)))
    assert ids == sorted(i for i, _ in _rows())[: 2 * CHUNK]
    assert half.partitions["2025-03-01"].status == "partial"

    monkeypatch.setattr(Extractor, "read", real_read)
    _run(cfg, mysql_url, s3_resource, spark, "run-2")
    rec = _record(s3_resource, cfg)
    ids = sorted(read_manifest_ids(s3_client, s3_resource.bucket, _keys(rec)))
    assert ids == sorted(i for i, _ in _rows()), "every row once"
    assert rec.mysql_rows_extracted == len(ids)
    assert all(p.status == "complete" for p in rec.partitions.values())
