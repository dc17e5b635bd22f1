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
* `closed` holds the stretches of partitions that are complete and held no row, as
  [start, end) ranges of the cursor: a 20-year daily table with data on 30 days keeps 30
  partition entries and a handful of ranges, not 7,300 entries. A partition is complete
  when its entry says so or a closed range covers its window (`is_complete`).

The JSON is written compact (no indentation, partition entries without their default
values): its size follows the partitions that hold data, not the calendar.

`SCHEMA_VERSION` is bumped on any incompatible change, with a step in `migrate()`.
"""

from __future__ import annotations

import bisect
import json
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PrivateAttr,
    ValidationError,
    field_serializer,
    field_validator,
)

from s3rs_assets import key_codec
from s3rs_assets.errors import WatermarkError
from s3rs_assets.watermark.migrations import SCHEMA_VERSION, migrate

# A stored cursor may be at most this far ahead of the source clock (clock jitter); beyond
# it the record would skip rows not yet written, so it is invalid.
FUTURE_TOLERANCE = timedelta(minutes=1)

Status = Literal["pending", "running", "partial", "success", "failed"]


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat(timespec="microseconds")


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", validate_assignment=True)


#: Key values in JSON: one canonical form, tagged where JSON has no type (key_codec.py).
BYTES_TAG = key_codec.BYTES_TAG
encode_key_value = key_codec.encode
decode_key_value = key_codec.decode


def _show(value: Any) -> str:
    return f"0x{bytes(value).hex()}" if isinstance(value, bytes | bytearray) else str(value)


class Position(_Model):
    """A (cursor, primary key) tuple; `pk` None means "before every row at `c`".

    Key values are what MySQL returns (int, str, Decimal, date, datetime, timedelta,
    bytes); in JSON the ones JSON has no type for are tagged (`key_codec`), so a record read
    back holds the same values. Compare positions with `key()`: it is canonical, so a
    position read from a record written before the tags equals the run's own."""

    c: datetime
    pk: list[Any] | None = None

    @field_validator("pk", mode="before")
    @classmethod
    def _decode_pk(cls, value: Any) -> Any:
        return [decode_key_value(v) for v in value] if isinstance(value, list) else value

    @field_serializer("pk", when_used="json")
    def _encode_pk(self, pk: list[Any] | None) -> list[Any] | None:
        return None if pk is None else [encode_key_value(v) for v in pk]

    def key(self) -> tuple:
        """What identifies the position: equal for equal rows, however it was read."""
        return (self.c, key_codec.canonical_key(self.pk))

    def __str__(self) -> str:
        pk = "start" if self.pk is None else ",".join(_show(v) for v in self.pk)
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


class ClosedRange(_Model):
    """Consecutive partitions, complete and empty: [start, end) of the cursor."""

    start: datetime
    end: datetime


class LoadState(_Model):
    """Load progress of one partition, mirrored from the warehouse ledger: which of the
    partition's manifest files the ledger holds (key and md5), and their rows. A summary,
    never a source: `refresh()` keeps it a subset of the manifest."""

    files: list[str] = Field(default_factory=list)
    rows: NonNegativeInt = 0
    loaded_at: datetime = Field(default_factory=utcnow)
    #: file key -> md5 of the loaded version (absent in records written before it)
    md5: dict[str, str] = Field(default_factory=dict)


class SourceCounts(_Model):
    """Rows the last backup run did not read, counted on every run so none is dropped
    silently: NULL or zero cursors and rows before `start` (no partition holds them), rows
    at or above the safety bound (read by a later run), of which `future` are dated after
    MySQL's clock (clock skew, bad imports, scheduled rows: read once the clock passes)."""

    counted_at: datetime  # MySQL's clock, source time zone
    upper_bound: datetime
    null_cursor: NonNegativeInt = 0
    zero_date_cursor: NonNegativeInt = 0
    before_start: NonNegativeInt = 0
    above_bound: NonNegativeInt = 0
    future: NonNegativeInt = 0
    latest_future: datetime | None = None

    def metadata(self) -> dict[str, int]:
        return {
            "null_cursor_rows": self.null_cursor,
            "zero_date_cursor_rows": self.zero_date_cursor,
            "rows_before_start": self.before_start,
            "rows_above_bound": self.above_bound,
            "future_rows": self.future,
        }

    def warnings(self, table: str) -> list[str]:
        """One line per kind of row no run has copied, naming the table and the count."""
        out = []
        if self.future:
            out.append(
                f"{table}: {self.future:,} row(s) are dated after MySQL's clock "
                f"({iso(self.counted_at)}; latest {iso(self.latest_future)}): not copied "
                "until the clock passes them"
            )
        if self.null_cursor:
            out.append(f"{table}: {self.null_cursor:,} row(s) have a NULL cursor: never copied")
        if self.zero_date_cursor:
            out.append(
                f"{table}: {self.zero_date_cursor:,} row(s) have a zero-date cursor "
                "(0000-00-00, or a zero month or day such as 2026-11-00): never copied"
            )
        if self.before_start:
            out.append(
                f"{table}: {self.before_start:,} row(s) are dated before the first partition "
                "(tables.yaml start): never copied"
            )
        return out


