"""The versions of a table's watermark record, and putting one back: the undo of
`s3rs watermark set / reset` (`watermark history` and `watermark restore`).

A record lives in several S3 objects: the primary, a daily copy per UTC date, a session
copy per run, the copies manual edits keep (below) and, when the bucket has versioning,
the older versions of the primary. Many of them hold the same bytes, so a *version* here is one
distinct content, named by the first 8 hex digits of its MD5 (like a short git hash: the
same content has the same id wherever it is kept, and the id never changes). S3 gives the
MD5 of every object the store wrote as its ETag, so listing the versions costs listings and
one GET per version shown, and finding one to restore costs one GET.

Every manual edit (`set`, `reset`, `restore`) keeps the record it replaced, byte for byte,
as `watermarks/edits/<table>/before-<edit>-<UTC time>.json`, written once the edit
committed (a refused edit writes nothing): whatever the bucket's versioning and whatever
copies later runs overwrite, the record before an edit can be put back. They sit apart
from the daily and session backups on purpose: recovery restores the newest valid copy it
finds, and must never bring back a record an operator replaced.

Restoring goes through `watermark.edits.preview/commit` like `set`: the same description,
confirmation and compare-and-swap onto the record that was shown. It puts back the read
position and the manifests (partitions, closed ranges, the load mirror, statuses, the
manual setting); it keeps the current `reconcile` section (repairs already made to the
warehouse are facts, not a position) and the record's creation time.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from s3rs_assets.errors import ConfigError, WatermarkError
from s3rs_assets.watermark.objects import S3_ERRORS
from s3rs_assets.watermark.record import WatermarkRecord
from s3rs_assets.watermark.store import WatermarkStore

ID_LENGTH = 8
#: Fields a restore keeps from the current record (see the module docstring).
KEPT_ON_RESTORE = ("schema_version", "table_name", "created_at", "reconcile", "backup_metadata")


@dataclass(frozen=True)
class Copy:
    """One S3 object (or older object version) holding a record of the table."""

    where: str  # "primary", "daily 20261126", "session <id>", "edit <label>", "s3 version <id>"
    key: str
    etag: str
    last_modified: datetime
    version_id: str | None = None


@dataclass
class Version:
    """One distinct content of the record, and every copy holding it."""

    id: str
    copies: list[Copy]
    record: WatermarkRecord | None = None
    error: str | None = None  # why the content is not a valid record (then not restorable)
    body: bytes = field(default=b"", repr=False)

    @property
    def newest(self) -> datetime:
        return max(c.last_modified for c in self.copies)

    @property
    def saved(self) -> datetime:
        """When this content was written as the record (its `updated_at`), or the first
        copy's time when it cannot be read."""
        if self.record is not None:
            return self.record.updated_at
        return min(c.last_modified for c in self.copies).astimezone(UTC).replace(tzinfo=None)

    @property
    def current(self) -> bool:
        return any(c.where == "primary" for c in self.copies)


def short_id(body: bytes) -> str:
    return hashlib.md5(body).hexdigest()[:ID_LENGTH]


def _etag(raw: str) -> str:
    return raw.strip('"').lower()


def _s3_error(table: str, e: Exception) -> WatermarkError:
    return WatermarkError(f"cannot list the watermark copies of {table}: {e}")


def copies(store: WatermarkStore, table: str) -> tuple[list[Copy], list[str]]:
    """Every copy of `table`'s record in S3, and notes on what could not be listed (the
    bucket's older versions need s3:ListBucketVersions)."""
    layout, client, bucket = store.layout, store.client, store.bucket
    primary = layout.watermark_primary(table)
    out: list[Copy] = []
    notes: list[str] = []

    def listing(prefix: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            items += page.get("Contents", [])
        return items

    try:
        for item in listing(primary):
            if item["Key"] == primary:
                out.append(Copy("primary", primary, _etag(item["ETag"]), item["LastModified"]))
        for item in listing(layout.watermark_dailies() + f"{table}_"):
            parsed = layout.parse_daily(item["Key"])
            if parsed and parsed[0] == table:
                out.append(
                    Copy(f"daily {parsed[1]}", item["Key"], _etag(item["ETag"]),
                         item["LastModified"])
                )
        for item in listing(layout.watermark_sessions()):
            parsed = layout.parse_session(item["Key"])
            if parsed and parsed[1] == table:
                out.append(
                    Copy(f"session {parsed[0]}", item["Key"], _etag(item["ETag"]),
                         item["LastModified"])
                )
        for item in listing(layout.watermark_edits(table)):
            label = layout.parse_edit_copy(table, item["Key"])
            if label:
                out.append(
                    Copy(f"edit {label}", item["Key"], _etag(item["ETag"]), item["LastModified"])
                )
    except S3_ERRORS as e:
        raise _s3_error(table, e) from None
    try:
        pages = client.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=primary)
        for page in pages:
            for v in page.get("Versions", []):
                vid = v.get("VersionId")
                if v["Key"] == primary and not v.get("IsLatest") and vid and vid != "null":
                    out.append(
                        Copy(f"s3 version {vid}", primary, _etag(v["ETag"]), v["LastModified"],
                             version_id=vid)
                    )
    except ClientError as e:
        notes.append(f"older S3 versions of the primary not listed: {e}")
    except S3_ERRORS as e:
        raise _s3_error(table, e) from None
    return out, notes


