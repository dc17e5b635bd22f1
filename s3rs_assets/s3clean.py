"""S3 cleanup (`s3rs s3clean`): which parquet files of a table are loaded, and deleting them.

A file is `loaded` when the warehouse's load ledger holds its key with the MD5 of its
current content, for the target table as it is now (a chunk read again after `watermark
set` overwrites its key with new content, not loaded until the ledger holds that version;
a dropped or emptied target holds nothing), `unloaded` when a partition manifest lists it,
else `orphan` (no state needs it). The ledger is the only source asked: when the warehouse
cannot be reached, nothing is listed or deleted (ConfigError, exit 2) — the watermark's
copy of the ledger could call a not-yet-loaded file loaded. Only loaded files are deleted
unless `force`; watermark objects never are. An unloaded file deleted with `force` is not
lost data: its partition is dropped from the record at once (`forget_lost`), so the next
backup reads its rows from MySQL again — `sync --backup-only` too, which asks no warehouse
and so could not tell such a file from a loaded one (a truncated target's files are
unloaded for the ledger while the record's mirror still calls them loaded). Partition
manifests keep listing deleted loaded files: they are the history of what was extracted
and loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError
from s3rs_assets.load import ledger_versions
from s3rs_assets.watermark.edits import forget_lost

STATES = ("loaded", "unloaded", "orphan")
_DELETE_BATCH = 1000  # S3 DeleteObjects takes at most 1,000 keys


@dataclass
class Listing:
    """Every data object of one table, each a dict with key, partition, bytes,
    last_modified, etag and state; `source` says where the load state came from."""

    table: str
    files: list[dict[str, Any]]
    source: str

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for o in self.files if o["state"] == s) for s in STATES}


@dataclass
class CleanReport:
    """What `clean` deleted (or would, with dry_run) and kept for one table."""

    table: str
    dry_run: bool
    older_than: str | None
    source: str
    candidates: int
    doomed: list[dict[str, Any]] = field(default_factory=list)  # chosen for deletion
    deleted: list[str] = field(default_factory=list)
    kept: list[dict[str, Any]] = field(default_factory=list)  # old enough, not loaded
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def forced_unloaded(self) -> list[str]:
        """Deleted (or to be) while still waiting in a manifest: the next sync reads their
        partitions from MySQL again."""
        return [o["key"] for o in self.doomed if o["state"] == "unloaded"]

    @property
    def removed(self) -> list[dict[str, Any]]:
        """The files gone (or that would be, in a dry run)."""
        if self.dry_run:
            return self.doomed
        done = set(self.deleted)
        return [o for o in self.doomed if o["key"] in done]

    def as_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "dry_run": self.dry_run,
            "older_than": self.older_than,
            "load_state_from": self.source,
            "candidates": self.candidates,
            "would_delete" if self.dry_run else "deleted": (
                [o["key"] for o in self.doomed] if self.dry_run else self.deleted
            ),
            "kept_unloaded": [o["key"] for o in self.kept],
            "forced_unloaded": self.forced_unloaded,
            "failed": self.failed,
        }


def loaded_versions(
    table: TableConfig, warehouse: Callable[[], Any]
) -> tuple[set[tuple[str, str]], str]:
    """(file key, md5) of every file version the warehouse ledger holds for `table` as it
    is now, and where that came from. ConfigError (nothing listed, nothing deleted) when
    the warehouse cannot be asked (`warehouse()` builds the resource)."""
    wh = warehouse()
    try:
        versions = ledger_versions(wh, table.target_schema, table.target_table)
    except ConfigError as e:
        raise ConfigError(
            f"{table.name}: cannot ask the warehouse's load ledger which files are loaded "
            f"({e}); nothing was listed or deleted"
        ) from None
    return versions, f"warehouse load ledger ({wh.redacted()})"


def data_objects(s3: Any, table: TableConfig) -> list[dict[str, Any]]:
    """Every object under the table's data prefix (parquet files and repair files)."""
    prefix = s3.layout.data_table(table.schema, table.table)
    out = []
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix)
    for page in pages:
        for o in page.get("Contents", []):
            out.append(
                {
                    "key": o["Key"],
                    "partition": o["Key"][len(prefix) :].split("/", 1)[0],
                    "bytes": o["Size"],
                    "last_modified": o["LastModified"],
                    "etag": o["ETag"].strip('"'),
                }
            )
    return out


def classify(s3: Any, store: Any, table: TableConfig, warehouse: Callable[[], Any]) -> Listing:
    """Every data object of `table` with its state: loaded / unloaded / orphan."""
    rec = store.read(table.name)
    parts = rec.partitions if rec else {}
    manifest = {f.key for p in parts.values() for f in p.files}
    md5s = {f.key: f.md5 for p in parts.values() for f in p.files}
    versions, source = loaded_versions(table, warehouse)
    objs = data_objects(s3, table)
    for o in objs:
        # Single-part uploads (all s3rs writes) have ETag == MD5 of the content.
        md5 = o["etag"] if "-" not in o["etag"] else md5s.get(o["key"], "")
        if (o["key"], md5) in versions:
            o["state"] = "loaded"
        elif o["key"] in manifest:
            o["state"] = "unloaded"
        else:
            o["state"] = "orphan"  # in no manifest and never loaded (e.g. read before `set`)
    return Listing(table.name, objs, source)


def clean(
    s3: Any,
    store: Any,
    table: TableConfig,
    warehouse: Callable[[], Any],
    *,
    cutoff: datetime | None,
    older_than: str | None,
    dry_run: bool,
    force: bool,
) -> CleanReport:
    """Delete the table's loaded files last written before `cutoff` (every age when None);
    with `force` unloaded and orphan files too; never a watermark object."""
    listing = classify(s3, store, table, warehouse)
    protected = s3.layout.watermarks()
    old = [o for o in listing.files if cutoff is None or o["last_modified"] < cutoff]
    doomed = [o for o in old if (force or o["state"] == "loaded")]
    doomed = [o for o in doomed if not o["key"].startswith(protected)]
    report = CleanReport(
        table.name,
        dry_run,
        older_than,
        listing.source,
        len(old),
        doomed=doomed,
        kept=[o for o in old if o not in doomed],
    )
    if dry_run:
        return report
    client = s3.client()
    for i in range(0, len(doomed), _DELETE_BATCH):
        batch = [o["key"] for o in doomed[i : i + _DELETE_BATCH]]
        resp = client.delete_objects(
            Bucket=s3.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
        )
        errs = {e["Key"]: e.get("Code", "error") for e in resp.get("Errors", [])}
        report.failed.update(errs)
        report.deleted += [k for k in batch if k not in errs]
    gone = set(report.deleted)
    lost: dict[str, list[str]] = {}
    for o in doomed:
        if o["state"] == "unloaded" and o["key"] in gone:
            lost.setdefault(o["partition"], []).append(o["key"])
    if lost:
        forget_lost(store, table.name, lost)
    return report
