"""A long record folds its old complete partitions into an archive object (watermark/archive.py).

The store against a real moto S3 server, built by the one builder (`io_manager.store_for`);
requests are counted with hooks on that real boto3 client. The record is a synthetic long
history shaped like the shape benchmark's `hist` table: 73 data days over 20 years, one file
per day, everything loaded.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from s3rs_assets.errors import ConfigError, WatermarkError
from s3rs_assets.io_manager import store_for
from s3rs_assets.layout import Layout
from s3rs_assets.watermark import (
    FileEntry,
    LoadState,
    PartitionState,
    Position,
    WatermarkRecord,
    archive,
)
from s3rs_assets.watermark.store import WatermarkStore

T = "bench.hist"
LAYOUT = Layout("s3rs")
RUN = "0f6b3c1e-7d2a-4c55-9d0e-2b1f6a9c8e77"
START = datetime(2006, 1, 1)


def day_key(i: int) -> str:
    return (START + timedelta(days=i * 100)).strftime("%Y-%m-%d")


def add_days(first: int, last: int, *, loaded: bool = True, files: int = 1):
    """A change: partitions `first`..`last` (100 days apart) complete with `files` files each,
    loaded when `loaded`."""

    def change(rec: WatermarkRecord) -> None:
        for i in range(first, last):
            key = day_key(i)
            day = datetime.fromisoformat(key)
            entries = [
                FileEntry(
                    key=LAYOUT.data_object(
                        "bench", "hist", key, f"{day:%Y%m%d}T05{n:04d}_{i:018d}"
                    ),
                    rows=13,
                    bytes=4_321,
                    md5=f"{i:016x}{n:016x}",
                    cursor_min=day + timedelta(hours=5),
                    cursor_max=day + timedelta(hours=20),
                )
                for n in range(files)
            ]
            rec.partitions[key] = PartitionState(
                status="complete",
                window_start=day,
                window_end=day + timedelta(days=1),
                cursor=Position(c=day + timedelta(hours=20), pk=[i * 13 + 13]),
                files=entries,
                run_id=RUN,
            )
            if loaded:
                rec.loaded_partitions[key] = LoadState(
                    files=[f.key for f in entries],
                    rows=13 * files,
                    md5={f.key: f.md5 for f in entries},
                )

    return change


def load_all(rec: WatermarkRecord) -> None:
    for key, p in rec.partitions.items():
        rec.loaded_partitions[key] = LoadState(
            files=[f.key for f in p.files], rows=p.rows, md5={f.key: f.md5 for f in p.files}
        )


class Count:
    """Requests of `op` whose URL holds `part`, counted on the real client."""

    def __init__(self, client: Any, op: str, part: str):
        self.part, self.n = part, 0
        client.meta.events.register(f"before-send.s3.{op}", self)

    def __call__(self, request: Any, **_: Any) -> None:
        if self.part in request.url:
            self.n += 1


@pytest.fixture(autouse=True)
def _cold_cache():
    archive.forget_cache()
    yield
    archive.forget_cache()


@pytest.fixture
def store(s3_resource) -> WatermarkStore:
    return store_for(s3_resource, "run-a")


def stored(s3_client, bucket) -> dict[str, Any]:
    body = s3_client.get_object(Bucket=bucket, Key=LAYOUT.watermark_primary(T))["Body"].read()
    return json.loads(body)


def dump(rec: WatermarkRecord) -> dict[str, Any]:
    return rec.model_dump(mode="json")


def test_a_long_record_round_trips_exactly_and_is_stored_within_16_kb(
    store, s3_resource, s3_client, bucket
):
    written = store.update(T, add_days(0, 73)).record
    whole = len(written.to_json().encode())
    raw = stored(s3_client, bucket)
    size = len(json.dumps(raw, separators=(",", ":")).encode())
    print(f"\n73 data partitions: whole record {whole} bytes, stored {size} bytes")
    assert whole > 50_000 and size <= archive.DEFAULT_MAX_BYTES
    ref = raw["archive"]
    assert ref["key"].startswith(LAYOUT.watermark_archives(T)) and raw["schema_version"] == 4
    # the table-level seed fields stay the whole table's
    assert raw["s3_file_count"] == 73 and raw["mysql_rows_extracted"] == 73 * 13
    assert raw["redshift_rows_loaded"] == 73 * 13
    kept = set(raw["partitions"])
    assert len(kept) + len(ref["partitions"]) == 73 and not kept & set(ref["partitions"])
    assert day_key(72) in kept  # the newest stay; the oldest went
    assert day_key(0) in ref["partitions"]
    assert len(raw["processed_s3_files"]) == len(raw["loaded_partitions"]) == len(kept)
    assert ref["files"] + len(kept) == 73 and ref["loaded_rows"] + 13 * len(kept) == 73 * 13
    # another process reads the whole record back
    fresh = store_for(s3_resource, "run-b").read(T)
    assert dump(fresh) == dump(written)
    assert len(fresh.partitions) == 73 and len(fresh.processed_s3_files) == 73


def test_the_archive_is_written_once_and_read_once(store, s3_resource, s3_client, bucket):
    client = store.client
    puts = Count(client, "PutObject", "/watermarks/archives/")
    store.update(T, add_days(0, 73))
    assert puts.n == 1
    store.update(T, lambda rec: None)  # an unchanged checkpoint
    store.update(T, lambda rec: None)
    assert puts.n == 1
    # a newer partition, the old ones unchanged: the archive stays (FOLD_TO's headroom)
    store.update(T, add_days(73, 74))
    assert puts.n == 1
    store.write_copies(T)
    assert puts.n == 1

    # another process: one GET of the primary and one of the archive, then memory
    archive.forget_cache()
    other = store_for(s3_resource, "run-b")
    gets_primary = Count(other.client, "GetObject", "/watermarks/tables/")
    gets_archive = Count(other.client, "GetObject", "/watermarks/archives/")
    other_puts = Count(other.client, "PutObject", "/watermarks/archives/")
    assert len(other.read(T, fresh=True).partitions) == 74
    assert (gets_primary.n, gets_archive.n) == (1, 1)
    assert len(other.read(T, fresh=True).partitions) == 74
    assert (gets_primary.n, gets_archive.n) == (2, 1)  # immutable: kept by digest
    other.update(T, lambda rec: None)
    assert other_puts.n == 0


def test_a_record_that_fits_has_no_archive_and_reads_with_one_get(
    store, s3_resource, s3_client, bucket
):
    store.update(T, add_days(0, 10))
    raw = stored(s3_client, bucket)
    assert "archive" not in raw and len(raw["partitions"]) == 10
    other = store_for(s3_resource, "run-b")
    gets = Count(other.client, "GetObject", "/watermarks/")
    assert len(other.read(T).partitions) == 10 and gets.n == 1


def test_only_complete_fully_loaded_partitions_move(store, s3_client, bucket, monkeypatch):
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "4096")
    store.update(T, add_days(0, 20, loaded=False))
    assert "archive" not in stored(s3_client, bucket)  # nothing loaded: nothing can move
    store.update(T, load_all)
    ref = stored(s3_client, bucket)["archive"]
    moved = set(ref["partitions"])
    assert moved and day_key(19) not in moved

    def reread(rec: WatermarkRecord) -> None:  # re-materialized: partial, one file replaced
        p = rec.partitions[day_key(0)]
        p.status = "partial"
        p.files = p.files[:0]

    rec = store.update(T, reread).record
    raw = stored(s3_client, bucket)
    assert day_key(0) in raw["partitions"] and day_key(0) not in raw["archive"]["partitions"]
    assert raw["archive"]["sha256"] != ref["sha256"]
    assert dump(store_for(store_resource(store), "x").read(T)) == dump(rec)


def store_resource(store: WatermarkStore):
    from s3rs_assets.resources import S3Resource

    return S3Resource(bucket=store.bucket, prefix="s3rs")


def test_a_missing_archive_names_its_key_and_recovery_takes_an_older_copy(
    store, s3_resource, s3_client, bucket, monkeypatch
):
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "100000")
    store.update(T, add_days(0, 40))
    store.write_copies(T)  # the copies hold the whole record: no archive yet
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "8192")
    want = store.update(T, add_days(40, 41)).record
    key = stored(s3_client, bucket)["archive"]["key"]
    s3_client.delete_object(Bucket=bucket, Key=key)
    archive.forget_cache()
    other = store_for(s3_resource, "run-b")
    with pytest.raises(WatermarkError):
        WatermarkRecord.from_json(
            s3_client.get_object(Bucket=bucket, Key=LAYOUT.watermark_primary(T))["Body"].read()
        ).check()
    report = other.recover(T)
    assert (
        report.source == "daily"
        and key in report.primary_error
        and "missing" in report.primary_error
    )
    assert len(report.record.partitions) == 40 and len(want.partitions) == 41


def test_a_damaged_archive_is_refused_and_the_event_log_copy_repairs_it(
    s3_resource, s3_client, bucket, monkeypatch
):
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "8192")
    whole: dict[str, str] = {}
    store = store_for(s3_resource, "run-a")
    store.event_log_fallback = lambda table: whole.get(table)
    rec = store.update(T, add_days(0, 40)).record
    whole[T] = rec.to_json()  # what the run's materialization carries: the whole record
    store.write_copies(T)
    key = stored(s3_client, bucket)["archive"]["key"]
    s3_client.put_object(Bucket=bucket, Key=key, Body=b'{"table_name":"bench.hist"}')
    archive.forget_cache()
    other = store_for(s3_resource, "run-b")
    other.event_log_fallback = store.event_log_fallback
    report = other.recover(T)
    assert "damaged" in report.primary_error and key in report.primary_error
    assert report.source == "event_log"
    assert any(key in why for _, _, why in report.rejected)  # the copies reference it too
    assert dump(report.record) == dump(rec) | {
        "backup_metadata": dump(report.record)["backup_metadata"],
        "updated_at": dump(report.record)["updated_at"],
    }
    # the write-back repaired the archive object (same content, same key)
    archive.forget_cache()
    again = store_for(s3_resource, "run-c").read(T)
    assert len(again.partitions) == 40


def test_an_unreadable_archive_is_an_error_not_a_recovery(store, s3_resource, bucket, monkeypatch):
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "8192")
    store.update(T, add_days(0, 40))
    archive.forget_cache()
    other = store_for(s3_resource, "run-b")

    def fail(request: Any, **_: Any) -> None:
        if "/watermarks/archives/" in request.url:
            raise ConnectionError("archive unreachable (test)")

    other.client.meta.events.register("before-send.s3.GetObject", fail)
    with pytest.raises(archive.ArchiveUnreadable, match="cannot be read"):
        other.recover(T)


def test_a_version_3_record_reads_unchanged(store, s3_client, bucket):
    rec = WatermarkRecord.new(T)
    add_days(0, 5)(rec)
    rec.refresh()
    doc = json.loads(rec.to_json()) | {"schema_version": 3}
    s3_client.put_object(
        Bucket=bucket, Key=LAYOUT.watermark_primary(T), Body=json.dumps(doc).encode()
    )
    got = store.read(T)
    assert got.schema_version == 4 and dump(got) == dump(rec) | {"schema_version": 4}


def test_a_folded_record_is_refused_unless_expanded(store, s3_client, bucket, monkeypatch):
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "8192")
    store.update(T, add_days(0, 40))
    body = s3_client.get_object(Bucket=bucket, Key=LAYOUT.watermark_primary(T))["Body"].read()
    with pytest.raises(WatermarkError, match="archive .* not read"):
        WatermarkRecord.from_json(body).check()


def test_the_limit_setting_is_checked(monkeypatch):
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "12")
    with pytest.raises(ConfigError, match=archive.MAX_BYTES_ENV):
        archive.max_bytes()
    with pytest.raises(ConfigError):
        LAYOUT.watermark_archive(T, "../x")


def test_status_keeps_archives_on_disk_by_their_digest(store, s3_resource, tmp_path, monkeypatch):
    """`s3rs status`'s body cache: a second process GETs no archive; a damaged kept body
    is not used."""
    from s3rs_assets.body_cache import BodyCache, save_archives, warm_archives

    monkeypatch.setenv(archive.MAX_BYTES_ENV, "8192")
    store.update(T, add_days(0, 40))
    cache = BodyCache(tmp_path)
    prefix = LAYOUT.watermarks()

    def look(name: str) -> int:
        """What one status process does; returns the archive GETs it sent."""
        archive.forget_cache()
        reader = store_for(s3_resource, name)
        gets = Count(reader.client, "GetObject", "/watermarks/archives/")
        pack = cache.archives(reader.bucket, prefix)
        warm_archives(pack)
        rec = reader.read(T, fresh=True)
        assert len(rec.partitions) == 40
        save_archives(pack, [rec])
        return gets.n

    assert look("s1") == 1
    assert look("s2") == 0
    (path,) = (tmp_path / "watermarks").glob("*.pack")
    data = path.read_bytes()
    path.write_bytes(data[:-3] + b"xyz")  # a damaged body: its digest is not its key's
    assert look("s3") == 1
    assert look("s4") == 0


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("key", "s3rs/data/bench/hist/2006-01-01/part-x.parquet", "its archive key"),
        ("sha256", "not-a-digest", "archive.sha256|field 'sha256'"),
        ("files", 1, "does not hold what the record says"),
    ],
)
def test_a_tampered_archive_reference_is_refused(
    store, s3_resource, s3_client, bucket, monkeypatch, field, value, error
):
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "8192")
    store.update(T, add_days(0, 40))
    raw = stored(s3_client, bucket)
    raw["archive"][field] = value
    body = json.dumps(raw).encode()
    with pytest.raises(WatermarkError, match=error):
        store._parse(T, body, None)


def test_cleanup_deletes_old_archives_no_kept_record_references(store, s3_resource, s3_client,
                                                                 bucket):
    """Archives are immutable and a copy may reference an old one, so nothing deletes them
    on write; `watermark cleanup-backups` deletes those past its cutoff that neither the
    primary, a kept copy nor an edit copy references."""
    store.update(T, add_days(0, 73))
    store.write_copies(T)
    used = stored(s3_client, bucket)["archive"]["key"]
    orphan = LAYOUT.watermark_archive(T, "ab" * 16)  # a crash between its PUT and the CAS
    s3_client.put_object(Bucket=bucket, Key=orphan, Body=b"{}")
    later = datetime.now() + timedelta(days=30)

    dry = store.cleanup_copies(7, dry_run=True, now=later)
    assert dry.archives == [orphan] and orphan in dry.deleted
    assert s3_client.head_object(Bucket=bucket, Key=orphan)  # a dry run deletes nothing

    done = store.cleanup_copies(7, now=later)
    assert done.archives == [orphan] and not done.failed
    listed = s3_client.list_objects_v2(Bucket=bucket, Prefix=LAYOUT.watermark_archives(T))
    assert [o["Key"] for o in listed["Contents"]] == [used]
    archive.forget_cache()
    assert len(store_for(s3_resource, "run-c").read(T, fresh=True).partitions) == 73
    # within the cutoff an unreferenced archive stays: its record may not be written yet
    s3_client.put_object(Bucket=bucket, Key=orphan, Body=b"{}")
    assert store.cleanup_copies(7).archives == []


OLD = datetime(2020, 1, 1)


def loaded_long_ago(rec: WatermarkRecord) -> None:
    for load in rec.loaded_partitions.values():
        load.loaded_at = OLD


def test_status_reads_no_archive_when_the_summary_answers(store, s3_resource, s3_client, bucket):
    """`s3rs status` (issue 18): a folded record whose archived partitions were loaded more
    than a day ago is shown from its reference's summary, without the archive GET, and
    shows what the whole record shows; one loaded within the day, or a reference written
    before summaries, is read whole."""
    from datetime import UTC

    from s3rs_assets.config import TableConfig
    from s3rs_assets.status import read_for_status, table_status

    cfg = TableConfig.from_dict({"name": T, "start": "2006-01-01"})
    now = datetime.now(UTC)
    newest = START + timedelta(days=100 * 80)

    def look(body: bytes) -> tuple[dict, int]:
        archive.forget_cache()
        reader = store_for(s3_resource, "status")
        gets = Count(reader.client, "GetObject", "/watermarks/archives/")
        rec = read_for_status(reader, T, body, now)
        return table_status(cfg, newest, rec, now).as_json(), gets.n

    def whole() -> dict:
        archive.forget_cache()
        rec = store_for(s3_resource, "whole").read(T, fresh=True)
        assert rec is not None and len(rec.partitions) == 45
        return table_status(cfg, newest, rec, now).as_json()

    def primary() -> bytes:
        key = LAYOUT.watermark_primary(T)
        return s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()

    store.update(T, add_days(0, 40))
    store.update(T, add_days(40, 45, loaded=False))  # the newest partitions not loaded yet
    ref = stored(s3_client, bucket)["archive"]
    assert ref["summary"]["last_run_id"] == RUN and ref["summary"]["loaded_to"] is not None
    # loaded within the day: rows_last_day needs the archived loads
    recent, gets = look(primary())
    assert gets == 1 and recent == whole() and recent["rows_last_day"] == 40 * 13

    store.update(T, loaded_long_ago)
    body = primary()
    assert json.loads(body)["archive"]["summary"]["last_loaded_at"] == OLD.isoformat()
    old, gets = look(body)
    assert gets == 0 and old == whole()
    assert old["rows_last_day"] == 0 and old["newest_loaded"] == whole()["newest_loaded"]

    # a reference written before summaries: the archive is read, as by any reader
    doc = json.loads(body)
    del doc["archive"]["summary"]
    unsummarized, gets = look(json.dumps(doc, separators=(",", ":")).encode())
    assert gets == 1 and unsummarized == old

    # a summary the archive does not bear out is refused when the archive is read
    doc = json.loads(body)
    doc["archive"]["summary"]["loaded_to"] = "2030-01-01T00:00:00"
    s3_client.put_object(
        Bucket=bucket, Key=LAYOUT.watermark_primary(T), Body=json.dumps(doc).encode()
    )
    archive.forget_cache()
    with pytest.raises(WatermarkError, match="does not hold what the record says"):
        store_for(s3_resource, "tampered").read(T, fresh=True)
