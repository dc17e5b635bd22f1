"""The watermark: where each table's read stands, and the summary of what was extracted
and loaded.

    record.py    the record (`WatermarkRecord`, `Position`, manifests, closed ranges): the
                 one versioned JSON document per table, its validation and migrations
    reports.py   what a save, a recovery or a clean-up of copies did
    store.py     the only code that writes records: compare-and-swap on the primary in S3,
                 reads that never write
    recovery.py  the explicit step that restores a lost or invalid primary from its copies
    copies.py    the spare copies of a record (daily and per-run session copies): written
                 at a stage's end, their status, their clean-up
    archive.py   a long record's old complete partitions folded into an immutable archive
                 object on write, merged back on read
    edits.py     manual edits (`watermark set / reset`) and where the next backup starts

The record and the store are plain Python (no Dagster, no Spark: `lint-imports`); the
Dagster layer persists records through the IO manager, and `watermark_eventlog` adds the
event log as the last recovery source. "Backup" in s3rs means stage 1 (MySQL -> S3); the
spare copies of a record are "copies" (their S3 keys keep the old system's
`watermarks/backups/...` layout).

This package's namespace re-exports the record model, so `from s3rs_assets.watermark import
WatermarkRecord` reads as the concept it names.
"""

from s3rs_assets.watermark.record import (
    BYTES_TAG,
    FUTURE_TOLERANCE,
    SCHEMA_VERSION,
    BackupMetadata,
    ClosedRange,
    FileEntry,
    LoadState,
    PartitionState,
    Position,
    ReconcileRepair,
    ReconcileState,
    SourceCounts,
    Status,
    WatermarkRecord,
    decode_key_value,
    encode_key_value,
    iso,
    migrate,
    utcnow,
)

__all__ = [
    "BYTES_TAG",
    "FUTURE_TOLERANCE",
    "SCHEMA_VERSION",
    "BackupMetadata",
    "ClosedRange",
    "FileEntry",
    "LoadState",
    "PartitionState",
    "Position",
    "ReconcileRepair",
    "ReconcileState",
    "SourceCounts",
    "Status",
    "WatermarkRecord",
    "decode_key_value",
    "encode_key_value",
    "iso",
    "migrate",
    "utcnow",
]
