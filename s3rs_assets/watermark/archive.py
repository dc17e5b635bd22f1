"""Folding old complete partitions out of a long record: fold on write, expand on read.

A partition holding data costs ~850 bytes of record JSON (its file manifest, its load
mirror, its keys in `processed_s3_files`), so a 20-year daily table with rows on 73 days
made a 62-70 KB record, read at every plan and sensor tick and written at every checkpoint.
The in-memory `WatermarkRecord` never changes: it holds every partition, so every reader,
`check()`, `refresh()` and every invariant work on the whole table. Only the stored form
does:

* `stored_form` (the store, on every write): when the record's compact JSON exceeds
  `S3RS_RECORD_MAX_BYTES` (default 16384), the detail (`PartitionState` and `LoadState`) of
  the oldest partitions that are `complete` and fully loaded (the load mirror is the
  manifest) moves into one archive object, until the record fits in `FOLD_TO` of the limit
  (so a growing table does not rewrite its archive at each checkpoint); the partitions the
  replaced record had archived stay archived while they are unchanged. The newest partition
  always stays. The record keeps an `archive` reference (`ArchiveRef`: key, sha256, the
  partition keys, what they add to the totals, and the summary `s3rs status` needs of
  them: `ArchiveSummary`), and its table-level fields stay the
  whole table's (`mysql_rows_extracted`, `s3_file_count`, `redshift_rows_loaded`), except
  `processed_s3_files`, which in the stored JSON lists the loaded files of the partitions
  kept in the record: the archived ones' are in the archive object.
* The archive's key is content-addressed (`layout.watermark_archive`, under `watermarks/`,
  so never data): the store PUTs it once with If-None-Match before the record's
  compare-and-swap, and not at all when the replaced record referenced the same digest.
  The daily and session copies are byte copies of the primary, so they reference the same
  immutable objects and recovery from a copy works. A crash between the archive PUT and the
  CAS leaves an orphaned archive that nothing references: harmless (a later write of the
  same content finds it). Nothing deletes an archive on write (a copy or an edit copy
  may still reference one): `watermark cleanup-backups` deletes those older than its
  cutoff that no kept record (primary, copy, edit copy) references.
* `expand` (every read that validates a record: the store's `_parse`, `watermark history`,
  the sync monitor) GETs the archive (kept in-process by digest: it is immutable), verifies
  its digest and totals and merges its partitions back; `check()` then runs on the whole
  record. A missing or damaged archive makes the record invalid with an error naming the
  archive key, so the store's recovery order applies; an archive that cannot be read (S3
  down) raises `ArchiveUnreadable` instead, which is not "invalid" (nothing is recovered
  over it).

It holds file keys, counts, digests and timestamps: no secret.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from s3rs_assets.errors import ConfigError, WatermarkError
from s3rs_assets.layout import Layout
from s3rs_assets.watermark.record import (
    ArchiveRef,
    ArchiveSummary,
    LoadState,
    PartitionState,
    WatermarkRecord,
    dumps,
)

MAX_BYTES_ENV = "S3RS_RECORD_MAX_BYTES"
DEFAULT_MAX_BYTES = 16384
#: once folding is needed, fold until the record is this share of the limit
FOLD_TO = 0.75
#: bytes of archives kept in memory (by digest) per process, least recently used dropped
CACHE_BYTES = 64 * 1024 * 1024


class ArchiveUnreadable(WatermarkError):
    """The archive a record references could not be read (not: is missing or damaged)."""


def max_bytes() -> int:
    """The stored record's size limit, `S3RS_RECORD_MAX_BYTES` (bytes, >= 1024)."""
    raw = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 1024:
        raise ConfigError(f"{MAX_BYTES_ENV}={raw!r}: must be a whole number of bytes >= 1024")
    return value


@dataclass(frozen=True)
class Archive:
    """An archive object to write: its key, its bytes and the record's reference to it."""

    key: str
    body: bytes
    ref: ArchiveRef


# ----------------------------------------------------------------------- cache

