"""WatermarkStore against a real moto S3 server: mirrors, CAS, retries, recovery, cleanup.

Stores are built by `io_manager.store_for` (the one builder) on an `S3Resource`, so the
client is the one production uses (botocore standard retries). Faults are injected on
that real boto3 client through botocore's event system (`before-send.s3.PutObject`
answering with a canned 412/409/503 or raising a connection error), so every other request
still goes over HTTP to moto.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError

from s3rs_assets.errors import ConfigError, WatermarkConflict, WatermarkError
from s3rs_assets.io_manager import store_for
from s3rs_assets.layout import Layout
from s3rs_assets.resources import S3Resource
from s3rs_assets.watermark import (
    FileEntry,
    PartitionState,
    Position,
    WatermarkRecord,
)
from s3rs_assets.watermark.reports import UpdateResult
from s3rs_assets.watermark.store import EventLogFallback, WatermarkStore

T = "sales.orders"
PREFIX = "s3rs"
LAYOUT = Layout(PREFIX)


def primary(table: str = T) -> str:
    return LAYOUT.watermark_primary(table)


def daily(table: str = T, when: datetime | None = None) -> str:
    return LAYOUT.watermark_daily(table, (when or datetime.now(UTC)).date())


def session_key(table: str = T, session: str = "run-a") -> str:
    return LAYOUT.watermark_session(table, session)


# ----------------------------------------------------------------------------- helpers


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_: Any):
        yield self._body


class Inject:
    """Answer the first `times` matching S3 requests (None = all) with an error."""

    def __init__(
        self,
        client: Any,
        key_part: str,
        *,
        status: int = 412,
        code: str = "PreconditionFailed",
        times: int | None = 1,
        op: str = "PutObject",
        exc: Exception | None = None,
    ):
        self.key_part, self.status, self.code, self.times, self.exc = (
            key_part,
            status,
            code,
            times,
            exc,
        )
        self.seen = 0
        self.injected = 0
        client.meta.events.register(f"before-send.s3.{op}", self)

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        if self.key_part not in request.url:
            return None
        self.seen += 1
        if self.times is not None and self.injected >= self.times:
            return None
        self.injected += 1
        if self.exc is not None:
            raise self.exc
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>'
            f"{self.code}</Code><Message>injected by test</Message>"
            "<RequestId>test</RequestId></Error>"
        ).encode()
        headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}
        return AWSResponse(request.url, self.status, headers, _Raw(body))


def resource(bucket: str, retries: int | None = None) -> S3Resource:
    """The S3 resource of a test bucket; `retries` sets botocore's retry budget."""
    if retries is None:
        return S3Resource(bucket=bucket, prefix=PREFIX)
    return S3Resource(bucket=bucket, prefix=PREFIX, max_attempts=retries)


def make_store(
    s3: S3Resource,
    session: str | None = "run-a",
    event_log_fallback: EventLogFallback | None = None,
) -> WatermarkStore:
    """A store from the one builder; tests stand in their own event-log source."""
    store = store_for(s3, session)
    if event_log_fallback is not None:
        store.event_log_fallback = event_log_fallback
    return store


def add_chunk(part: str, hour: int, rows: int = 10, key: str | None = None):
    """A change: partition `part` (a day) gets one more file and its cursor moves."""
    day = datetime.fromisoformat(part)
    fkey = key or f"data/{part}/chunk-{hour:02d}.parquet"

    def change(rec: WatermarkRecord) -> None:
        p = rec.partitions.get(part) or PartitionState(
            window_start=day, window_end=day + timedelta(days=1)
        )
        if all(f.key != fkey for f in p.files):
            p.files.append(FileEntry(key=fkey, rows=rows, bytes=100, md5="0" * 32))
        p.cursor = Position(c=day + timedelta(hours=hour), pk=[hour])
        rec.partitions[part] = p

    return change


