"""Where watermark records live in S3, and the only code that writes them.

Every change is a read-modify-write through `update()`, made compare-and-swap with S3
conditional writes: `If-None-Match: *` when the primary does not exist yet, `If-Match:
<etag read>` otherwise. A writer that loses the race (412, or 409 from a concurrent
conditional write) re-reads and re-applies its change function to the newer record, so two
runs working on different partitions merge; the change function itself raises
WatermarkConflict when the newer record is incompatible with what the run did.

Layout under the configured prefix (every save writes all three, byte-identical):
    watermarks/tables/<table>.json                         primary
    watermarks/backups/daily/<table>_<YYYYMMDD>.json       daily backup (UTC date)
    watermarks/backups/sessions/<session id>/<table>.json  session backup (Dagster run id)

Saving: the primary PUT is retried with exponential backoff on 5xx, throttling and
connection errors (on top of botocore's own retries), then read back and verified (ETag,
bytes, parse). Backups are written only after the primary; a failed backup is logged and
reported in `last_save`, it does not fail the save.

Reading: every read validates (schema version, types, counts, consistency with the
manifests, cursor not ahead of the source clock). A missing or invalid primary is recovered
transparently from, in order: today's daily backup, the newest daily backup, the latest
session backup, any other session backup (newest first), the `event_log_fallback` callable;
the first valid candidate is written back to the primary (conditionally) with
`backup_metadata.recovered_from` set. Nothing is ever reset automatically: a table reads as
None only when no copy of its watermark exists anywhere.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.exceptions import (
    ClientError,
    HTTPClientError,
    IncompleteReadError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from s3rs_assets.errors import ConfigError, WatermarkConflict, WatermarkError
from s3rs_assets.watermark import BackupMetadata, WatermarkRecord, iso

log = logging.getLogger("s3rs.watermark")

CAS_ATTEMPTS = 8  # read-modify-write rounds lost to other writers before giving up
PUT_ATTEMPTS = 4  # our attempts per S3 call on transient errors (botocore retries inside)
BASE_DELAY = 0.2  # seconds, doubled per attempt, with jitter
MAX_DELAY = 5.0

LOCATIONS = ("primary", "daily", "session")
_RACE_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
_TRANSIENT_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "TooManyRequests",
    "ServiceUnavailable",
    "InternalError",
    "RequestTimeout",
    "RequestTimeoutException",
    "500",
    "502",
    "503",
    "504",
}
_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,63}(\.[A-Za-z_][A-Za-z0-9_$]{0,63})?$")
_SESSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_DAILY_NAME = re.compile(r"^(?P<table>.+)_(?P<day>\d{8})\.json$")

EventLogFallback = Callable[[str], "str | None"]


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _status(e: ClientError) -> int:
    return int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)


def is_race(e: BaseException) -> bool:
    """A conditional write lost to another writer (412 / 409)."""
    return isinstance(e, ClientError) and (_code(e) in _RACE_CODES or _status(e) in (409, 412))


def is_transient(e: BaseException) -> bool:
    """Worth retrying: 5xx, throttling, timeouts, dropped connections."""
    if isinstance(e, ClientError):
        if is_race(e):
            return False
        return _status(e) >= 500 or _status(e) == 429 or _code(e) in _TRANSIENT_CODES
    return isinstance(e, BotoConnectionError | HTTPClientError | IncompleteReadError)


def _describe(e: BaseException) -> str:
    if isinstance(e, ClientError):
        msg = e.response.get("Error", {}).get("Message", "")
        return f"{_code(e) or _status(e)}{': ' + msg if msg else ''}"
    return f"{type(e).__name__}: {e}"


def check_table(table: object) -> str:
    """Table names become S3 keys: `name` or `schema.name`, plain identifiers only."""
    if not isinstance(table, str) or not _TABLE.match(table):
        raise ConfigError(
            f"invalid table name {table!r} for a watermark: expected 'schema.table' made of "
            "letters, digits, '_' or '$'"
        )
    return table


def default_session_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d_%H%M%S_%f")


def _utc(ts: datetime | None) -> datetime:
    if ts is None:
        return datetime.now(UTC)
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


class _Lost(Exception):
    """Internal: our conditional write lost a race, or was superseded right after."""


@dataclass
class SaveInfo:
    """What the last save did, for logs and Dagster metadata (`as_metadata()`)."""

    table: str
    session_id: str
    etag: str | None = None
    written: dict[str, str] = field(default_factory=dict)  # location -> key
    failed: dict[str, str] = field(default_factory=dict)  # location -> error
    primary_attempts: int = 0
    cas_rounds: int = 1
    recovered_from: str | None = None
    superseded: bool = False  # an unconditional put was overwritten right after

    def as_metadata(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "session_id": self.session_id,
            "written": sorted(self.written),
            "failed": dict(self.failed),
            "keys": dict(self.written),
            "primary_attempts": self.primary_attempts,
            "cas_rounds": self.cas_rounds,
            "recovered_from": self.recovered_from,
        }


@dataclass
class RecoveryReport:
    """Outcome of `recover()`: where the record came from and what was rejected."""

    table: str
    source: str | None  # "primary" (nothing to do), "daily", "session", "event_log", None
    key: str | None
    record: WatermarkRecord | None
    etag: str | None = None
    primary_error: str | None = None  # why the primary was not used (None when it was)
    rejected: list[tuple[str, str, str]] = field(default_factory=list)  # source, key, error

    @property
    def recovered(self) -> bool:
        return self.source not in (None, "primary")

    def as_metadata(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "source": self.source,
            "key": self.key,
            "recovered": self.recovered,
            "primary_error": self.primary_error,
            "rejected": [f"{s} {k}: {e}" for s, k, e in self.rejected],
            "last_mysql_data_timestamp": iso(self.record.last_mysql_data_timestamp)
            if self.record
            else None,
        }


@dataclass
class CleanupReport:
    days_to_keep: int
    dry_run: bool
    cutoff: datetime
    deleted: list[str] = field(default_factory=list)  # would-be deletions when dry_run
    kept_recent: int = 0
    kept_newest: dict[str, str] = field(default_factory=dict)  # table -> key kept by age
    failed: dict[str, str] = field(default_factory=dict)  # key -> error

    def as_metadata(self) -> dict[str, Any]:
        return {
            "days_to_keep": self.days_to_keep,
            "dry_run": self.dry_run,
            "cutoff": self.cutoff.isoformat(),
            "deleted": len(self.deleted),
            "kept_recent": self.kept_recent,
            "kept_newest": dict(self.kept_newest),
            "failed": dict(self.failed),
        }


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


class WatermarkStore:
    """Read, verify, recover and compare-and-swap watermark records for one bucket/prefix.

    `session_id` names this run's session backups (the Dagster run id); a timestamp id is
    made when None. `event_log_fallback(table) -> JSON text | None` is the last recovery
    source (the latest `s3rs/watermark` materialization metadata). `attempts` and
    `base_delay` bound our retries of each S3 call on transient errors.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str,
        session_id: str | None = None,
        *,
        event_log_fallback: EventLogFallback | None = None,
        attempts: int = PUT_ATTEMPTS,
        base_delay: float = BASE_DELAY,
    ):
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.session_id = session_id or default_session_id()
        if not _SESSION.match(self.session_id):
            raise ConfigError(f"invalid watermark session id {self.session_id!r}")
        self.event_log_fallback = event_log_fallback
        self.attempts = max(1, attempts)
        self.base_delay = base_delay
        self._local = threading.local()

    # ----------------------------------------------------------------- layout

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def primary_key(self, table: str) -> str:
        return self._key("watermarks", "tables", f"{check_table(table)}.json")

    def daily_key(self, table: str, day: datetime | None = None) -> str:
        stamp = _utc(day).strftime("%Y%m%d")
        return self._key("watermarks", "backups", "daily", f"{check_table(table)}_{stamp}.json")

    def session_key(self, table: str, session_id: str | None = None) -> str:
        sid = session_id or self.session_id
        return self._key("watermarks", "backups", "sessions", sid, f"{check_table(table)}.json")

    def _uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    # --------------------------------------------------------- per-thread results

    @property
    def last_save(self) -> SaveInfo | None:
        """What this thread's last save wrote and failed to write."""
        return getattr(self._local, "last_save", None)

    @property
    def last_recovery(self) -> RecoveryReport | None:
        """This thread's last recovery (None if its last read needed none)."""
        return getattr(self._local, "last_recovery", None)

    # ------------------------------------------------------------- S3 helpers

    def _retry(self, what: str, fn: Callable[[], Any]) -> tuple[Any, int]:
        """Run fn, retrying transient errors with backoff; returns (result, attempts)."""
        for attempt in range(1, self.attempts + 1):
            try:
                return fn(), attempt
            except (ClientError, BotoConnectionError, HTTPClientError, IncompleteReadError) as e:
                if not is_transient(e) or attempt == self.attempts:
                    raise
                delay = min(self.base_delay * 2 ** (attempt - 1), MAX_DELAY)
                delay *= 0.5 + random.random() / 2
                log.warning(
                    "%s failed (%s), attempt %d of %d; retrying in %.2fs",
                    what,
                    _describe(e),
                    attempt,
                    self.attempts,
                    delay,
                )
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _get(self, key: str) -> _Got | None:
        """The object, or None when it does not exist; transient errors are retried."""

        def get() -> _Got:
            obj = self.client.get_object(Bucket=self.bucket, Key=key)
            return _Got(obj["Body"].read(), obj["ETag"], obj.get("LastModified"))

        try:
            return self._retry(f"GET {self._uri(key)}", get)[0]
        except ClientError as e:
            if _code(e) in _MISSING_CODES or _status(e) == 404:
                return None
            raise

    def _put(self, key: str, body: bytes, **cond: str) -> tuple[str, int]:
        def put() -> str:
            resp = self.client.put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType="application/json", **cond
            )
            return resp["ETag"]

        return self._retry(f"PUT {self._uri(key)}", put)

    def _list(self, prefix: str) -> Iterator[dict[str, Any]]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            yield from page.get("Contents", [])

    # ---------------------------------------------------------------- parsing

    def _parse(self, table: str, body: bytes, now: datetime | None) -> WatermarkRecord:
        rec = WatermarkRecord.from_json(body, table_name=table)
        return rec.check(table_name=table, now=now)

    # ------------------------------------------------------------------ saving

    def _save(
        self,
        table: str,
        record: WatermarkRecord,
        cond: dict[str, str] | None,
        *,
        recovered_from: str | None = None,
    ) -> tuple[WatermarkRecord, str]:
        """Write primary (conditionally unless cond is None), verify, then the backups.

        Raises _Lost when a conditional write lost, or when the read-back shows another
        writer replaced our object (so the caller re-reads and re-applies its change).
        """
        saved_at = datetime.now(UTC).replace(tzinfo=None)
        keys = {
            "primary": self.primary_key(table),
            "daily": self.daily_key(table, saved_at),
            "session": self.session_key(table),
        }
        record.backup_metadata = BackupMetadata(
            saved_at=saved_at,
            session_id=self.session_id,
            backup_locations=list(LOCATIONS),
            recovered_from=recovered_from,
        )
        record.check(table_name=table)
        body = record.to_json().encode()
        info = SaveInfo(table=table, session_id=self.session_id, recovered_from=recovered_from)
        self._local.last_save = info
        primary = keys["primary"]

        try:
            etag, info.primary_attempts = self._put(primary, body, **(cond or {}))
        except ClientError as e:
            if cond is not None and is_race(e):
                raise _Lost(_describe(e)) from None
            if cond and "IfMatch" in cond and (_code(e) in _MISSING_CODES or _status(e) == 404):
                raise _Lost("primary deleted since it was read") from None
            info.failed["primary"] = _describe(e)
            raise WatermarkError(
                f"could not save the watermark of {table} to {self._uri(primary)} after "
                f"{self.attempts} attempts: {_describe(e)}; the previous record is unchanged"
            ) from None
        except (BotoConnectionError, HTTPClientError) as e:
            info.failed["primary"] = _describe(e)
            raise WatermarkError(
                f"could not save the watermark of {table} to {self._uri(primary)} after "
                f"{self.attempts} attempts: {_describe(e)}"
            ) from None

        try:
            back = self._get(primary)
        except (ClientError, BotoConnectionError, HTTPClientError) as e:
            info.failed["verify"] = _describe(e)
            raise WatermarkError(
                f"watermark of {table} was written to {self._uri(primary)} (etag {etag}) but "
                f"could not be read back to verify it: {_describe(e)}"
            ) from None
        if back is None or back.etag != etag:
            if cond is not None:
                log.warning(
                    "watermark of %s was replaced right after our write (etag %s, now %s); "
                    "re-applying",
                    table,
                    etag,
                    back.etag if back else "missing",
                )
                raise _Lost("superseded")
            info.superseded = True
            log.warning("watermark of %s was replaced right after an unconditional put", table)
            info.etag = etag
            info.written["primary"] = primary
            return record, etag
        if back.body != body:
            raise WatermarkError(
                f"watermark of {table}: read-back of {self._uri(primary)} differs from what "
                f"was written (etag {etag})"
            )
        self._parse(table, back.body, None)
        info.etag = etag
        info.written["primary"] = primary

        for location in ("daily", "session"):
            key = keys[location]
            try:
                self._put(key, body)
                info.written[location] = key
            except (ClientError, BotoConnectionError, HTTPClientError) as e:
                info.failed[location] = _describe(e)
                log.error(
                    "watermark of %s: %s backup %s not written: %s",
                    table,
                    location,
                    self._uri(key),
                    _describe(e),
                )
        log.info(
            "saved watermark of %s (etag %s) to %s%s",
            table,
            etag,
            ", ".join(info.written),
            f"; FAILED {', '.join(info.failed)}" if info.failed else "",
        )
        return record, etag

    def update(
        self,
        table: str,
        change: Callable[[WatermarkRecord], None],
        *,
        now: datetime | None = None,
    ) -> WatermarkRecord:
        """Apply `change` to the latest record and store it compare-and-swap.

        `change` mutates the record in place and may be called more than once (after a lost
        race); it raises WatermarkConflict when it cannot be applied to the newer record.
        The record is recovered first when the primary is missing or invalid, so an update
        never starts from an empty record while any copy of the watermark exists.
        """
        check_table(table)
        for attempt in range(CAS_ATTEMPTS):
            current, etag = self.read_versioned(table, now=now)
            record = current.model_copy(deep=True) if current else WatermarkRecord.new(table)
            change(record)
            record.refresh()
            cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            try:
                saved, _ = self._save(table, record, cond)
            except _Lost as e:
                log.info("watermark of %s: lost a race (%s); re-reading", table, e)
                time.sleep(min(0.05 * 2**attempt, 1.0) * (0.5 + random.random()))
                continue
            self._local.last_save.cas_rounds = attempt + 1
            return saved
        raise WatermarkConflict(
            f"watermark of {table} changed {CAS_ATTEMPTS} times while saving; "
            "another run keeps writing it"
        )

    def put_unconditional(self, record: WatermarkRecord) -> None:
        """Overwrite the primary and mirrors (operator `watermark set`); validates first."""
        table = check_table(record.table_name)
        record = WatermarkRecord.from_json(record.to_json(), table_name=table)
        record.check(table_name=table)
        self._save(table, record, None)

    # ----------------------------------------------------------------- reading

    def read_versioned(
        self, table: str, *, now: datetime | None = None
    ) -> tuple[WatermarkRecord | None, str | None]:
        """The primary record and its ETag, recovered first if missing or invalid.

        (None, None) only for a brand-new table: no primary, no backup, no event-log record.
        `now` is the source clock (naive); a cursor later than now + 1 minute is invalid.
        """
        report = self.recover(table, now=now)
        return report.record, report.etag

    def read(self, table: str, now: datetime | None = None) -> WatermarkRecord | None:
        return self.read_versioned(table, now=now)[0]

    def recover(self, table: str, *, now: datetime | None = None) -> RecoveryReport:
        """Validate the primary; when missing or invalid, restore it from the first valid
        backup (see the module docstring for the order). Raises WatermarkError when the
        primary is invalid, or backups exist, and no valid copy is left."""
        check_table(table)
        self._local.last_recovery = None
        primary = self.primary_key(table)
        for attempt in range(CAS_ATTEMPTS):
            try:
                got = self._get(primary)
            except (ClientError, BotoConnectionError, HTTPClientError) as e:
                raise WatermarkError(
                    f"cannot read the watermark of {table} from {self._uri(primary)}: "
                    f"{_describe(e)}"
                ) from None
            if got is not None:
                try:
                    rec = self._parse(table, got.body, now)
                    return RecoveryReport(table, "primary", primary, rec, got.etag)
                except WatermarkError as e:
                    primary_error = str(e)
                    log.error("watermark of %s at %s is invalid: %s", table, primary, e)
            else:
                primary_error = "missing"
            report = RecoveryReport(table, None, None, None, primary_error=primary_error)
            found_any = self._find_valid_copy(table, now, report)
            if report.record is None:
                if got is None and not found_any:
                    return report  # brand-new table
                raise WatermarkError(self._give_up_message(table, primary, report))
            cond = {"IfMatch": got.etag} if got is not None else {"IfNoneMatch": "*"}
            try:
                report.record, report.etag = self._save(
                    table, report.record, cond, recovered_from=report.source
                )
            except _Lost:
                time.sleep(min(0.05 * 2**attempt, 1.0) * (0.5 + random.random()))
                continue  # someone else restored or wrote it: read that
            log.warning(
                "watermark of %s recovered from %s %s (primary %s); last_mysql_data_timestamp %s",
                table,
                report.source,
                self._uri(report.key or ""),
                primary_error,
                iso(report.record.last_mysql_data_timestamp),
            )
            self._local.last_recovery = report
            return report
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
        today = self.daily_key(table)

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
        except (ClientError, BotoConnectionError, HTTPClientError) as e:
            yield "daily", "listing of daily backups", failed(e)
            dailies = []
        for obj in sorted(dailies, key=lambda o: o.day or "", reverse=True):
            if obj.key != today:
                yield "daily", obj.key, body(obj.key)
        try:
            sessions = self._newest_first(self._session_objects(table))
        except (ClientError, BotoConnectionError, HTTPClientError) as e:
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
        prefix = self._key("watermarks", "backups", "daily") + "/"
        out = []
        for item in self._list(prefix + (f"{table}_" if table else "")):
            m = _DAILY_NAME.match(item["Key"][len(prefix) :])
            if m and "/" not in m["table"] and (table is None or m["table"] == table):
                out.append(_Obj("daily", item["Key"], m["table"], item["LastModified"], m["day"]))
        return out

    def _session_objects(self, table: str | None = None) -> list[_Obj]:
        prefix = self._key("watermarks", "backups", "sessions") + "/"
        out = []
        for item in self._list(prefix):
            parts = item["Key"][len(prefix) :].split("/")
            if len(parts) != 2 or not parts[1].endswith(".json"):
                continue
            name = parts[1][: -len(".json")]
            if table is None or name == table:
                out.append(_Obj("session", item["Key"], name, item["LastModified"]))
        return out

    def list_tables(self) -> list[str]:
        """Tables with a primary or any backup."""
        prefix = self._key("watermarks", "tables") + "/"
        names = {
            item["Key"][len(prefix) : -len(".json")]
            for item in self._list(prefix)
            if item["Key"].endswith(".json") and "/" not in item["Key"][len(prefix) :]
        }
        names |= {o.table for o in self._daily_objects()}
        names |= {o.table for o in self._session_objects()}
        return sorted(n for n in names if _TABLE.match(n))

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
        primary_key = self.primary_key(table)

        def describe(key: str | None) -> dict[str, Any]:
            entry: dict[str, Any] = {"key": key, "present": False, "valid": False}
            if key is None:
                return entry
            try:
                got = self._get(key)
            except (ClientError, BotoConnectionError, HTTPClientError) as e:
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
        daily = describe(dailies[0].key if dailies else self.daily_key(table, wall))
        daily["count"] = len(dailies)
        daily["today"] = daily["key"] == self.daily_key(table, wall)
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
                resp, _ = self._retry(
                    "DELETE watermark backups",
                    lambda b=batch: self.client.delete_objects(
                        Bucket=self.bucket,
                        Delete={"Objects": [{"Key": k} for k in b], "Quiet": True},
                    ),
                )
            except (ClientError, BotoConnectionError, HTTPClientError) as e:
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
        except (ClientError, BotoConnectionError, HTTPClientError) as e:
            return None, f"cannot read {table}'s backups: {_describe(e)}"
        return None, None


def require(record: WatermarkRecord | None, table: str) -> WatermarkRecord:
    if record is None:
        raise WatermarkError(f"no watermark for {table}")
    return record
