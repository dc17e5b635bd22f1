"""The S3 side of watermark records: objects, conditional writes, the store's memory.

`StoreBase` holds what the store, its recovery and its copies share: the S3 helpers (a GET
that says "missing", a verified PUT with Content-MD5, listings), the per-table memory of
the last record and ETag this store read or wrote, the verified compare-and-swap write of
the primary, and the listings of the daily and session copies. Plain Python: no Dagster.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError, HTTPClientError, IncompleteReadError
from botocore.exceptions import ConnectionError as BotoConnectionError

from s3rs_assets.errors import ConfigError, WatermarkError
from s3rs_assets.layout import Layout, check_session, check_table
from s3rs_assets.watermark import archive
from s3rs_assets.watermark.record import BackupMetadata, WatermarkRecord, iso
from s3rs_assets.watermark.reports import SaveInfo

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




class StoreBase:
    """What the store, its recovery and its copies share (see the module docstring).

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

    @property
    def location(self) -> str:
        return self.layout.location(self.bucket)

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
        """The whole record a stored body holds (its archive merged back), validated."""
        return self._whole(table, body).check(table_name=table, now=now)

    def _whole(self, table: str, body: bytes) -> WatermarkRecord:
        """Parse a stored body and merge its archived partitions back (archive.py); not
        checked. The archive is read once per process (it is immutable)."""
        return self._merged(table, WatermarkRecord.from_json(body, table_name=table))

    def _merged(self, table: str, rec: WatermarkRecord) -> WatermarkRecord:
        """A parsed record with its archived partitions merged back (`_whole` of a body
        already parsed: `s3rs status` parses it once, then decides whether to expand)."""
        ref = rec._archive
        if ref is not None and ref.key != self.layout.watermark_archive(table, ref.sha256[:32]):
            raise WatermarkError(
                f"watermark of {table}: its archive key {ref.key!r} is not "
                f"{self.layout.watermark_archive(table, ref.sha256[:32])!r}"
            )
        return archive.expand(rec, self._load_archive)

    def _load_archive(self, key: str) -> bytes | None:
        got = self._get(key)
        return None if got is None else got.body

    def _store_archive(self, table: str, arc: archive.Archive, previous: str | None) -> bool:
        """Write an archive object once (If-None-Match: an existing one has the same
        content, its key being its digest); nothing when the record being replaced already
        references it. Returns whether a PUT was sent."""
        if previous == arc.ref.sha256:
            return False
        try:
            self._put(arc.key, arc.body, IfNoneMatch="*")
        except ClientError as e:
            if not is_race(e):
                raise
            # It exists: the same content unless it was damaged, which a PUT repairs.
            got = self._get(arc.key)
            if got is None or hashlib.sha256(got.body).hexdigest() != arc.ref.sha256:
                log.warning("watermark of %s: archive %s was damaged; rewriting it", table, arc.key)
                self._put(arc.key, arc.body)
        archive.remember(arc.ref.sha256, arc.body)
        return True

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
        body, arc = archive.stored_form(record, self.layout)
        info = SaveInfo(table=table, session_id=self.session_id, recovered_from=recovered_from)
        primary = self.layout.watermark_primary(table)
        previous = record._archive.sha256 if record._archive is not None else None
        try:
            if arc is not None and self._store_archive(table, arc, previous):
                info.archive = arc.key
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
        record._archive = arc.ref if arc is not None else None
        self._set_known(table, _Known(record, etag, body))
        info.etag = etag
        info.written["primary"] = primary
        log.info("saved watermark of %s (etag %s) to %s", table, etag, self._uri(primary))
        return info

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
        """Session copies (of `table`): one listing of every table's. DESIGN.md fixes their
        keys as `sessions/<run id>/<table>.json` (the old system's layout, which its users'
        tools read), so no prefix holds one table's copies; `cleanup-backups` bounds the
        listing, and the fleet's lookups (`_copy_objects`) list it once, not per table."""
        out = []
        for item in self._list(self.layout.watermark_sessions()):
            parsed = self.layout.parse_session(item["Key"])
            if parsed and (table is None or parsed[1] == table):
                out.append(_Obj("session", item["Key"], parsed[1], item["LastModified"]))
        return out

    def _copy_objects(self) -> list[_Obj]:
        """Every daily and session copy of every table, from one LIST of their common
        prefix (a page per 1,000 copies), not one of each kind."""
        out = []
        for item in self._list(self.layout.watermark_backups()):
            key, modified = item["Key"], item["LastModified"]
            if daily := self.layout.parse_daily(key):
                out.append(_Obj("daily", key, daily[0], modified, daily[1]))
            elif session := self.layout.parse_session(key):
                out.append(_Obj("session", key, session[1], modified))
        return out

    def list_tables(self) -> list[str]:
        """Tables with a primary or any backup."""
        names = {
            self.layout.parse_primary(i["Key"]) for i in self._list(self.layout.watermark_tables())
        }
        names |= {o.table for o in self._copy_objects()}
        return sorted(n for n in names if n is not None and _valid_table(n))

    # ------------------------------------------------------- status and cleanup


def _valid_table(name: str) -> bool:
    try:
        check_table(name)
    except ConfigError:
        return False
    return True
