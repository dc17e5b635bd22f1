"""What the watermark store's operations did, as values: returned by `update()`,
`recover()` and `cleanup_copies()` and shown as Dagster metadata (`as_metadata()`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from s3rs_assets.watermark import WatermarkRecord, iso


@dataclass
class SaveInfo:
    """What one save did, for logs and Dagster metadata (`as_metadata()`)."""

    table: str
    session_id: str
    etag: str | None = None
    written: dict[str, str] = field(default_factory=dict)  # location -> key
    failed: dict[str, str] = field(default_factory=dict)  # location -> error
    primary_attempts: int = 0  # requests botocore sent for the primary PUT
    cas_rounds: int = 1
    recovered_from: str | None = None
    #: the archive object this save wrote (watermark/archive.py), None when none was needed
    archive: str | None = None

    def merged(self, other: SaveInfo) -> SaveInfo:
        """This save plus another one of the same table (the primary, then its backups)."""
        return SaveInfo(
            table=self.table,
            session_id=self.session_id,
            etag=self.etag or other.etag,
            written={**self.written, **other.written},
            failed={**self.failed, **other.failed},
            primary_attempts=self.primary_attempts or other.primary_attempts,
            cas_rounds=self.cas_rounds,
            recovered_from=self.recovered_from or other.recovered_from,
            archive=self.archive or other.archive,
        )

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
class UpdateResult:
    """What `update()` did: the record now stored, how it was saved, and the recovery its
    read needed (None when the primary was valid)."""

    record: WatermarkRecord
    save: SaveInfo
    recovery: RecoveryReport | None = None


@dataclass
class CleanupReport:
    days_to_keep: int
    dry_run: bool
    cutoff: datetime
    deleted: list[str] = field(default_factory=list)  # would-be deletions when dry_run
    kept_recent: int = 0
    kept_newest: dict[str, str] = field(default_factory=dict)  # table -> key kept by age
    failed: dict[str, str] = field(default_factory=dict)  # key -> error
    #: archives (watermark/archive.py) no kept record references, among `deleted`
    archives: list[str] = field(default_factory=list)

    def as_metadata(self) -> dict[str, Any]:
        return {
            "days_to_keep": self.days_to_keep,
            "dry_run": self.dry_run,
            "cutoff": self.cutoff.isoformat(),
            "deleted": len(self.deleted),
            "archives_deleted": len(self.archives),
            "kept_recent": self.kept_recent,
            "kept_newest": dict(self.kept_newest),
            "failed": dict(self.failed),
        }