class BackupMetadata(_Model):
    saved_at: datetime
    session_id: str | None = None
    backup_locations: list[str] = Field(default_factory=list)
    recovered_from: str | None = None


def loaded_to(part: PartitionState, load: LoadState) -> datetime | None:
    """The greatest cursor the warehouse holds of one partition according to its load
    mirror: its cursor when every file of it is loaded, else the greatest `cursor_max` of
    its loaded files (`s3rs status`'s newest loaded cursor is the greatest of these)."""
    loaded = set(load.files)
    if part.cursor is not None and {f.key for f in part.files} <= loaded:
        return part.cursor.c
    return max((f.cursor_max for f in part.files if f.key in loaded and f.cursor_max), default=None)


class ArchiveSummary(_Model):
    """What `s3rs status` needs of a record's archived partitions, kept in its reference so
    a look over the fleet reads no archive (`status.py`): the greatest cursor loaded among
    them, the newest-updated one's run, the latest load time. `expand` checks it against
    the archive's content."""

    loaded_to: datetime | None = None
    last_run_id: str | None = None
    last_run_at: datetime | None = None
    last_loaded_at: datetime | None = None

    @classmethod
    def of(cls, parts: dict[str, PartitionState], loads: dict[str, LoadState]) -> ArchiveSummary:
        """The summary of partitions `parts` and their load mirror `loads`."""
        cursors = [loaded_to(parts[k], ld) for k, ld in loads.items() if k in parts]
        runs = [p for p in parts.values() if p.run_id]
        run = max(runs, key=lambda p: p.updated_at) if runs else None
        return cls(
            loaded_to=max((c for c in cursors if c is not None), default=None),
            last_run_id=run.run_id if run else None,
            last_run_at=run.updated_at if run else None,
            last_loaded_at=max((ld.loaded_at for ld in loads.values()), default=None),
        )


