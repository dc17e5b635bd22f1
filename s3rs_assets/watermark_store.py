"""Where watermark records live in S3, and the only code that writes them.

Every change is a read-modify-write through `update()`, made compare-and-swap with S3
conditional writes: `If-None-Match: *` when the primary does not exist yet, `If-Match:
<etag>` otherwise. A writer that loses the race (412, or 409 from a concurrent conditional
write; a 404 on If-Match means the primary was deleted meanwhile) drops what it knew,
re-reads and re-applies its change function to the newer record, so two runs working on
different partitions merge; the change function itself raises WatermarkConflict when the
newer record is incompatible with what the run did.

Keys come from `s3rs_assets.layout`: the primary, a daily backup per UTC date and a
session backup per Dagster run id.

Costs are paid once per run, not per checkpoint. A store is the view of one run (one CLI
command, one sensor tick): it keeps, per table, the record and ETag of its own last read
or write of the primary. Its first `update()` of a table reads the primary once; every
later one is a single conditional PUT (`If-Match` the ETag it holds), no GET. `read()`
answers from the same memory once the store has read or written the table; `read(...,
fresh=True)`, `recover()` and `forget()` go back to S3. Nothing is lost by trusting it:
any other writer changes the ETag, so our next PUT fails with 412 and we re-read.

Writes are verified without reading them back: the body goes with its Content-MD5 (S3
rejects a corrupted one) and the ETag S3 returns must be that MD5. S3 calls are retried by
botocore alone (standard mode, set on the S3Resource's client); the store adds no retry
loop, only the compare-and-swap re-apply.

Backups are not written on every update: `write_backups(table)` copies the current record,
byte-identical to the primary, to the daily and session keys. The IO manager calls it at
the end of each stage's materialization, the assets when a stage fails, the CLI after a
manual change, and recovery after it restores a primary. So the backups are at most one
run behind the primary. A failed backup is logged and reported, it never fails the run.
`update()` returns what it did (`UpdateResult`: the saved record, the `SaveInfo`, the
`RecoveryReport` when its read had to recover): nothing travels on the side.

Reading from S3 validates (schema version, types, counts, consistency with the manifests,
cursor not ahead of the source clock); every write validates too. A missing or invalid
primary is recovered transparently from, in order: today's daily backup, the newest daily
backup, the latest session backup, any other session backup (newest first), the event log
(the latest `s3rs/watermark` materialization metadata, `event_log_watermark`); the first
valid candidate is written back to the primary (conditionally) with
`backup_metadata.recovered_from` set. Nothing is ever reset automatically: a table reads as
None only when no copy of its watermark exists anywhere.

Why one module of ~750 lines: the compare-and-swap writes, the backups and the recovery
share the store's private S3 helpers and its per-table memory of the last ETag; split
apart they would have to expose both. What is not the store (its reports, the event-log
source) lives in `watermark_reports` and `watermark_eventlog`.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError, HTTPClientError, IncompleteReadError
from botocore.exceptions import ConnectionError as BotoConnectionError

from s3rs_assets.errors import ConfigError, WatermarkConflict, WatermarkError
from s3rs_assets.layout import Layout, check_session, check_table
from s3rs_assets.watermark import BackupMetadata, WatermarkRecord, iso
from s3rs_assets.watermark_reports import CleanupReport, RecoveryReport, SaveInfo, UpdateResult

log = logging.getLogger("s3rs.watermark")

CAS_ATTEMPTS = 8  # read-modify-write rounds lost to other writers before giving up

LOCATIONS = ("primary", "daily", "session")
_RACE_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
# What an S3 call can raise once botocore has given up retrying it.
S3_ERRORS = (ClientError, BotoConnectionError, HTTPClientError, IncompleteReadError)
#: The last recovery source: table name -> a record's JSON text or None (watermark_eventlog).
EventLogFallback = Callable[[str], "str | None"]


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _status(e: ClientError) -> int:
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def _attempts(meta: dict[str, Any]) -> int:
    """How many times botocore sent the request (its retries included)."""
    return int(meta.get("RetryAttempts") or 0) + 1


def is_race(e: BaseException) -> bool:
    """A conditional write lost to another writer (412 / 409)."""
    return isinstance(e, ClientError) and (_code(e) in _RACE_CODES or _status(e) in (409, 412))


def _missing(e: BaseException) -> bool:
    return isinstance(e, ClientError) and (_code(e) in _MISSING_CODES or _status(e) == 404)


def _describe(e: BaseException) -> str:
    if isinstance(e, ClientError):
        msg = e.response.get("Error", {}).get("Message", "")
        tries = _attempts(e.response.get("ResponseMetadata", {}))
        after = f" (after {tries} attempts)" if tries > 1 else ""
        return f"{_code(e) or _status(e)}{': ' + msg if msg else ''}{after}"
    return f"{type(e).__name__}: {e}"


def default_session_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d_%H%M%S_%f")


def _utc(ts: datetime | None) -> datetime:
    if ts is None:
        return datetime.now(UTC)
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


class _Lost(Exception):
    """Internal: our conditional write lost a race (or the primary was deleted meanwhile)."""


@dataclass
class _Obj:
    source: str  # "daily" or "session"
    key: str
    table: str
    last_modified: datetime
    day: str | None = None  # YYYYMMDD of a daily backup


@dataclass
class _Got:
    body: bytes
    etag: str
    last_modified: datetime | None


@dataclass(frozen=True)
class _Known:
    """The store's last view of a table's primary: (None, None, None) when it has none."""

    record: WatermarkRecord | None
    etag: str | None
    body: bytes | None


class WatermarkStore:
    """Read, verify, recover and compare-and-swap watermark records for one bucket/layout.

    Build it with `io_manager.store_for` (the one builder). `session_id` names this run's
    session backups (the Dagster run id); a timestamp id is made when None.
    `event_log_fallback(table) -> JSON text | None` is the last recovery source. S3 calls
    are retried by the client's botocore configuration only.

    Records returned by `read()` and `update()` are the store's own copy of the primary:
    read them, do not change them (a change goes through `update()`).
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        layout: Layout,
        session_id: str | None = None,
        *,
        event_log_fallback: EventLogFallback | None = None,
    ):
        self.client = client
        self.bucket = bucket
        self.layout = layout
        self.session_id = check_session(session_id or default_session_id())
        self.event_log_fallback = event_log_fallback
        self._known: dict[str, _Known] = {}
        self._lock = threading.Lock()

    @property
    def prefix(self) -> str:
        return self.layout.prefix.strip("/")

    def _uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    # ------------------------------------------------------------- S3 helpers

    def _get(self, key: str) -> _Got | None:
        """The object, or None when it does not exist."""
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=key)
            return _Got(obj["Body"].read(), obj["ETag"], obj.get("LastModified"))
        except ClientError as e:
            if _missing(e):
                return None
            raise

    def _put(self, key: str, body: bytes, **cond: str) -> tuple[str, int]:
        """PUT the object and verify it; returns (ETag, requests botocore sent).

        Content-MD5 makes S3 refuse a body damaged on the way; an ETag other than that MD5
        means the object is not what we sent, and raises WatermarkError.
        """
        digest = hashlib.md5(body)
        resp = self.client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=body,
            ContentMD5=base64.b64encode(digest.digest()).decode(),
            ContentType="application/json",
            **cond,
        )
        etag = resp["ETag"]
        if etag.strip('"') != digest.hexdigest():
            raise WatermarkError(
                f"{self._uri(key)} was written but S3 answered ETag {etag}, not the MD5 "
                f"{digest.hexdigest()} of the watermark sent: the write is not verified"
            )
        return etag, _attempts(resp.get("ResponseMetadata", {}))

    def _list(self, prefix: str) -> Iterator[dict[str, Any]]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            yield from page.get("Contents", [])

    # ---------------------------------------------------------------- parsing

    def _parse(self, table: str, body: bytes, now: datetime | None) -> WatermarkRecord:
        rec = WatermarkRecord.from_json(body, table_name=table)
        return rec.check(table_name=table, now=now)

    # ----------------------------------------------------------------- memory

    def _get_known(self, table: str) -> _Known | None:
        with self._lock:
            return self._known.get(table)

    def _set_known(self, table: str, known: _Known) -> None:
        with self._lock:
            self._known[table] = known

    def forget(self, table: str | None = None) -> None:
        """Drop what this store knows of `table` (of every table when None): the next read
        or update of it goes to S3."""
        with self._lock:
            if table is None:
                self._known.clear()
            else:
                self._known.pop(table, None)

    # ------------------------------------------------------------------ saving

    def _write_primary(
        self,
        table: str,
        record: WatermarkRecord,
        cond: dict[str, str],
        *,
        recovered_from: str | None = None,
    ) -> SaveInfo:
        """Validate, write the primary conditionally and verify it; remember the result.

        Raises _Lost when the conditional write lost (the caller re-reads and re-applies),
        WatermarkError when S3 failed or the write cannot be verified. Either way this
        store forgets the table: what S3 holds is unknown until read again.
        """
        record.backup_metadata = BackupMetadata(
            saved_at=datetime.now(UTC).replace(tzinfo=None),
            session_id=self.session_id,
            backup_locations=list(LOCATIONS),
            recovered_from=recovered_from,
        )
        record.check(table_name=table)
        body = record.to_json().encode()
        info = SaveInfo(table=table, session_id=self.session_id, recovered_from=recovered_from)
        primary = self.layout.watermark_primary(table)
        try:
            etag, info.primary_attempts = self._put(primary, body, **cond)
        except ClientError as e:
            self.forget(table)
            if is_race(e):
                raise _Lost(_describe(e)) from None
            if "IfMatch" in cond and _missing(e):
                raise _Lost("primary deleted since it was read") from None
            raise WatermarkError(
                f"could not save the watermark of {table} to {self._uri(primary)}: "
                f"{_describe(e)}; the previous record is unchanged"
            ) from None
        except S3_ERRORS as e:
            self.forget(table)
            raise WatermarkError(
                f"could not save the watermark of {table} to {self._uri(primary)}: {_describe(e)}"
            ) from None
        except WatermarkError as e:
            self.forget(table)
            raise WatermarkError(f"watermark of {table}: {e}") from None
        self._set_known(table, _Known(record, etag, body))
        info.etag = etag
        info.written["primary"] = primary
        log.info("saved watermark of %s (etag %s) to %s", table, etag, self._uri(primary))
        return info

    def write_backups(self, table: str) -> SaveInfo:
        """Copy the current record, byte-identical, to today's daily and this session's
        backup. Called at the end of a stage, on failure, after a manual change and after a
        recovery: backups are at most one run behind the primary. Reads the primary first
        if this store has not seen it; writes nothing for a table without a record. A
        failed copy is logged and reported in the result, never raised."""
        check_table(table)
        known = self._get_known(table)
        if known is None:
            self.read(table)
            known = self._get_known(table)
        info = SaveInfo(table=table, session_id=self.session_id)
        if known is None or known.body is None:
            return info
        info.etag = known.etag
        keys = {
            "daily": self.layout.watermark_daily(table, datetime.now(UTC).date()),
            "session": self.layout.watermark_session(table, self.session_id),
        }
        for location, key in keys.items():
            try:
                self._put(key, known.body)
                info.written[location] = key
            except (*S3_ERRORS, WatermarkError) as e:
                info.failed[location] = _describe(e)
                log.error(
                    "watermark of %s: %s backup %s not written: %s",
                    table,
                    location,
                    self._uri(key),
                    _describe(e),
                )
        log.info(
            "backed up watermark of %s (etag %s) to %s%s",
            table,
            known.etag,
            ", ".join(info.written) or "nothing",
            f"; FAILED {', '.join(info.failed)}" if info.failed else "",
        )
        return info

    def update(
        self,
        table: str,
        change: Callable[[WatermarkRecord], None],
        *,
        now: datetime | None = None,
    ) -> UpdateResult:
        """Apply `change` to the latest record and store it compare-and-swap.

        `change` mutates the record in place and may be called more than once (after a lost
        race); it raises WatermarkConflict when it cannot be applied to the newer record.
        The first update of a table reads (and if needed recovers) the primary, so an
        update never starts from an empty record while any copy of the watermark exists;
        later ones start from the record this store last wrote and cost one PUT. Backups
        are not written here: see `write_backups`.
        """
        check_table(table)
        recovery: RecoveryReport | None = None
        for attempt in range(CAS_ATTEMPTS):
            known = self._get_known(table)
            if known is None:
                report, known = self._recover(table, now)
                if report.recovered:
                    recovery = report
            record = (
                WatermarkRecord.from_json(known.body, table_name=table)
                if known.body is not None
                else WatermarkRecord.new(table)
            )
            change(record)
            record.refresh()
            cond = {"IfMatch": known.etag} if known.etag else {"IfNoneMatch": "*"}
            try:
                info = self._write_primary(table, record, cond)
            except _Lost as e:
                log.info("watermark of %s: lost a race (%s); re-reading", table, e)
                time.sleep(min(0.05 * 2**attempt, 1.0) * (0.5 + random.random()))
                continue
            info.cas_rounds = attempt + 1
            return UpdateResult(record, info, recovery)
        raise WatermarkConflict(
            f"watermark of {table} changed {CAS_ATTEMPTS} times while saving; "
            "another run keeps writing it"
        )

    # ----------------------------------------------------------------- reading

    def read_versioned(
        self, table: str, *, now: datetime | None = None, fresh: bool = False
    ) -> tuple[WatermarkRecord | None, str | None]:
        """The primary record and its ETag. Reading never writes: when the primary is
        missing or invalid this is the copy recovery would restore, with ETag None, and
        nothing is written (`recover()` is the explicit step that writes it back).

        (None, None) only for a brand-new table: no primary, no copy, no event-log record.
        `now` is the source clock (naive); a cursor later than now + 1 minute is invalid.
        Once this store has read or written the table the answer comes from memory (it was
        validated then) unless `fresh`.
        """
        known = self.peek(table, now=now, fresh=fresh)[1]
        return known.record, known.etag

    def peek(
        self, table: str, *, now: datetime | None = None, fresh: bool = False
    ) -> tuple[RecoveryReport | None, _Known]:
        """What `read` answers, with the recovery report when the primary was not used
        (None when it was, or when the answer came from memory). Writes nothing."""
        check_table(table)
        known = None if fresh else self._get_known(table)
        if known is not None:
            return None, known
        report, known = self._recover(table, now, write=False)
        return (report if report.recovered else None), known

    def read(
        self, table: str, now: datetime | None = None, *, fresh: bool = False
    ) -> WatermarkRecord | None:
        return self.read_versioned(table, now=now, fresh=fresh)[0]

    def recover(self, table: str, *, now: datetime | None = None) -> RecoveryReport:
        """Read and validate the primary in S3 (never from memory); when missing or invalid,
        restore it from the first valid backup (see the module docstring for the order).
        Raises WatermarkError when the primary is invalid, or backups exist, and no valid
        copy is left."""
        check_table(table)
        return self._recover(table, now)[0]

    def _recover(
        self, table: str, now: datetime | None, *, write: bool = True
    ) -> tuple[RecoveryReport, _Known]:
        """The valid primary, or the first valid copy in recovery order — written back to
        the primary (and its copies) when `write`; with `write=False` the copy is only
        returned (ETag None) and this store does not remember it."""
        primary = self.layout.watermark_primary(table)
        for attempt in range(CAS_ATTEMPTS):
            self.forget(table)
            try:
                got = self._get(primary)
            except S3_ERRORS as e:
                raise WatermarkError(
                    f"cannot read the watermark of {table} from {self._uri(primary)}: "
                    f"{_describe(e)}"
                ) from None
            if got is not None:
                try:
                    rec = self._parse(table, got.body, now)
                    known = _Known(rec, got.etag, got.body)
                    self._set_known(table, known)
                    return RecoveryReport(table, "primary", primary, rec, got.etag), known
                except WatermarkError as e:
                    primary_error = str(e)
                    log.error("watermark of %s at %s is invalid: %s", table, primary, e)
            else:
                primary_error = "missing"
            report = RecoveryReport(table, None, None, None, primary_error=primary_error)
            found_any = self._find_valid_copy(table, now, report)
            if report.record is None:
                if got is None and not found_any:
                    known = _Known(None, None, None)  # brand-new table
                    self._set_known(table, known)
                    return report, known
                raise WatermarkError(self._give_up_message(table, primary, report))
            if not write:
                return report, _Known(report.record, None, None)
            cond = {"IfMatch": got.etag} if got is not None else {"IfNoneMatch": "*"}
            try:
                info = self._write_primary(table, report.record, cond, recovered_from=report.source)
            except _Lost:
                time.sleep(min(0.05 * 2**attempt, 1.0) * (0.5 + random.random()))
                continue  # someone else restored or wrote it: read that
            report.etag = info.etag
            log.warning(
                "watermark of %s recovered from %s %s (primary %s); last_mysql_data_timestamp %s",
                table,
                report.source,
                self._uri(report.key or ""),
                primary_error,
                iso(report.record.last_mysql_data_timestamp),
            )
            self.write_backups(table)  # a restored primary gets current backups at once
            known = self._get_known(table) or _Known(report.record, info.etag, None)
            return report, known
        raise WatermarkConflict(f"watermark of {table} kept changing during recovery")

    def _give_up_message(self, table: str, primary: str, report: RecoveryReport) -> str:
        tried = "; ".join(f"{s} {k}: {e}" for s, k, e in report.rejected) or "none found"
        state = (
            "is missing"
            if report.primary_error == "missing"
            else (f"is invalid ({report.primary_error})")
        )
        return (
            f"watermark of {table} at {self._uri(primary)} {state} and no valid copy is "
            f"left to recover it from (tried: {tried}). Set it by hand with "
            f"`s3rs watermark set -t {table} --timestamp 'YYYY-MM-DD HH:MM:SS'` "
            "(the last cursor known to be in S3); s3rs never resets a table by itself."
        )

    def _find_valid_copy(self, table: str, now: datetime | None, report: RecoveryReport) -> bool:
        """Fill report.source/key/record with the first valid copy; return whether any
        copy (valid or not) exists or might exist (an error reading one counts)."""
        found_any = False
        for source, key, loader in self._candidates(table):
            try:
                text = loader()
            except Exception as e:  # noqa: BLE001 - any failure means "unknown", never "new"
                found_any = True
                report.rejected.append((source, key, f"unreadable: {_describe(e)}"))
                log.error("watermark of %s: cannot read %s %s: %s", table, source, key, e)
                continue
            if text is None:
                continue
            found_any = True
            try:
                rec = self._parse(table, text, now)
            except WatermarkError as e:
                report.rejected.append((source, key, str(e)))
                log.warning("watermark of %s: %s copy %s is invalid: %s", table, source, key, e)
                continue
            report.source, report.key, report.record = source, key, rec
            return True
        return found_any

    def _candidates(self, table: str) -> Iterator[tuple[str, str, Callable[[], Any]]]:
        """Recovery candidates in order, each loaded lazily: (source, key, load)."""
        today = self.layout.watermark_daily(table, datetime.now(UTC).date())

        def body(key: str) -> Callable[[], bytes | None]:
            def load() -> bytes | None:
                got = self._get(key)
                return None if got is None else got.body

            return load

        def failed(e: Exception) -> Callable[[], Any]:
            def load() -> Any:
                raise e

            return load

        yield "daily", today, body(today)
        try:
            dailies = self._daily_objects(table)
        except S3_ERRORS as e:
            yield "daily", "listing of daily backups", failed(e)
            dailies = []
        for obj in sorted(dailies, key=lambda o: o.day or "", reverse=True):
            if obj.key != today:
                yield "daily", obj.key, body(obj.key)
        try:
            sessions = self._newest_first(self._session_objects(table))
        except S3_ERRORS as e:
            yield "session", "listing of session backups", failed(e)
            sessions = []
        for obj in sessions:
            yield "session", obj.key, body(obj.key)
        if self.event_log_fallback is not None:
            fallback = self.event_log_fallback
            yield "event_log", f"dagster event log ({table})", lambda: fallback(table)

    def _newest_first(self, objs: list[_Obj]) -> list[_Obj]:
        """Order by LastModified (second precision), ties by backup_metadata.saved_at."""
        by_second: dict[datetime, list[_Obj]] = {}
        for o in objs:
            by_second.setdefault(o.last_modified.replace(microsecond=0), []).append(o)
        out: list[_Obj] = []
        for second in sorted(by_second, reverse=True):
            group = by_second[second]
            if len(group) > 1:
                group.sort(key=self._saved_at, reverse=True)
            out += group
        return out

    def _saved_at(self, obj: _Obj) -> str:
        try:
            got = self._get(obj.key)
            rec = WatermarkRecord.from_json(got.body) if got else None
            meta = rec.backup_metadata if rec else None
            return iso(meta.saved_at) or "" if meta else ""
        except Exception:  # noqa: BLE001 - unreadable sorts last; it is validated later
            return ""

    # -------------------------------------------------------------- listings

    def _daily_objects(self, table: str | None = None) -> list[_Obj]:
        out = []
        head = self.layout.watermark_dailies()
        for item in self._list(head + (f"{table}_" if table else "")):
            parsed = self.layout.parse_daily(item["Key"])
            if parsed and (table is None or parsed[0] == table):
                name, day = parsed
                out.append(_Obj("daily", item["Key"], name, item["LastModified"], day))
        return out

    def _session_objects(self, table: str | None = None) -> list[_Obj]:
        out = []
        for item in self._list(self.layout.watermark_sessions()):
            parsed = self.layout.parse_session(item["Key"])
            if parsed and (table is None or parsed[1] == table):
                out.append(_Obj("session", item["Key"], parsed[1], item["LastModified"]))
        return out

    def list_tables(self) -> list[str]:
        """Tables with a primary or any backup."""
        names = {
            self.layout.parse_primary(i["Key"]) for i in self._list(self.layout.watermark_tables())
        }
        names |= {o.table for o in self._daily_objects()}
        names |= {o.table for o in self._session_objects()}
        return sorted(n for n in names if n is not None and _valid_table(n))

    # ------------------------------------------------------- status and cleanup

    def backup_status(
        self, table: str, *, now: datetime | None = None, source_now: datetime | None = None
    ) -> dict[str, Any]:
        """State of every location of `table`'s watermark (JSON-able, for metadata/CLI).

        `now` is the wall clock (UTC) for ages; `source_now` the source clock for the
        future-cursor check. A backup is `current` when byte-identical to the primary.
        """
        check_table(table)
        wall = _utc(now)
        primary_key = self.layout.watermark_primary(table)

        def describe(key: str | None) -> dict[str, Any]:
            entry: dict[str, Any] = {"key": key, "present": False, "valid": False}
            if key is None:
                return entry
            try:
                got = self._get(key)
            except S3_ERRORS as e:
                entry["error"] = f"unreadable: {_describe(e)}"
                return entry
            if got is None:
                return entry
            entry["present"] = True
            entry["etag"] = got.etag
            if got.last_modified is not None:
                entry["age_seconds"] = round((wall - _utc(got.last_modified)).total_seconds())
            try:
                rec = self._parse(table, got.body, source_now)
            except WatermarkError as e:
                entry["error"] = str(e)
                return entry
            entry["valid"] = True
            entry["last_mysql_data_timestamp"] = iso(rec.last_mysql_data_timestamp)
            entry["updated_at"] = iso(rec.updated_at)
            return entry

        primary = describe(primary_key)
        dailies = sorted(self._daily_objects(table), key=lambda o: o.day or "", reverse=True)
        today = self.layout.watermark_daily(table, wall.date())
        daily = describe(dailies[0].key if dailies else today)
        daily["count"] = len(dailies)
        daily["today"] = daily["key"] == today
        sessions = self._newest_first(self._session_objects(table))
        session = describe(sessions[0].key if sessions else None)
        session["count"] = len(sessions)
        for entry in (daily, session):
            entry["current"] = bool(entry.get("etag")) and entry.get("etag") == primary.get("etag")
        return {
            "table": table,
            "checked_at": wall.replace(tzinfo=None).isoformat(timespec="seconds"),
            "primary": primary,
            "daily": daily,
            "session": session,
            "healthy": primary["valid"] and (daily["valid"] or session["valid"]),
        }

    def cleanup_backups(
        self, days_to_keep: int, dry_run: bool = False, now: datetime | None = None
    ) -> CleanupReport:
        """Delete daily and session backups last written more than `days_to_keep` days ago.

        Never deletes a primary, nor the newest valid backup of any table (whatever its
        age), nor keys that are not recognisable backups. `now` is the wall clock (UTC).
        Long on purpose: the keep rules (age, newest valid per table) and the deletes belong
        together.
        """
        if (
            isinstance(days_to_keep, bool)
            or not isinstance(days_to_keep, int)
            or (days_to_keep < 0)
        ):
            raise ConfigError(f"days_to_keep must be a whole number >= 0, not {days_to_keep!r}")
        cutoff = _utc(now) - timedelta(days=days_to_keep)
        report = CleanupReport(days_to_keep, dry_run, cutoff.replace(tzinfo=None))
        per_table: dict[str, list[_Obj]] = {}
        for obj in self._daily_objects() + self._session_objects():
            per_table.setdefault(obj.table, []).append(obj)

        doomed: list[str] = []
        for table, objs in sorted(per_table.items()):
            old = [o for o in objs if _utc(o.last_modified) < cutoff]
            report.kept_recent += len(objs) - len(old)
            if not old:
                continue
            keep, error = self._newest_valid(table, objs)
            if error is not None:
                # Cannot tell which copy is the newest valid one: delete nothing of it.
                report.failed.update({o.key: f"kept: {error}" for o in old})
                log.error("watermark backup cleanup skips %s: %s", table, error)
                continue
            for o in old:
                if keep is not None and o.key == keep.key:
                    report.kept_newest[table] = o.key
                else:
                    doomed.append(o.key)

        report.deleted = doomed if dry_run else []
        if dry_run:
            log.info("watermark backup cleanup (dry run): would delete %d", len(doomed))
            return report
        for i in range(0, len(doomed), 1000):
            batch = doomed[i : i + 1000]
            try:
                resp = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except S3_ERRORS as e:
                report.failed.update({k: _describe(e) for k in batch})
                continue
            errors = {e["Key"]: e.get("Code", "error") for e in resp.get("Errors", [])}
            report.failed.update(errors)
            report.deleted += [k for k in batch if k not in errors]
        log.info(
            "watermark backup cleanup: deleted %d, kept %d recent and %d newest-valid, %d failed",
            len(report.deleted),
            report.kept_recent,
            len(report.kept_newest),
            len(report.failed),
        )
        return report

    def _newest_valid(self, table: str, objs: list[_Obj]) -> tuple[_Obj | None, str | None]:
        """The newest backup that validates, or (None, error) if one could not be read."""
        try:
            ordered = self._newest_first(objs)
            for obj in ordered:
                got = self._get(obj.key)
                if got is None:
                    continue
                try:
                    self._parse(table, got.body, None)
                except WatermarkError:
                    continue
                return obj, None
        except S3_ERRORS as e:
            return None, f"cannot read {table}'s backups: {_describe(e)}"
        return None, None


def require(record: WatermarkRecord | None, table: str) -> WatermarkRecord:
    if record is None:
        raise WatermarkError(f"no watermark for {table}")
    return record


def _valid_table(name: str) -> bool:
    try:
        check_table(name)
    except ConfigError:
        return False
    return True