def _get(store: WatermarkStore, copy: Copy) -> bytes:
    kwargs = {"VersionId": copy.version_id} if copy.version_id else {}
    try:
        return store.client.get_object(Bucket=store.bucket, Key=copy.key, **kwargs)["Body"].read()
    except S3_ERRORS as e:
        where = f"s3://{store.bucket}/{copy.key}"
        raise WatermarkError(f"cannot read {copy.where} {where}: {e}") from None


def _load(store: WatermarkStore, table: str, group: list[Copy]) -> Version:
    body = _get(store, group[0])
    version = Version(short_id(body), group, body=body)
    try:
        # the store's parse: its archived partitions merged back (archive.py), then checked
        version.record = store._parse(table, body, None)
    except WatermarkError as e:
        version.error = str(e)
    return version


def _groups(found: list[Copy]) -> list[list[Copy]]:
    """Copies grouped by content (ETag: the MD5 of what the store wrote), newest first."""
    by_etag: dict[str, list[Copy]] = {}
    for c in found:
        by_etag.setdefault(c.etag, []).append(c)
    groups = [sorted(g, key=_order) for g in by_etag.values()]
    return sorted(groups, key=lambda g: max(c.last_modified for c in g), reverse=True)


def _order(c: Copy) -> tuple[int, str]:
    rank = {"primary": 0, "daily": 1, "session": 2, "edit": 3, "s3": 4}[c.where.split(" ")[0]]
    return rank, c.where


def versions(
    store: WatermarkStore, table: str, limit: int | None = 20
) -> tuple[list[Version], list[str]]:
    """The newest `limit` distinct contents of the record (all when None), newest first
    by the time each was saved, and the listing's notes."""
    found, notes = copies(store, table)
    groups = _groups(found)
    if limit is not None and len(groups) > limit:
        notes.append(f"{len(groups) - limit} older version(s) not shown (--limit)")
        groups = groups[:limit]
    out = [_load(store, table, g) for g in groups]
    return sorted(out, key=lambda v: (v.saved, v.current), reverse=True), notes


def find(store: WatermarkStore, table: str, ident: str) -> Version:
    """The version whose id starts with `ident` (at least 4 hex digits): one GET."""
    ident = ident.strip().lower()
    if len(ident) < 4 or any(ch not in "0123456789abcdef" for ch in ident):
        raise ConfigError(
            f"--to {ident!r} is not a version id: give the id `s3rs watermark history -t "
            f"{table}` shows (4 to 32 hex digits)"
        )
    groups = [g for g in _groups(copies(store, table)[0]) if g[0].etag.startswith(ident)]
    if not groups:
        raise ConfigError(
            f"no version {ident} of {table}'s watermark (see `s3rs watermark history -t "
            f"{table}`)"
        )
    if len(groups) > 1:
        raise ConfigError(f"version id {ident} is ambiguous for {table}: give more digits")
    version = _load(store, table, groups[0])
    if not version.id.startswith(ident[:ID_LENGTH]):
        raise WatermarkError(
            f"{groups[0][0].where} of {table} does not hold what its ETag says (MD5 "
            f"{version.id}…): not restored"
        )
    if version.record is None:
        raise WatermarkError(f"version {version.id} of {table} is not a valid record: "
                             f"{version.error}")
    return version


def restore_change(version: Version) -> Callable[[WatermarkRecord], None]:
    """The change that makes a record hold `version` (see KEPT_ON_RESTORE)."""
    source = version.record
    if source is None:
        raise WatermarkError(f"version {version.id} is not a valid record: {version.error}")

    def change(rec: WatermarkRecord) -> None:
        fresh = source.model_copy(deep=True)  # the change may run again after a lost race
        for name in WatermarkRecord.model_fields:
            if name not in KEPT_ON_RESTORE:
                setattr(rec, name, getattr(fresh, name))

    return change


def primary_body(store: WatermarkStore, table: str) -> bytes | None:
    """The primary's bytes as S3 holds them (None when there is none): what a manual edit
    is about to replace, read before it commits and kept (`keep_copy`) once it has."""
    primary = store.layout.watermark_primary(table)
    try:
        return store.client.get_object(Bucket=store.bucket, Key=primary)["Body"].read()
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
            return None
        raise WatermarkError(f"cannot read the watermark of {table}: {e}") from None
    except S3_ERRORS as e:
        raise WatermarkError(f"cannot read the watermark of {table}: {e}") from None


def keep_copy(store: WatermarkStore, table: str, action: str, body: bytes) -> tuple[str, str]:
    """Write `body` (the record an edit replaced), byte for byte, to the edit copy
    `before-<action>-<UTC time>`; returns (version id, key). Called after the edit
    committed, so a refused edit writes nothing at all."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    key = store.layout.watermark_edit_copy(table, f"before-{action}-{stamp}")
    try:
        store.client.put_object(
            Bucket=store.bucket,
            Key=key,
            Body=body,
            ContentMD5=base64.b64encode(hashlib.md5(body).digest()).decode(),
            ContentType="application/json",
        )
    except S3_ERRORS as e:
        raise WatermarkError(f"could not keep the replaced record at {key}: {e}") from None
    return short_id(body), key