_cache: OrderedDict[str, bytes] = OrderedDict()
_cache_lock = threading.Lock()


def cached(sha256: str) -> bytes | None:
    with _cache_lock:
        body = _cache.get(sha256)
        if body is not None:
            _cache.move_to_end(sha256)
        return body


def remember(sha256: str, body: bytes) -> None:
    with _cache_lock:
        _cache[sha256] = body
        _cache.move_to_end(sha256)
        total = sum(len(b) for b in _cache.values())
        while total > CACHE_BYTES and len(_cache) > 1:
            total -= len(_cache.popitem(last=False)[1])


def forget_cache() -> None:
    """Drop every cached archive (tests)."""
    with _cache_lock:
        _cache.clear()


# ------------------------------------------------------------------------ fold


def _foldable(record: WatermarkRecord) -> list[str]:
    """Partitions that may move to the archive, oldest first: complete, with files, every
    file loaded (the load mirror is the manifest, same MD5s), and not the newest."""
    ordered = sorted(record.partitions, key=lambda k: record.partitions[k].window_start)
    out = []
    for key in ordered[:-1]:
        part, load = record.partitions[key], record.loaded_partitions.get(key)
        if part.status != "complete" or not part.files or load is None:
            continue
        manifest = {f.key: f.md5 for f in part.files}
        if set(load.files) != set(manifest) or len(load.files) != len(manifest):
            continue
        if any(load.md5.get(k, md5) != md5 for k, md5 in manifest.items()):
            continue
        out.append(key)
    return out


def _cost(doc: dict[str, Any], key: str) -> int:
    """Bytes partition `key` takes in the stored JSON, less what the reference adds back."""
    part = len(dumps(doc["partitions"][key]))
    load = doc["loaded_partitions"].get(key)
    files = sum(len(dumps(k)) + 1 for k in (load or {}).get("files", []))
    return part + (len(dumps(load)) if load else 0) + files + len(dumps(key)) + 2