class ArchiveRef(_Model):
    """In a stored record only: where the detail of its folded partitions is (`archive.py`).

    `key` is the immutable archive object, `sha256` its content's digest; the totals are
    what those partitions add to the record's (so a reader of the raw JSON sees the whole
    table's counts, and expansion proves it got the right archive). `summary` (absent in
    references written before it) is what `s3rs status` needs of them."""

    key: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    partitions: list[str]
    files: NonNegativeInt
    rows: NonNegativeInt
    bytes: NonNegativeInt
    loaded_files: NonNegativeInt
    loaded_rows: NonNegativeInt
    summary: ArchiveSummary | None = None


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
    closed: list[ClosedRange] = Field(default_factory=list)
    #: what the last backup run found it could not read (None before the first run)
    source_counts: SourceCounts | None = None
    backup_metadata: BackupMetadata | None = None
    #: the last `s3rs reconcile` of the table and its repair files (ReconcileState below)
    reconcile: ReconcileState | None = None
    #: The stored form's `archive` reference (never dumped: the model holds every partition).
    #: Set by `from_json` when the stored JSON folded partitions out; `_folded` stays True
    #: until `archive.expand` merged them back, and `check()` refuses a folded record.
    _archive: ArchiveRef | None = PrivateAttr(default=None)
    _folded: bool = PrivateAttr(default=False)

    @classmethod
    def new(cls, table_name: str) -> WatermarkRecord:
        return cls(table_name=table_name)

    def _manifest_totals(self) -> tuple[int, int]:
        """(files, rows) the partition manifests sum to."""
        files = [f for p in self.partitions.values() for f in p.files]
        return len(files), sum(f.rows for f in files)

    def refresh(self) -> WatermarkRecord:
        """Recompute every table-level count from the manifests and the load mirror.

        The mirror is cut to the manifests first: a file replaced by a re-read, dropped by
        `watermark set` or by a recomputed partition no longer counts as loaded, so the load
        counters never exceed what was extracted and each file counts once."""
        self.s3_file_count, self.mysql_rows_extracted = self._manifest_totals()
        cursors = [p.cursor.c for p in self.partitions.values() if p.cursor is not None]
        self.last_mysql_data_timestamp = max(cursors) if cursors else None
        for key in list(self.loaded_partitions):
            load = self.loaded_partitions[key]
            state = self.partitions.get(key)
            manifest = {f.key: f for f in state.files} if state else {}
            keep = [
                k
                for k in load.files
                if k in manifest and load.md5.get(k, manifest[k].md5) == manifest[k].md5
            ]
            if not keep:
                del self.loaded_partitions[key]
                continue
            if keep != load.files:
                load.files = keep
                load.md5 = {k: v for k, v in load.md5.items() if k in keep}
            load.rows = sum(manifest[k].rows for k in keep)
        loaded = [k for s in self.loaded_partitions.values() for k in s.files]
        self.processed_s3_files = sorted(set(loaded))
        self.redshift_rows_loaded = sum(s.rows for s in self.loaded_partitions.values())
        self.updated_at = utcnow()
        return self

    # ------------------------------------------------------------ closed ranges

    def closed_range(self, start: datetime, end: datetime) -> ClosedRange | None:
        """The closed range covering the window [start, end), if any."""
        i = bisect.bisect_right([r.start for r in self.closed], start) - 1
        if i >= 0 and self.closed[i].start <= start and end <= self.closed[i].end:
            return self.closed[i]
        return None

    def is_complete(self, key: str, start: datetime, end: datetime) -> bool:
        state = self.partitions.get(key)
        if state is not None:
            return state.status == "complete"
        # a window of no wall-clock time (the second of a repeated hour) holds no row
        return start >= end or self.closed_range(start, end) is not None

    def close_empty(self, key: str, start: datetime, end: datetime) -> None:
        """Partition `key` is complete and holds no row: fold it into the closed ranges
        (merging neighbours) instead of keeping an entry for it. A window of no wall-clock
        time needs no range: `is_complete` knows it is."""
        self.partitions.pop(key, None)
        if start >= end:
            return
        ranges = [r for r in self.closed if not (start <= r.start and r.end <= end)]
        ranges.append(ClosedRange(start=start, end=end))
        ranges.sort(key=lambda r: r.start)
        merged: list[ClosedRange] = []
        for r in ranges:
            if merged and r.start <= merged[-1].end:
                if r.end > merged[-1].end:
                    merged[-1] = ClosedRange(start=merged[-1].start, end=r.end)
            else:
                merged.append(r)
        self.closed = merged

    def reopen(self, start: datetime, end: datetime) -> None:
        """[start, end) is no longer known to be empty (read again, or set by hand)."""
        out: list[ClosedRange] = []
        for r in self.closed:
            if r.end <= start or end <= r.start:
                out.append(r)
                continue
            if r.start < start:
                out.append(ClosedRange(start=r.start, end=start))
            if end < r.end:
                out.append(ClosedRange(start=end, end=r.end))
        self.closed = out

    # ---------------------------------------------------------------- JSON

    def to_doc(self) -> dict[str, Any]:
        """The whole record as a JSON-able dict, partition entries without their defaults."""
        doc = self.model_dump(mode="json")
        doc["partitions"] = {
            k: p.model_dump(mode="json", exclude_defaults=True) | {"status": p.status}
            for k, p in self.partitions.items()
        }
        return doc

    def to_json(self) -> str:
        """The whole record (every partition), compact; the store may fold it (archive.py)."""
        return dumps(self.to_doc())

    @classmethod
    def from_json(cls, text: str | bytes, *, table_name: str | None = None) -> WatermarkRecord:
        """Parse and validate; raise WatermarkError naming the table and what is wrong.

        This checks the schema version, the field types and the table name. `check()` adds
        the consistency and clock checks the store runs on every read.
        """
        who = f"watermark of {table_name}" if table_name else "watermark"
        try:
            raw = json.loads(text)
        except (ValueError, UnicodeDecodeError) as e:
            raise WatermarkError(f"{who} is not valid JSON: {e}") from None
        if not isinstance(raw, dict):
            raise WatermarkError(f"{who} is not a JSON object")
        if not table_name and isinstance(raw.get("table_name"), str):
            who = f"watermark of {raw['table_name']}"
        try:
            raw = migrate(raw)
        except WatermarkError as e:
            raise WatermarkError(f"{who}: {e}") from None
        stored_ref = raw.pop("archive", None) if isinstance(raw, dict) else None
        try:
            rec = cls.model_validate(raw)
            ref = None if stored_ref is None else ArchiveRef.model_validate(stored_ref)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
            raise WatermarkError(f"{who}: field {where!r}: {first['msg']}{more}") from None
        if table_name is not None and rec.table_name != table_name:
            raise WatermarkError(
                f"watermark belongs to table {rec.table_name!r}, expected {table_name!r}"
            )
        if ref is not None:
            rec._archive, rec._folded = ref, True
        return rec

    def check(
        self, *, table_name: str | None = None, now: datetime | None = None, folded: bool = False
    ) -> WatermarkRecord:
        """Semantic validation the store runs on every read and before every write.

        Raises WatermarkError naming the table and the problem when: the schema version is
        not this s3rs's; a count is negative; `s3_file_count` or `mysql_rows_extracted`
        differ from what the partition manifests sum to; a partition window ends before it
        starts; or,
        given the source clock `now` (naive, source time zone), a cursor is later than
        `now + FUTURE_TOLERANCE`. Returns self. A folded record (its archive not read) is
        refused unless `folded`: then what it holds is checked, its archive reference's
        totals standing for the archived partitions (`s3rs status`, which reads no archive).
        Long on purpose: every validation of a record in one place, so reading and writing apply
        the same rules.
        """
        who = f"watermark of {self.table_name}"
        if table_name is not None and self.table_name != table_name:
            raise WatermarkError(
                f"watermark belongs to table {self.table_name!r}, expected {table_name!r}"
            )
        ref = self._archive if self._folded else None
        if ref is not None and not folded:
            raise WatermarkError(
                f"{who}: {len(ref.partitions)} partition(s) are in the archive "
                f"{ref.key}, not read (the store expands a record before using it)"
            )
        if self.schema_version != SCHEMA_VERSION:
            raise WatermarkError(
                f"{who}: schema_version {self.schema_version!r} is not {SCHEMA_VERSION}"
            )
        for name in ("mysql_rows_extracted", "s3_file_count", "redshift_rows_loaded"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise WatermarkError(f"{who}: {name} is {value!r}, must be a count >= 0")
        for key, part in self.partitions.items():
            # equal ends are the second of a repeated autumn hour (partitions.py)
            if part.window_start > part.window_end:
                raise WatermarkError(
                    f"{who}: partition {key!r} has a window that ends before it starts "
                    f"[{iso(part.window_start)}, {iso(part.window_end)})"
                )
        last_end: datetime | None = None
        for r in self.closed:
            if r.start >= r.end or (last_end is not None and r.start < last_end):
                raise WatermarkError(
                    f"{who}: closed range [{iso(r.start)}, {iso(r.end)}) is empty, out of "
                    "order or overlaps the previous one"
                )
            last_end = r.end
        # Summed in place: a deep copy of a long history costs more than the write itself.
        files, rows = self._manifest_totals()
        if ref is not None:
            files, rows = files + ref.files, rows + ref.rows
        for name, actual in (("s3_file_count", files), ("mysql_rows_extracted", rows)):
            stored = getattr(self, name)
            if stored != actual:
                raise WatermarkError(
                    f"{who}: {name} is {stored} but the partition manifests sum to {actual}"
                )
        if now is not None:
            limit = _naive(now) + FUTURE_TOLERANCE
            stamps: list[tuple[str, datetime | None]] = [
                ("last_mysql_data_timestamp", self.last_mysql_data_timestamp),
                ("manual_timestamp", self.manual_timestamp),
            ]
            stamps += [
                (f"cursor of partition {k!r}", p.cursor.c if p.cursor else None)
                for k, p in self.partitions.items()
            ]
            for what, ts in stamps:
                if ts is not None and _naive(ts) > limit:
                    raise WatermarkError(
                        f"{who}: {what} {iso(_naive(ts))} is in the future of the source "
                        f"clock ({iso(_naive(now))})"
                    )
        return self


def dumps(doc: Any) -> str:
    """Compact JSON, as every stored record is written."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _naive(ts: datetime) -> datetime:
    """Aware timestamps (old documents end in 'Z') compare as naive UTC."""
    return ts if ts.tzinfo is None else ts.astimezone(UTC).replace(tzinfo=None)


# --------------------------------------------------------------------------- reconcile
# Written by s3rs_assets.reconcile only; optional, so records without it stay valid.


class ReconcileRepair(_Model):
    """One repair file of reconcile: rows re-read from MySQL by key (the file) and the keys
    to delete or replace in the warehouse (kept in the file's metadata), loaded through the
    ledger under partition `_repair`. `loaded_at` None: written, not known to be loaded."""

    file: FileEntry
    upserts: NonNegativeInt = 0
    deletes: NonNegativeInt = 0
    soft: bool = False
    bound: datetime
    created_at: datetime = Field(default_factory=utcnow)
    loaded_at: datetime | None = None


class ReconcileState(_Model):
    """What the last reconcile compared, found and repaired (counts per kind)."""

    last_run_at: datetime | None = None
    columns: Literal["key", "all"] = "key"
    applied: bool = False
    bound: datetime | None = None
    ranges_compared: NonNegativeInt = 0
    mysql_rows: NonNegativeInt = 0
    warehouse_rows: NonNegativeInt = 0
    found: dict[str, NonNegativeInt] = Field(default_factory=dict)
    repaired: dict[str, NonNegativeInt] = Field(default_factory=dict)
    seconds: float = 0.0
    #: a repair file written but not yet known to be loaded: the next --apply loads it
    pending: ReconcileRepair | None = None
    #: loaded repair files, newest last (the last 50)
    repairs: list[ReconcileRepair] = Field(default_factory=list)


WatermarkRecord.model_rebuild()