def body_of(s3: Any, bucket: str, key: str) -> bytes:
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def exists(s3: Any, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except s3.exceptions.ClientError:
        return False


def all_keys(s3: Any, bucket: str) -> set[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"] for p in pages for o in p.get("Contents", [])}


def delete_dailies(s3: Any, bucket: str) -> None:
    for k in all_keys(s3, bucket):
        if "/backups/daily/" in k:
            s3.delete_object(Bucket=bucket, Key=k)


@pytest.fixture
def store(s3_resource) -> WatermarkStore:
    return make_store(s3_resource)


def run(store: WatermarkStore, table: str, *changes: Any) -> UpdateResult:
    """What a run does: a checkpoint per change, then the backups at its end."""
    results = [store.update(table, change) for change in changes]
    store.write_copies(table)
    return results[-1]


@pytest.fixture
def saved(store: WatermarkStore) -> WatermarkRecord:
    """A table with two chunks of progress in one partition, backed up at the run's end."""
    return run(store, T, add_chunk("2025-01-01", 5), add_chunk("2025-01-01", 9)).record


# ------------------------------------------------------------------------ saving


def test_update_writes_the_primary_and_write_copies_copies_it(store, s3_client, bucket):
    result = store.update(T, add_chunk("2025-01-01", 5))
    rec, info = result.record, result.save
    assert result.recovery is None
    keys = {
        "primary": f"{PREFIX}/watermarks/tables/{T}.json",
        "daily": f"{PREFIX}/watermarks/backups/daily/{T}_{datetime.now(UTC):%Y%m%d}.json",
        "session": f"{PREFIX}/watermarks/backups/sessions/run-a/{T}.json",
    }
    assert info.written == {"primary": keys["primary"]} and info.failed == {}
    assert not exists(s3_client, bucket, keys["daily"])  # backups wait for the run's end
    assert not exists(s3_client, bucket, keys["session"])

    backups = store.write_copies(T)
    assert backups.written == {"daily": keys["daily"], "session": keys["session"]}
    assert backups.failed == {} and backups.etag == info.etag
    bodies = {loc: body_of(s3_client, bucket, k) for loc, k in keys.items()}
    assert len(set(bodies.values())) == 1  # byte-identical mirrors
    stored = WatermarkRecord.from_json(bodies["primary"], table_name=T)
    meta = stored.backup_metadata
    assert meta.session_id == "run-a"
    assert meta.backup_locations == ["primary", "daily", "session"]
    assert meta.recovered_from is None
    assert abs(meta.saved_at - datetime.now(UTC).replace(tzinfo=None)) < timedelta(minutes=1)
    # verified by ETag = MD5 of the body, not by a read-back
    assert s3_client.head_object(Bucket=bucket, Key=keys["primary"])["ETag"] == info.etag
    assert info.etag.strip('"') == hashlib.md5(bodies["primary"]).hexdigest()
    assert stored == rec
    assert stored.s3_file_count == 1 and stored.mysql_rows_extracted == 10
    assert store.read(T) == rec
    merged = info.merged(backups).as_metadata()
    assert merged["written"] == ["daily", "primary", "session"] and merged["failed"] == {}


def test_backup_write_failure_is_logged_and_reported_not_fatal(bucket, s3_client, caplog):
    store = make_store(resource(bucket, retries=1))
    fault = Inject(store.client, "/backups/sessions/", status=500, code="InternalError", times=None)
    rec = store.update(T, add_chunk("2025-01-01", 5)).record
    with caplog.at_level(logging.ERROR, logger="s3rs.watermark"):
        backups = store.write_copies(T)
    assert fault.injected == 2  # botocore's attempts, no retry loop of ours on top
    assert set(backups.written) == {"daily"}
    assert "InternalError" in backups.failed["session"]
    assert "after 2 attempts" in backups.failed["session"]
    assert any("session backup" in r.getMessage() for r in caplog.records)
    assert store.read(T, fresh=True) == rec
    assert not exists(s3_client, bucket, session_key(T))


def test_write_copies_reads_a_primary_it_has_not_seen_and_skips_a_new_table(
    s3_resource, store, saved, s3_client, bucket
):
    other = make_store(s3_resource, "run-b")
    backups = other.write_copies(T)
    assert backups.written["session"] == session_key(T, "run-b")
    assert body_of(s3_client, bucket, session_key(T, "run-b")) == body_of(
        s3_client, bucket, primary()
    )
    assert other.write_copies("sales.never_synced").written == {}


def test_session_id_defaults_to_a_timestamp(s3_resource):
    store = make_store(s3_resource, session=None)
    assert store.session_id[:8] == f"{datetime.now(UTC):%Y%m%d}"
    store.update(T, add_chunk("2025-01-01", 1))
    backups = store.write_copies(T)
    assert backups.written["session"].endswith(f"/sessions/{store.session_id}/{T}.json")


def test_invalid_names_are_refused(store, s3_resource):
    for bad in ("../etc", "a/b", "x.y.z", "", "tab le", "orders"):
        with pytest.raises(ConfigError, match="invalid table"):
            store.read(bad)
        with pytest.raises(ConfigError, match="invalid table"):
            store.update(bad, lambda rec: None)
    with pytest.raises(ConfigError, match="session id"):
        make_store(s3_resource, session="../x")


# ---------------------------------------------------------------------- recovery


def test_missing_primary_recovers_from_daily_and_writes_it_back(
    store, saved, s3_client, bucket, caplog
):
    s3_client.delete_object(Bucket=bucket, Key=primary())
    with caplog.at_level(logging.WARNING, logger="s3rs.watermark"):
        report = store.recover(T)
    rec = report.record
    assert rec.backup_metadata.recovered_from == "daily"
    assert rec.partitions == saved.partitions
    assert rec.last_mysql_data_timestamp == datetime(2025, 1, 1, 9)
    assert report.source == "daily" and report.recovered
    assert report.key == daily()
    assert report.primary_error == "missing"
    written = WatermarkRecord.from_json(body_of(s3_client, bucket, primary()))
    assert written.backup_metadata.recovered_from == "daily"
    assert written.partitions == saved.partitions
    assert any("recovered from daily" in r.getMessage() for r in caplog.records)
    # the next read uses the restored primary
    assert store.recover(T).source == "primary"


def _corrupt(kind: str, text: bytes) -> bytes:
    if kind == "truncated":
        return text[: len(text) // 2]
    raw = json.loads(text)
    if kind == "schema99":
        raw["schema_version"] = 99
    elif kind == "future":
        future = (datetime.now() + timedelta(days=2)).isoformat()
        raw["last_mysql_data_timestamp"] = future
        for p in raw["partitions"].values():
            p["cursor"]["c"] = future
    return json.dumps(raw).encode()


@pytest.mark.parametrize(
    ("kind", "why"),
    [
        ("truncated", "not valid JSON"),
        ("schema99", "schema_version 99"),
        ("future", "in the future of the source clock"),
    ],
)
def test_invalid_primary_recovers_from_daily(store, saved, s3_client, bucket, kind, why):
    key = primary()
    s3_client.put_object(
        Bucket=bucket, Key=key, Body=_corrupt(kind, body_of(s3_client, bucket, key))
    )
    report = store.recover(T, now=datetime.now())
    rec = report.record
    assert rec.backup_metadata.recovered_from == "daily"
    assert rec.partitions == saved.partitions
    assert why in report.primary_error
    assert T in report.primary_error
    assert WatermarkRecord.from_json(body_of(s3_client, bucket, key)).partitions == saved.partitions


def test_cursor_within_a_minute_of_the_source_clock_is_valid(store, s3_client, bucket):
    now = datetime(2025, 1, 1, 9, 0, 30)
    store.update(T, add_chunk("2025-01-01", 9))  # cursor 09:00:00, no backups yet
    # the clock check runs on what is read from S3, not on the store's own writes
    assert store.read(T, now=now, fresh=True).backup_metadata.recovered_from is None
    assert store.read(T, now=now - timedelta(seconds=59), fresh=True) is not None
    with pytest.raises(WatermarkError, match="in the future of the source clock"):
        store.read(T, now=now - timedelta(minutes=5), fresh=True)


def test_primary_and_daily_gone_recovers_latest_then_older_session(s3_resource, s3_client, bucket):
    a = make_store(s3_resource, session="run-a")
    b = make_store(s3_resource, session="run-b")
    run(a, T, add_chunk("2025-01-01", 5))
    run(b, T, add_chunk("2025-01-01", 9))  # newer; same second as a's, ties by saved_at
    s3_client.delete_object(Bucket=bucket, Key=primary())
    delete_dailies(s3_client, bucket)

    reader = make_store(s3_resource, session="reader")
    report = reader.recover(T)
    assert report.record.backup_metadata.recovered_from == "session"
    assert report.key == session_key(T, "run-b")
    assert report.record.last_mysql_data_timestamp == datetime(2025, 1, 1, 9)

    # only the older session backup is left
    for k in (primary(), session_key(T, "run-b"), session_key(T, "reader")):
        s3_client.delete_object(Bucket=bucket, Key=k)
    delete_dailies(s3_client, bucket)
    report = reader.recover(T)
    assert report.record.backup_metadata.recovered_from == "session"
    assert report.key == session_key(T, "run-a")
    assert report.record.last_mysql_data_timestamp == datetime(2025, 1, 1, 5)


def test_newest_daily_is_used_when_todays_is_missing(store, saved, s3_client, bucket):
    today = daily()
    older = daily(T, datetime.now(UTC) - timedelta(days=3))
    oldest = daily(T, datetime.now(UTC) - timedelta(days=9))
    s3_client.copy_object(Bucket=bucket, Key=older, CopySource={"Bucket": bucket, "Key": today})
    s3_client.put_object(Bucket=bucket, Key=oldest, Body=WatermarkRecord.new(T).to_json())
    for k in (today, primary()):
        s3_client.delete_object(Bucket=bucket, Key=k)
    report = store.recover(T)
    assert report.key == older
    assert report.record.partitions == saved.partitions


def test_invalid_backups_are_skipped(store, saved, s3_client, bucket):
    s3_client.delete_object(Bucket=bucket, Key=primary())
    s3_client.put_object(Bucket=bucket, Key=daily(), Body=b'{"table_name": ')
    report = store.recover(T)
    assert report.record.backup_metadata.recovered_from == "session"
    assert report.record.partitions == saved.partitions
    assert [s for s, _, _ in report.rejected] == ["daily"]
    # the recovery rewrote today's daily with the valid record
    assert WatermarkRecord.from_json(body_of(s3_client, bucket, daily()))


def test_event_log_is_the_last_resort(s3_resource, saved, s3_client, bucket):
    text = saved.to_json()
    asked: list[str] = []

    def from_event_log(table: str) -> str | None:
        asked.append(table)
        return text

    store = make_store(s3_resource, "run-b", event_log_fallback=from_event_log)
    for k in all_keys(s3_client, bucket):
        s3_client.delete_object(Bucket=bucket, Key=k)
    rec = store.read(T)
    assert asked == [T] and rec.partitions == saved.partitions
    assert not exists(s3_client, bucket, primary())  # reading never writes
    report, _ = store.peek(T)
    assert report.source == "event_log"
    report = store.recover(T)  # the explicit step writes it back
    assert report.record.backup_metadata.recovered_from == "event_log"
    assert exists(s3_client, bucket, primary())


def test_event_log_record_is_validated(s3_resource, bucket):
    bad = WatermarkRecord.new("sales.other").to_json()
    store = make_store(s3_resource, event_log_fallback=lambda t: bad)
    with pytest.raises(WatermarkError, match="s3rs watermark set") as err:
        store.read(T)
    assert "belongs to table 'sales.other'" in str(err.value)


def test_event_log_failure_is_not_taken_for_a_new_table(s3_resource, bucket):
    def broken(table: str) -> str | None:
        raise RuntimeError("dagster instance unreachable")

    store = make_store(s3_resource, event_log_fallback=broken)
    with pytest.raises(WatermarkError, match="unreachable"):
        store.read(T)


def test_brand_new_table_reads_as_none(s3_resource, bucket):
    store = make_store(s3_resource, event_log_fallback=lambda t: None)
    assert store.read_versioned(T) == (None, None)
    assert store.recover(T).source is None
    result = store.update(T, add_chunk("2025-01-01", 1))
    assert result.record.s3_file_count == 1 and result.recovery is None


def test_invalid_primary_and_nothing_valid_left_asks_for_watermark_set(store, s3_client, bucket):
    s3_client.put_object(Bucket=bucket, Key=primary(), Body=b"{not json")
    with pytest.raises(WatermarkError) as err:
        store.read(T)
    msg = str(err.value)
    assert T in msg and "not valid JSON" in msg
    assert f"s3rs watermark set -t {T} --timestamp" in msg
    assert body_of(s3_client, bucket, primary()) == b"{not json"  # untouched
    with pytest.raises(WatermarkError, match="s3rs watermark set"):
        store.update(T, add_chunk("2025-01-01", 1))
    assert body_of(s3_client, bucket, primary()) == b"{not json"


def test_missing_primary_with_only_invalid_backups_is_an_error_not_a_reset(
    store, saved, s3_client, bucket
):
    s3_client.delete_object(Bucket=bucket, Key=primary())
    for k in (daily(), session_key(T)):
        s3_client.put_object(Bucket=bucket, Key=k, Body=b"garbage")
    with pytest.raises(WatermarkError, match="is missing and no valid copy"):
        store.update(T, add_chunk("2025-01-02", 1))
    assert not exists(s3_client, bucket, primary())


def test_update_after_losing_the_primary_continues_from_the_recovered_record(
    store, saved, s3_client, bucket
):
    s3_client.delete_object(Bucket=bucket, Key=primary())
    result = store.update(T, add_chunk("2025-01-02", 3))
    rec = result.record
    assert set(rec.partitions) == {"2025-01-01", "2025-01-02"}
    assert rec.s3_file_count == 3 and rec.mysql_rows_extracted == 30
    assert rec.last_mysql_data_timestamp == datetime(2025, 1, 2, 3)
    assert store.read(T) == rec
    assert rec.backup_metadata.recovered_from is None  # a normal save after the recovery
    assert result.recovery.source == "daily"  # what the update's read had to do


def test_recovery_write_back_that_loses_a_race_rereads(s3_resource, bucket, s3_client):
    store = make_store(s3_resource)
    saved = run(store, T, add_chunk("2025-01-01", 5)).record
    s3_client.delete_object(Bucket=bucket, Key=primary())
    fault = Inject(store.client, "/watermarks/tables/", times=1)
    rec = store.recover(T).record
    assert fault.injected == 1 and fault.seen == 2
    assert rec.partitions == saved.partitions
    assert rec.backup_metadata.recovered_from == "daily"


# -------------------------------------------------------------- compare-and-swap


class AtomicPuts:
    """S3 applies a conditional PUT atomically; moto checks the condition and then writes
    without a lock, so two racing conditional PUTs can both succeed there (STACK.md). One
    lock around each PutObject call of the given stores makes moto behave like S3."""

    def __init__(self, *stores: WatermarkStore):
        self.lock = threading.Lock()
        clients = {id(st.client): st.client for st in stores}  # stores may share a client
        for client in clients.values():
            client.meta.events.register("before-call.s3.PutObject", self.enter)
            client.meta.events.register("after-call.s3.PutObject", self.leave)
            client.meta.events.register("after-call-error.s3.PutObject", self.leave)

    def enter(self, **_: Any) -> None:
        self.lock.acquire()

    def leave(self, **_: Any) -> None:
        self.lock.release()


def _race(s3_resource, bucket: str, table: str) -> int:
    """Two runs read the same record, then both write: one must lose and re-apply.
    Returns how many times the change functions ran."""
    stores = {s: make_store(s3_resource, f"{table}-{s}") for s in ("run-a", "run-b")}
    AtomicPuts(*stores.values())
    barrier = threading.Barrier(2, timeout=10)
    errors: list[BaseException] = []
    calls: list[str] = []

    def run(session: str, part: str) -> None:
        first = [True]
        inner = add_chunk(part, 7)

        def change(rec: WatermarkRecord) -> None:
            calls.append(session)
            inner(rec)
            if first[0]:  # both runs have read the same record before either writes
                first[0] = False
                barrier.wait()

        try:
            stores[session].update(table, change)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [
        threading.Thread(target=run, args=("run-a", "2025-01-02")),
        threading.Thread(target=run, args=("run-b", "2025-01-03")),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    return len(calls)


def test_two_runs_racing_on_different_partitions_both_land(s3_resource, bucket):
    for round_ in range(5):
        table = f"sales.race{round_}"
        make_store(s3_resource, "seed").update(table, add_chunk("2025-01-01", 1))
        assert _race(s3_resource, bucket, table) >= 3  # the loser re-applied its change
        rec = make_store(s3_resource, f"check{round_}").read(table)
        assert set(rec.partitions) == {"2025-01-01", "2025-01-02", "2025-01-03"}
        assert rec.s3_file_count == 3


@pytest.mark.parametrize(
    ("status", "code"), [(412, "PreconditionFailed"), (409, "ConditionalRequestConflict")]
)
def test_lost_race_on_first_put_is_retried(store, saved, status, code):
    calls: list[int] = []
    inner = add_chunk("2025-01-02", 4)

    def change(rec: WatermarkRecord) -> None:
        calls.append(1)
        inner(rec)

    fault = Inject(store.client, "/watermarks/tables/", status=status, code=code)
    result = store.update(T, change)
    assert fault.injected == 1
    assert len(calls) == 2 and result.save.cas_rounds == 2
    assert set(store.read(T).partitions) == {"2025-01-01", "2025-01-02"}
    assert set(result.record.partitions) == {"2025-01-01", "2025-01-02"}


def test_incompatible_change_raises_conflict_and_leaves_primary(
    s3_resource, store, saved, s3_client, bucket
):
    other = make_store(s3_resource, session="run-b")
    seen: list[int] = []

    def change(rec: WatermarkRecord) -> None:
        part = rec.partitions["2025-01-01"]
        if part.recomputes:  # another run restarted this window meanwhile
            raise WatermarkConflict(f"partition 2025-01-01 of {T} was recomputed by run-b")
        seen.append(1)
        add_chunk("2025-01-01", 11)(rec)
        if len(seen) == 1:  # run-b wins the race with an incompatible change

            def recompute(r: WatermarkRecord) -> None:
                r.partitions["2025-01-01"].recomputes += 1

            other.update(T, recompute)

    with pytest.raises(WatermarkConflict, match="recomputed by run-b"):
        store.update(T, change)
    after = WatermarkRecord.from_json(body_of(s3_client, bucket, primary()))
    assert after.partitions["2025-01-01"].recomputes == 1
    assert after.last_mysql_data_timestamp == datetime(2025, 1, 1, 9)  # ours not applied
    assert after.backup_metadata.session_id == "run-b"


def test_change_that_breaks_the_record_writes_nothing(store, saved, s3_client, bucket):
    before = body_of(s3_client, bucket, primary())

    def rename(rec: WatermarkRecord) -> None:
        rec.table_name = "sales.other"

    with pytest.raises(WatermarkError, match="belongs to table 'sales.other'"):
        store.update(T, rename)
    assert body_of(s3_client, bucket, primary()) == before


def test_write_replaced_behind_our_back_is_caught_by_the_next_put(
    store, saved, s3_client, bucket
):
    """An unconditional writer (an operator's `aws s3 cp`) replaces the primary right after
    our write: our next conditional PUT fails, we re-read once and re-apply on top."""
    key = primary()
    rival = WatermarkRecord.from_json(body_of(s3_client, bucket, key))
    add_chunk("2025-01-03", 2)(rival)
    rival.refresh()
    fired: list[str] = []

    def overwrite(http_response: Any, **_: Any) -> None:
        if not fired and "/watermarks/tables/" in http_response.url:
            fired.append(http_response.url)
            s3_client.put_object(Bucket=bucket, Key=key, Body=rival.to_json())

    store.client.meta.events.register("after-call.s3.PutObject", overwrite)
    store.update(T, add_chunk("2025-01-02", 4))
    calls = Calls(store)
    result = store.update(T, add_chunk("2025-01-04", 4))
    assert fired and result.save.cas_rounds == 2
    assert calls.count("GetObject", "/tables/") == 1 and calls.count("PutObject") == 2
    assert {"2025-01-03", "2025-01-04"} <= set(result.record.partitions)
    assert store.read(T, fresh=True) == result.record


def test_primary_deleted_between_read_and_write_is_recovered_and_reapplied(
    store, saved, s3_client, bucket
):
    deleted: list[int] = []
    inner = add_chunk("2025-01-02", 4)

    def change(rec: WatermarkRecord) -> None:
        if not deleted:
            deleted.append(1)
            s3_client.delete_object(Bucket=bucket, Key=primary())
        inner(rec)

    result = store.update(T, change)  # If-Match on a missing key: 404, handled as a lost race
    assert set(result.record.partitions) == {"2025-01-01", "2025-01-02"}
    assert result.save.cas_rounds == 2


def test_unreachable_primary_is_an_error_not_a_recovery(bucket, s3_client):
    run(make_store(resource(bucket)), T, add_chunk("2025-01-01", 5))
    before = {k: body_of(s3_client, bucket, k) for k in all_keys(s3_client, bucket)}
    store = make_store(resource(bucket, retries=1), "run-b")  # has not read the record yet
    Inject(
        store.client, "/watermarks/tables/", op="GetObject", status=503, code="SlowDown", times=None
    )
    with pytest.raises(WatermarkError, match=f"cannot read the watermark of {T}.*SlowDown"):
        store.update(T, add_chunk("2025-01-02", 4))
    assert {k: body_of(s3_client, bucket, k) for k in all_keys(s3_client, bucket)} == before


# ----------------------------------------------------------------------- retries


@pytest.mark.parametrize("fault", ["slowdown", "connection"])
def test_transient_errors_are_retried_by_botocore_alone(bucket, moto_endpoint, fault):
    store = make_store(resource(bucket))  # S3Resource: standard mode, max_attempts=6
    store.update(T, add_chunk("2025-01-01", 5))
    kw: dict[str, Any] = (
        {"status": 503, "code": "SlowDown"}
        if fault == "slowdown"
        else {"exc": ConnectionClosedError(endpoint_url=moto_endpoint)}
    )
    inj = Inject(store.client, "/watermarks/tables/", times=2, **kw)
    result = store.update(T, add_chunk("2025-01-02", 4))
    assert inj.injected == 2 and inj.seen == 3  # one layer: the third request succeeded
    assert result.save.primary_attempts == 3
    assert store.read(T) == result.record and "2025-01-02" in result.record.partitions


def test_slowdown_forever_fails_and_leaves_everything_unchanged(bucket, s3_client):
    store = make_store(resource(bucket, retries=2))
    store.update(T, add_chunk("2025-01-01", 5))
    before = {k: body_of(s3_client, bucket, k) for k in all_keys(s3_client, bucket)}
    inj = Inject(store.client, "/watermarks/tables/", status=503, code="SlowDown", times=None)
    with pytest.raises(WatermarkError, match="SlowDown.*after 3 attempts") as err:
        store.update(T, add_chunk("2025-01-02", 4))
    assert T in str(err.value) and "previous record is unchanged" in str(err.value)
    assert inj.injected == 3  # bounded by botocore's budget alone: no second retry layer
    after = {k: body_of(s3_client, bucket, k) for k in all_keys(s3_client, bucket)}
    assert after == before  # primary byte-for-byte, and no backup got ahead of it


# ------------------------------------------------------------ what a run costs in S3


class Calls:
    """Every S3 API call a store's client makes, as (operation, key or prefix); botocore's
    retries of one call are not counted."""

    def __init__(self, store: WatermarkStore):
        self.seen: list[tuple[str, str]] = []
        store.client.meta.events.register("before-parameter-build.s3", self.record)

    def record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.seen.append((model.name, params.get("Key") or params.get("Prefix") or ""))

    def count(self, op: str, key_part: str = "") -> int:
        return sum(1 for o, k in self.seen if o == op and key_part in k)


def test_updates_of_a_run_cost_one_read_then_one_put_each(s3_resource, s3_client, bucket):
    run(make_store(s3_resource, "seed"), T, add_chunk("2025-01-01", 1))
    store = make_store(s3_resource, "run-b")
    calls = Calls(store)
    n = 6
    for hour in range(1, n + 1):
        result = store.update(T, add_chunk("2025-01-02", hour))
        assert result.save.cas_rounds == 1
    assert calls.count("GetObject", "/tables/") == 1  # the first update's read, none after
    assert calls.count("PutObject", "/tables/") == n
    assert len(calls.seen) == 1 + n  # no backup, listing, HEAD or read-back
    assert store.read(T) == result.record  # from memory
    assert len(calls.seen) == 1 + n

    backups = store.write_copies(T)  # the run's end
    assert calls.count("PutObject", "/backups/daily/") == 1
    assert calls.count("PutObject", "/backups/sessions/run-b/") == 1
    assert len(calls.seen) == 1 + n + 2
    assert set(backups.written) == {"daily", "session"}
    for key in (daily(), session_key(T, "run-b")):
        assert body_of(s3_client, bucket, key) == body_of(s3_client, bucket, primary())
    stored = WatermarkRecord.from_json(body_of(s3_client, bucket, primary()), table_name=T)
    assert stored == result.record
    assert stored.partitions["2025-01-02"].cursor.pk == [n] and stored.s3_file_count == 1 + n

    assert store.read(T, fresh=True) == stored  # forced: one GET
    assert calls.count("GetObject", "/tables/") == 2


def test_a_brand_new_table_is_probed_once_and_backed_up_at_the_end(store, s3_client, bucket):
    calls = Calls(store)
    for hour in (1, 2, 3):
        store.update(T, add_chunk("2025-01-01", hour))
    # one look for a primary or any copy (there is none), then the three writes
    assert calls.count("GetObject") == 2  # the primary and today's daily backup
    assert calls.count("ListObjectsV2") == 2  # daily and session backups
    assert calls.count("PutObject", "/tables/") == 3 and len(calls.seen) == 7
    assert not exists(s3_client, bucket, daily())
    store.write_copies(T)
    assert body_of(s3_client, bucket, daily()) == body_of(s3_client, bucket, primary())
    assert body_of(s3_client, bucket, session_key(T)) == body_of(s3_client, bucket, primary())


def test_a_concurrent_writer_costs_exactly_one_reread(s3_resource, bucket):
    a, b = make_store(s3_resource, "run-a"), make_store(s3_resource, "run-b")
    a.update(T, add_chunk("2025-01-01", 1))
    a.update(T, add_chunk("2025-01-01", 2))
    b.update(T, add_chunk("2025-01-02", 5))  # another run writes in between
    calls = Calls(a)
    result = a.update(T, add_chunk("2025-01-01", 3))
    assert result.save.cas_rounds == 2
    assert calls.count("PutObject", "/tables/") == 2  # 412, then the re-applied change
    assert calls.count("GetObject", "/tables/") == 1
    assert len(calls.seen) == 3
    assert set(result.record.partitions) == {"2025-01-01", "2025-01-02"}
    assert result.record.partitions["2025-01-01"].cursor.pk == [3]
    a.update(T, add_chunk("2025-01-01", 4))
    assert len(calls.seen) == 4  # back to one PUT per update


def test_writes_are_verified_by_content_md5_and_etag(store, saved, s3_client, bucket):
    sent: dict[str, Any] = {}

    def capture(request: Any, **_: Any) -> None:
        if "/watermarks/tables/" in request.url:
            sent.update(request.headers)

    store.client.meta.events.register("before-send.s3.PutObject", capture)
    store.update(T, add_chunk("2025-01-02", 1))
    body = body_of(s3_client, bucket, primary())
    assert sent["Content-MD5"] == base64.b64encode(hashlib.md5(body).digest())

    def wrong_etag(parsed: dict[str, Any], **_: Any) -> None:
        parsed["ETag"] = '"' + "0" * 32 + '"'

    store.client.meta.events.register("after-call.s3.PutObject", wrong_etag)
    with pytest.raises(WatermarkError, match=f"watermark of {T}: .*not the MD5.*not verified"):
        store.update(T, add_chunk("2025-01-02", 2))
    store.client.meta.events.unregister("after-call.s3.PutObject", wrong_etag)
    calls = Calls(store)
    store.update(T, add_chunk("2025-01-02", 3))
    assert calls.count("GetObject", "/tables/") == 1  # an unverified write is not trusted


# -------------------------------------------------------------------- validation


def _valid_json(**changes: Any) -> dict[str, Any]:
    rec = WatermarkRecord.new(T)
    add_chunk("2025-01-01", 5)(rec)
    raw = json.loads(rec.refresh().to_json())
    raw.update(changes)
    return raw


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (_valid_json(mysql_rows_extracted=-5), "'mysql_rows_extracted': Input should be"),
        (_valid_json(s3_file_count=-1), "'s3_file_count'"),
        (_valid_json(s3_file_count=5), "s3_file_count is 5 but the partition manifests sum to 1"),
        (
            _valid_json(mysql_rows_extracted=99),
            "mysql_rows_extracted is 99 but the partition manifests sum to 10",
        ),
        (_valid_json(table_name="sales.other"), "belongs to table 'sales.other'"),
        (_valid_json(schema_version=0), "schema_version 0 is invalid"),
        (_valid_json(mysql_status="bogus"), "'mysql_status'"),
        (_valid_json(last_mysql_data_timestamp="yesterday"), "'last_mysql_data_timestamp'"),
    ],
)
def test_invalid_records_get_clear_errors(store, s3_client, bucket, raw, expected):
    s3_client.put_object(Bucket=bucket, Key=primary(), Body=json.dumps(raw))
    with pytest.raises(WatermarkError) as err:
        store.read(T)
    msg = str(err.value)
    assert expected in msg, msg
    assert T in msg and "s3rs watermark set" in msg


def test_record_check_directly():
    rec = WatermarkRecord.new(T)
    add_chunk("2025-01-01", 5)(rec)
    rec.refresh()
    assert rec.check(table_name=T, now=datetime(2025, 1, 1, 5)) is rec
    with pytest.raises(
        WatermarkError, match=f"watermark of {T}: .* is in the future of the source clock"
    ):
        rec.check(now=datetime(2025, 1, 1, 4, 58))
    rec.s3_file_count = 7
    with pytest.raises(WatermarkError, match="s3_file_count is 7"):
        rec.check()
    # old documents carry 'Z' timestamps: aware values compare as UTC
    legacy = json.dumps({"table_name": T, "last_mysql_data_timestamp": "2099-01-01T00:00:00Z"})
    old = WatermarkRecord.from_json(legacy, table_name=T)
    with pytest.raises(WatermarkError, match="in the future"):
        old.check(now=datetime(2025, 1, 1))


# ------------------------------------------------------------ status and cleanup


def test_copy_status_reports_every_location(s3_resource, store, saved, s3_client, bucket):
    run(make_store(s3_resource, session="run-b"), T, add_chunk("2025-01-02", 1))
    st = store.copy_status(T)
    assert st["healthy"] is True
    assert st["primary"]["present"] and st["primary"]["valid"]
    assert st["primary"]["last_mysql_data_timestamp"] == "2025-01-02T01:00:00.000000"
    assert 0 <= st["primary"]["age_seconds"] < 120
    assert st["daily"]["valid"] and st["daily"]["today"] and st["daily"]["count"] == 1
    assert st["daily"]["current"] is True
    assert st["session"]["count"] == 2 and st["session"]["current"] is True
    json.dumps(st)  # fit for Dagster metadata

    s3_client.put_object(Bucket=bucket, Key=primary(), Body=b"[]")
    st = store.copy_status(T)
    assert st["primary"]["present"] and not st["primary"]["valid"]
    assert "not a JSON object" in st["primary"]["error"]
    assert st["healthy"] is False
    s3_client.delete_object(Bucket=bucket, Key=primary())
    assert store.copy_status(T)["primary"]["present"] is False


def test_list_tables(s3_resource, store, s3_client, bucket):
    for table in (T, "sales.items", "sales.items_2"):
        run(store, table, add_chunk("2025-01-01", 1))
    s3_client.delete_object(Bucket=bucket, Key=primary("sales.items"))
    assert store.list_tables() == ["sales.items", "sales.items_2", T]


def _three_sessions(s3_resource, bucket, table):
    for i, session in enumerate(("run-1", "run-2", "run-3")):
        run(make_store(s3_resource, session), table, add_chunk("2025-01-01", i + 1))


def test_cleanup_keeps_newest_valid_copy_per_table_even_when_all_are_old(
    s3_resource, store, s3_client, bucket
):
    _three_sessions(s3_resource, bucket, T)
    _three_sessions(s3_resource, bucket, "sales.items")
    # the newest copies of T are corrupt: the newest *valid* one must survive
    s3_client.put_object(Bucket=bucket, Key=daily(), Body=b"{")
    s3_client.put_object(Bucket=bucket, Key=session_key(T, "run-3"), Body=b"{")
    primaries = {
        k: body_of(s3_client, bucket, k)
        for k in all_keys(s3_client, bucket)
        if "/watermarks/tables/" in k
    }

    later = datetime.now(UTC) + timedelta(days=30)
    report = store.cleanup_copies(days_to_keep=7, now=later)
    left = all_keys(s3_client, bucket)
    assert report.kept_newest[T] == session_key(T, "run-2")
    # run-3's save wrote its daily and session copies with the same body: either is newest
    assert report.kept_newest["sales.items"] in {
        daily("sales.items"),
        session_key("sales.items", "run-3"),
    }
    backups = {k for k in left if "/backups/" in k}
    assert backups == set(report.kept_newest.values())
    assert len(report.deleted) == 8 - 2 and report.failed == {}
    assert {k: body_of(s3_client, bucket, k) for k in primaries} == primaries
    kept = WatermarkRecord.from_json(body_of(s3_client, bucket, session_key(T, "run-2")))
    assert kept.last_mysql_data_timestamp == datetime(2025, 1, 1, 2)


def test_cleanup_dry_run_deletes_nothing(s3_resource, store, s3_client, bucket):
    _three_sessions(s3_resource, bucket, T)
    before = all_keys(s3_client, bucket)
    report = store.cleanup_copies(7, dry_run=True, now=datetime.now(UTC) + timedelta(days=30))
    assert report.dry_run and len(report.deleted) == 3  # 1 daily + 3 sessions, newest kept
    assert all_keys(s3_client, bucket) == before


def test_cleanup_keeps_recent_backups_and_refuses_bad_days(store, saved, s3_client, bucket):
    before = all_keys(s3_client, bucket)
    report = store.cleanup_copies(7)
    assert report.deleted == [] and report.kept_recent == 2
    assert all_keys(s3_client, bucket) == before
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="days_to_keep"):
            store.cleanup_copies(bad)
