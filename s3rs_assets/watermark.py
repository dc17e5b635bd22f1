"""The watermark record: one versioned JSON document per table, both stages.

Its table-level fields are the old system's (`last_mysql_data_timestamp`,
`mysql_rows_extracted`, `mysql_status`, `s3_file_count`, `last_redshift_load_time`, ...),
so operators find what they know. What is new is the per-partition detail, which is the
truth those fields are derived from:

* `partitions[key].cursor` is the (cursor, primary key) position of the last row durably in
  S3 for that partition; `status` says whether the window was read to its end.
* `partitions[key].files` is the manifest of files actually written and verified. Every
  count (`mysql_rows_extracted`, `s3_file_count`) is computed from manifests by `refresh()`,
  never kept as a separate counter (the old `s3_file_count=0` bug).
* `loaded_partitions[key]` mirrors the warehouse's load ledger (which stays the truth for
  "was this file loaded").

`SCHEMA_VERSION` is bumped on any incompatible change, with a step in `migrate()`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError

from s3rs_assets.errors import WatermarkError

SCHEMA_VERSION = 1

Status = Literal["pending", "running", "partial", "success", "failed"]


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat(timespec="microseconds")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_assignment=True)


class Position(_Model):
    """A (cursor, primary key) tuple; `pk` None means "before every row at `c`"."""

    c: datetime
    pk: list[Any] | None = None

    def key(self) -> tuple:
        return (self.c, tuple(self.pk) if self.pk is not None else ())

    def __str__(self) -> str:
        pk = "start" if self.pk is None else ",".join(str(v) for v in self.pk)
        return f"({iso(self.c)}, {pk})"


class FileEntry(_Model):
    """One verified parquet object in S3."""

    key: str
    rows: NonNegativeInt
    bytes: NonNegativeInt
    md5: str
    cursor_min: datetime | None = None
    cursor_max: datetime | None = None


class PartitionState(_Model):
    """Backup progress of one partition (a time window of the cursor column)."""

    status: Literal["partial", "complete"] = "partial"
    window_start: datetime
    window_end: datetime
    cursor: Position | None = None
    files: list[FileEntry] = Field(default_factory=list)
    updated_at: datetime = Field(default_factory=utcnow)
    run_id: str | None = None
    recomputes: NonNegativeInt = 0

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


class LoadState(_Model):
    """Load progress of one partition, mirrored from the warehouse ledger."""

    files: list[str] = Field(default_factory=list)
    rows: NonNegativeInt = 0
    loaded_at: datetime = Field(default_factory=utcnow)


class BackupMetadata(_Model):
    saved_at: datetime
    session_id: str | None = None
    backup_locations: list[str] = Field(default_factory=list)
    recovered_from: str | None = None


class WatermarkRecord(_Model):
    schema_version: int = SCHEMA_VERSION
    table_name: str
    # MySQL -> S3 stage
    last_mysql_extraction_time: datetime | None = None
    last_mysql_data_timestamp: datetime | None = None
    mysql_rows_extracted: NonNegativeInt = 0
    mysql_status: Status = "pending"
    s3_file_count: NonNegativeInt = 0
    # S3 -> Redshift stage
    last_redshift_load_time: datetime | None = None
    redshift_rows_loaded: NonNegativeInt = 0
    redshift_status: Status = "pending"
    processed_s3_files: list[str] = Field(default_factory=list)
    last_error: str | None = None
    # bookkeeping
    backup_strategy: str = "dagster"
    manual_timestamp: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    partitions: dict[str, PartitionState] = Field(default_factory=dict)
    loaded_partitions: dict[str, LoadState] = Field(default_factory=dict)
    backup_metadata: BackupMetadata | None = None

    @classmethod
    def new(cls, table_name: str) -> WatermarkRecord:
        return cls(table_name=table_name)

    def refresh(self) -> WatermarkRecord:
        """Recompute every table-level count from the manifests and the load mirror."""
        files = [f for p in self.partitions.values() for f in p.files]
        self.mysql_rows_extracted = sum(f.rows for f in files)
        self.s3_file_count = len(files)
        cursors = [p.cursor.c for p in self.partitions.values() if p.cursor is not None]
        self.last_mysql_data_timestamp = max(cursors) if cursors else None
        loaded = [k for s in self.loaded_partitions.values() for k in s.files]
        self.processed_s3_files = sorted(set(loaded))
        self.redshift_rows_loaded = sum(s.rows for s in self.loaded_partitions.values())
        self.updated_at = utcnow()
        return self

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str | bytes, *, table_name: str | None = None) -> WatermarkRecord:
        """Parse and validate; raise WatermarkError naming what is wrong."""
        import json

        try:
            raw = json.loads(text)
        except (ValueError, UnicodeDecodeError) as e:
            raise WatermarkError(f"watermark is not valid JSON: {e}") from None
        if not isinstance(raw, dict):
            raise WatermarkError("watermark is not a JSON object")
        raw = migrate(raw)
        try:
            rec = cls.model_validate(raw)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise WatermarkError(f"watermark field {where!r}: {first['msg']}") from None
        if table_name is not None and rec.table_name != table_name:
            raise WatermarkError(
                f"watermark belongs to table {rec.table_name!r}, expected {table_name!r}"
            )
        return rec


def migrate(raw: dict[str, Any]) -> dict[str, Any]:
    """Bring an older document up to SCHEMA_VERSION; refuse one from a newer s3rs."""
    version = raw.get("schema_version")
    if version is None:
        # The old system's documents carried no version; they are version-1 compatible
        # except for what they lack, which the defaults fill.
        raw = {**raw, "schema_version": 1}
        version = 1
    if not isinstance(version, int) or version < 1:
        raise WatermarkError(f"watermark schema_version {version!r} is invalid")
    if version > SCHEMA_VERSION:
        raise WatermarkError(
            f"watermark schema_version {version} is newer than this s3rs understands "
            f"({SCHEMA_VERSION}); upgrade s3rs"
        )
    return raw
