"""Manual watermark edits (`s3rs watermark set` / `reset`): the change, its description,
and the compare-and-swap guard that applies it only to the record the operator saw.

Kept beside the record rather than in the CLI so any caller (the CLI, a script, a test)
edits a watermark the same way. `set` across a long quiet history folds the windows before
the timestamp into closed ranges: a 20-year daily table gets a handful of ranges, not
7,300 entries.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from s3rs_assets.config import TableConfig
from s3rs_assets.errors import WatermarkConflict
from s3rs_assets.partitions import time_windows, window, windows
from s3rs_assets.watermark import PartitionState, Position, WatermarkRecord, iso, utcnow

#: `backup_strategy` of a record a person set or reset by hand.
MANUAL_STRATEGY = "manual_cli"


def first_incomplete(table: TableConfig, record: WatermarkRecord | None) -> str:
    """The first partition the next backup reads in (the last one when all are complete):
    where `s3rs sync` starts, and what `watermark get` and `set` show."""
    all_windows = windows(time_windows(table))
    if record is None:
        return all_windows[0][0]
    for key, start, end in all_windows:
        if not record.is_complete(key, start, end):
            return key
    return all_windows[-1][0]


def fmt(ts: datetime | None) -> str:
    """A timestamp as operators read it (`2025-08-14 09:12:03.000000`), '-' for none."""
    return (iso(ts) or "").replace("T", " ") if ts else "-"


def next_start(table: TableConfig, rec: WatermarkRecord | None) -> tuple[str, datetime, str]:
    """(partition, timestamp, text) of where the next backup starts reading."""
    key = first_incomplete(table, rec)
    start, end = window(time_windows(table), key)
    state = rec.partitions.get(key) if rec else None
    if rec is not None and rec.is_complete(key, start, end):
        return key, start, f"partition {key}: every partition is complete up to now"
    if state is not None and state.cursor is not None:
        return key, state.cursor.c, f"partition {key} at {state.cursor}"
    return key, start, f"partition {key} at ({fmt(start)}, start)"


def closed_summary(table: TableConfig, rec: WatermarkRecord) -> list[str]:
    """One line per closed range: `2006-02-01 .. 2025-12-31: 7,273 empty partitions closed`
    (first and last partition key, and how many partitions it covers)."""
    all_w = windows(time_windows(table))
    starts = [s for _, s, _ in all_w]
    out = []
    for r in rec.closed:
        lo = bisect.bisect_left(starts, r.start)
        hi = bisect.bisect_left(starts, r.end)  # windows starting before the range's end
        inside = all_w[lo:hi]
        if inside and inside[-1][2] > r.end:
            inside = inside[:-1]  # partly covered: not closed
        if inside:
            first, last = inside[0][0], inside[-1][0]
            out.append(f"{first} .. {last}: {len(inside):,} empty partitions closed")
        else:
            out.append(f"{fmt(r.start)} .. {fmt(r.end)}: closed (outside the partitions)")
    return out


# ------------------------------------------------------------------------------ changes


def apply_set(rec: WatermarkRecord, table: TableConfig, ts: datetime) -> None:
    """Make `ts` the point the next sync starts from.

    Partitions wholly before `ts` are complete: those holding files keep them as history,
    the others are folded into closed ranges (one range per stretch, not one entry per
    partition). The partition holding `ts` resumes at (ts, start) and keeps every file
    holding a row before `ts` — a file that straddles `ts` included: its rows before `ts`
    exist nowhere else, so it stays in the manifest and is loaded if it was not yet; its
    rows from `ts` on are read again into new files, and the merge keeps one row per key.
    Files wholly at or after `ts`, later partitions and closed ranges are dropped, so the
    next sync reads them again. No row below `ts` that was extracted is ever lost.
    """
    now = utcnow()
    all_w = windows(time_windows(table))
    stretch: list[tuple[str, datetime, datetime]] = []  # windows without files, before ts

    def flush() -> None:
        if stretch:
            rec.close_empty(stretch[0][0], stretch[0][1], stretch[-1][2])
            stretch.clear()

    for key, start, end in all_w:
        if end > ts:
            break
        state = rec.partitions.pop(key, None)
        if state is None or not state.files:
            stretch.append((key, start, end))
            continue
        flush()
        state.status = "complete"
        state.updated_at = now
        rec.partitions[key] = state
    flush()
    later = [w for w in all_w if w[2] > ts]
    if later:
        rec.reopen(later[0][1], later[-1][2])
        key, start, end = later[0]
        state = rec.partitions.get(key) or PartitionState(window_start=start, window_end=end)
        # Files holding a row before ts stay (loaded if not yet); the rest is read again.
        state.files = [f for f in state.files if f.cursor_min is not None and f.cursor_min < ts]
        state.cursor = Position(c=ts, pk=None)
        state.status = "partial"
        state.run_id = None
        state.updated_at = now
        rec.partitions[key] = state
        for k, _, _ in later[1:]:
            rec.partitions.pop(k, None)
    keys = {k for k, _, _ in all_w}
    for key in [k for k, p in rec.partitions.items() if k not in keys and p.window_start >= ts]:
        del rec.partitions[key]
    rec.backup_strategy = MANUAL_STRATEGY
    rec.manual_timestamp = ts
    rec.mysql_status = "pending"
    rec.last_error = None


def apply_reset(rec: WatermarkRecord, mysql: bool, redshift: bool) -> None:
    """Back to "nothing extracted" (`mysql`) and/or an empty load mirror (`redshift`)."""
    if mysql:
        rec.partitions = {}
        rec.closed = []
        rec.mysql_status = "pending"
        rec.last_mysql_extraction_time = None
        rec.manual_timestamp = None
        rec.backup_strategy = MANUAL_STRATEGY
    if redshift:
        rec.loaded_partitions = {}
        rec.redshift_status = "pending"
        rec.last_redshift_load_time = None
    rec.last_error = None


# -------------------------------------------------------------------------- description

_DIFF_FIELDS = (
    "mysql_status",
    "mysql_rows_extracted",
    "s3_file_count",
    "last_mysql_data_timestamp",
    "last_mysql_extraction_time",
    "redshift_status",
    "redshift_rows_loaded",
    "last_redshift_load_time",
    "backup_strategy",
    "manual_timestamp",
)


def forget_lost(store: Any, table: str, lost: dict[str, list[str]]) -> WatermarkRecord:
    """Drop the partitions that lost unloaded files from the record (compare-and-swap):
    the next backup reads their windows from the start again. The sync's planner calls it
    for files it finds gone, `s3clean --force` for the unloaded files it deletes."""

    def change(rec: WatermarkRecord) -> None:
        for key in lost:
            state = rec.partitions.pop(key, None)
            rec.loaded_partitions.pop(key, None)
            if state is not None:
                rec.reopen(state.window_start, state.window_end)

    return store.update(table, change).record


def _show(value: Any) -> str:
    if isinstance(value, datetime):
        return fmt(value)
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)


def _pstate(p: PartitionState | None) -> str:
    if p is None:
        return "absent (read again)"
    return f"{p.status}, {p.rows:,} rows in {len(p.files)} files, cursor {p.cursor or '-'}"


def _elide(lines: list[str], limit: int) -> list[str]:
    if len(lines) <= limit:
        return lines
    half = limit // 2
    return lines[:half] + [f"    ... {len(lines) - limit} more ..."] + lines[-half:]


def describe_change(
    table: TableConfig, before: WatermarkRecord | None, after: WatermarkRecord, limit: int = 12
) -> list[str]:
    """Human lines `field: before -> after`, partitions and closed ranges included; empty
    when nothing moves."""
    old = before or WatermarkRecord.new(after.table_name)
    lines = []
    for f in _DIFF_FIELDS:
        a, b = getattr(old, f), getattr(after, f)
        if a != b:
            lines.append(f"  {f}: {_show(a)} -> {_show(b)}")
    if len(old.processed_s3_files) != len(after.processed_s3_files):
        lines.append(
            f"  load mirror: {len(old.processed_s3_files):,} files -> "
            f"{len(after.processed_s3_files):,} files"
        )
    changed = []
    for key in sorted(set(old.partitions) | set(after.partitions)):
        a, b = old.partitions.get(key), after.partitions.get(key)
        if _pstate(a) != _pstate(b):
            changed.append(f"    {key}: {_pstate(a)} -> {_pstate(b)}")
    if changed:
        lines.append(f"  partitions ({len(changed)} change):")
        lines += _elide(changed, limit)
    if old.closed != after.closed:
        was, now = closed_summary(table, old), closed_summary(table, after)
        lines.append(f"  closed empty ranges: {len(was)} -> {len(now)}:")
        lines += _elide([f"    {line}" for line in now] or ["    (none)"], limit)
    if lines:
        lines.append(
            f"  next sync starts from: {next_start(table, before)[2]} -> "
            f"{next_start(table, after)[2]}"
        )
    return lines


# ------------------------------------------------------------------------------- guard


@dataclass
class ManualChange:
    """A manual change computed on the record as it was read: what the operator sees."""

    table: TableConfig
    change: Callable[[WatermarkRecord], None]
    before: WatermarkRecord | None
    after: WatermarkRecord
    diff: list[str]


def preview(
    store: Any,
    table: TableConfig,
    change: Callable[[WatermarkRecord], None],
    *,
    now: datetime | None = None,
    create: bool = True,
) -> ManualChange | None:
    """Apply `change` to a copy of the current record; None when there is no record and
    `create` is false (nothing to change). Writes nothing."""
    before, _etag = store.read_versioned(table.name, now=now)
    if before is None and not create:
        return None
    after = before.model_copy(deep=True) if before else WatermarkRecord.new(table.name)
    change(after)
    after.refresh()
    return ManualChange(table, change, before, after, describe_change(table, before, after))


def commit(store: Any, mc: ManualChange, *, now: datetime | None = None) -> WatermarkRecord:
    """Write `mc` compare-and-swap, only onto the record that was shown: a run (or another
    operator) writing it since raises WatermarkConflict and nothing is written. A manual
    change is a run of its own: its backups are written at once."""
    before, name = mc.before, mc.table.name

    def guarded(rec: WatermarkRecord) -> None:
        moved = (
            bool(rec.partitions or rec.loaded_partitions or rec.backup_metadata)
            if before is None
            else rec.updated_at != before.updated_at
        )
        if moved:
            raise WatermarkConflict(
                f"the watermark of {name} changed since it was shown (a run is writing "
                "it?); nothing was written: look again and retry"
            )
        mc.change(rec)

    saved = store.update(name, guarded, now=now).record
    store.write_copies(name)
    return saved