def _build(
    record: WatermarkRecord, doc: dict[str, Any], moved: list[str], layout: Layout
) -> tuple[str, Archive]:
    """The stored JSON with `moved` folded out, and the archive holding them."""
    moved_set = set(moved)
    content = {
        "table_name": record.table_name,
        "partitions": {k: doc["partitions"][k] for k in sorted(moved_set)},
        "loaded_partitions": {k: doc["loaded_partitions"][k] for k in sorted(moved_set)},
    }
    body = json.dumps(content, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()
    sha = hashlib.sha256(body).hexdigest()
    files = [f for k in moved_set for f in record.partitions[k].files]
    ref = ArchiveRef(
        key=layout.watermark_archive(record.table_name, sha[:32]),
        sha256=sha,
        partitions=sorted(moved_set),
        files=len(files),
        rows=sum(f.rows for f in files),
        bytes=sum(f.bytes for f in files),
        loaded_files=sum(len(record.loaded_partitions[k].files) for k in moved_set),
        loaded_rows=sum(record.loaded_partitions[k].rows for k in moved_set),
        summary=ArchiveSummary.of(
            {k: record.partitions[k] for k in sorted(moved_set)},
            {k: record.loaded_partitions[k] for k in sorted(moved_set)},
        ),
    )
    stored = dict(doc)
    stored["partitions"] = {k: v for k, v in doc["partitions"].items() if k not in moved_set}
    kept_loads = {k: v for k, v in doc["loaded_partitions"].items() if k not in moved_set}
    stored["loaded_partitions"] = kept_loads
    stored["processed_s3_files"] = sorted({f for v in kept_loads.values() for f in v["files"]})
    stored["archive"] = ref.model_dump(mode="json")
    return dumps(stored), Archive(ref.key, body, ref)


def stored_form(
    record: WatermarkRecord, layout: Layout, limit: int | None = None
) -> tuple[bytes, Archive | None]:
    """The bytes to store for a whole (expanded, checked) record, and the archive they
    reference (None when the record fits or nothing can move). See the module docstring."""
    limit = max_bytes() if limit is None else limit
    doc = record.to_doc()
    whole = dumps(doc)
    size = len(whole.encode())
    if size <= limit:
        return whole.encode(), None
    foldable = _foldable(record)
    if not foldable:
        return whole.encode(), None
    before = set(record._archive.partitions) if record._archive is not None else set()
    moved = [k for k in foldable if k in before]
    saved = sum(_cost(doc, k) for k in moved)
    if size - saved > limit:  # the old set no longer fits: fold more, to FOLD_TO of the limit
        for key in foldable:
            if size - saved <= limit * FOLD_TO:
                break
            if key not in before:
                moved.append(key)
                saved += _cost(doc, key)
    rest = [k for k in foldable if k not in moved]
    while True:
        text, archive = _build(record, doc, moved, layout) if moved else (whole, None)
        if len(text.encode()) <= limit or not rest:
            return text.encode(), archive
        moved.append(rest.pop(0))


# ---------------------------------------------------------------------- expand


class _Content(BaseModel):
    """An archive object's content (parsed by pydantic's JSON parser: one pass)."""

    table_name: str
    partitions: dict[str, PartitionState]
    loaded_partitions: dict[str, LoadState]


def expand(record: WatermarkRecord, load: Callable[[str], bytes | None]) -> WatermarkRecord:
    """Merge a folded record's archived partitions back (in place; returns it).

    `load(key)` returns the archive object's bytes, None when it does not exist; an S3
    error it raises becomes ArchiveUnreadable. A missing or damaged archive (digest,
    table, partitions or totals other than the reference says) raises WatermarkError
    naming the archive key. A record that was not folded is returned unchanged."""
    ref = record._archive
    if not record._folded or ref is None:
        return record
    who = f"watermark of {record.table_name}: archive {ref.key}"
    body = cached(ref.sha256)
    if body is None:
        try:
            body = load(ref.key)
        except WatermarkError:
            raise
        except Exception as e:  # noqa: BLE001 - any read failure: unknown, never "invalid"
            raise ArchiveUnreadable(f"{who} cannot be read: {e}") from None
        if body is None:
            raise WatermarkError(f"{who} is missing")
        digest = hashlib.sha256(body).hexdigest()
        if digest != ref.sha256:
            raise WatermarkError(f"{who} is damaged: sha256 {digest}, expected {ref.sha256}")
    try:
        content = _Content.model_validate_json(body)
    except ValidationError as e:
        raise WatermarkError(f"{who} is damaged: {e.errors()[0]['msg']}") from None
    parts, loads, table = content.partitions, content.loaded_partitions, content.table_name
    files = [f for p in parts.values() for f in p.files]
    found = (
        table,
        sorted(parts),
        sorted(loads),
        len(files),
        sum(f.rows for f in files),
        sum(len(v.files) for v in loads.values()),
        sum(v.rows for v in loads.values()),
    )
    want = (
        record.table_name,
        ref.partitions,
        ref.partitions,
        ref.files,
        ref.rows,
        ref.loaded_files,
        ref.loaded_rows,
    )
    summary = ref.summary
    if found != want or (summary is not None and ArchiveSummary.of(parts, loads) != summary):
        raise WatermarkError(f"{who} does not hold what the record says it does")
    both = set(parts) & (set(record.partitions) | set(record.loaded_partitions))
    if both:
        raise WatermarkError(f"{who}: partition(s) {sorted(both)} are in the record too")
    remember(ref.sha256, body)
    record.partitions = dict(
        sorted({**parts, **record.partitions}.items(), key=lambda kv: kv[1].window_start)
    )
    record.loaded_partitions = {**loads, **record.loaded_partitions}
    loaded = {k for v in record.loaded_partitions.values() for k in v.files}
    record.processed_s3_files = sorted(loaded)
    record._folded = False
    return record


def s3_loader(client: Any, bucket: str) -> Callable[[str], bytes | None]:
    """`load` for `expand` from a boto3 S3 client: None when the object is missing."""
    from botocore.exceptions import ClientError

    def load(key: str) -> bytes | None:
        try:
            return client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                return None
            raise

    return load
