"""What each stage's run did, how it closes the watermark, and what the UI shows of it.

A stage's asset returns its result (`BackupOutput` / `LoadOutput`: files, rows, cursor
range, positions per partition) and `publish`es what the UI shows of it; the IO manager
persists it (`close` folded into the record compare-and-swap, then the daily and session
copies) and hands the processed files to `redshift_table`.

Metadata is per partition, through the public `AssetExecutionContext.add_asset_metadata`,
so the Dagster UI tells the truth for each one (a range run records one materialization
per partition):

* each materialization shows a few formatted facts first (rows, files, size, cursor range,
  status, seconds, rows not yet synced) and folds every raw figure into one `details` entry
  (`names.metadata_facts` reads them back);
* every partition of the run gets its own figures: "nothing to do" (`backup_quiet` /
  `load_quiet`), what happened there (`backup_partition_metadata` /
  `load_partition_metadata`), or "not reached" when a `--limit` ran out before it;
* the run's last partition also carries the run-level summary and the watermark snapshot
  (the record as the IO manager will store it): one copy per run, so event-log writes grow
  with the partitions, not with their square. `s3_parquet` carries the backup side of the
  record (`WATERMARK_BACKUP_METADATA_KEY`), `redshift_table` the whole record, current after
  the load (`WATERMARK_METADATA_KEY`); both are recovery sources.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from s3rs_assets.backup import PartitionRun
from s3rs_assets.names import (
    DETAILS_METADATA_KEY,
    INTERRUPTED_METADATA_KEY,
    RETRIES_METADATA_KEY,
    WATERMARK_BACKUP_METADATA_KEY,
    WATERMARK_LOCATION_METADATA_KEY,
    WATERMARK_METADATA_KEY,
)
from s3rs_assets.retry import Retries, is_transient
from s3rs_assets.source import SafetyBound
from s3rs_assets.watermark import (
    FileEntry,
    LoadState,
    SourceCounts,
    WatermarkRecord,
    iso,
    utcnow,
)
from s3rs_assets.watermark.reports import SaveInfo, UpdateResult
from s3rs_assets.watermark.store import WatermarkStore

Metadata = dict[str, Any]


@dataclass
class BackupOutput:
    """What `s3_parquet` did: one PartitionRun per partition of the run."""

    table: str
    runs: list[PartitionRun]
    bound: SafetyBound
    anomalies: SourceCounts
    seconds: float
    spark_seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)
    recovery: dict[str, Any] | None = None  # set when this run restored a lost watermark
    retries: Retries = field(default_factory=Retries)  # transient errors retried in the step
    step_retries: int = 0  # Dagster's retries of the step before this attempt
    spark_app: str = ""  # "<master> <application id>": which Spark the run used
    zero_dates: int = 0  # zero / zero-in-date values in non-key date columns, read as NULL

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.runs)

    def close(self, rec: WatermarkRecord) -> None:
        """The MySQL side of the record after a successful backup run."""
        rec.mysql_status = "success"
        rec.last_mysql_extraction_time = utcnow()
        rec.last_error = None
        rec.source_counts = self.anomalies


@dataclass
class PartitionLoad:
    """What the load did to one partition, and which of its manifest files the ledger holds
    afterwards (loaded now or before: the load skips exactly the versions it holds)."""

    ledger: dict[str, FileEntry]  # file key -> the manifest entry the ledger holds
    stats: dict[str, Any]  # LoadResult.metadata()


@dataclass
class LoadOutput:
    """What `redshift_table` did, per partition."""

    table: str
    target: str
    dialect: str
    partitions: dict[str, PartitionLoad]
    seconds: float
    retries: Retries = field(default_factory=Retries)
    step_retries: int = 0

    def close(self, rec: WatermarkRecord) -> None:
        """Mirror the ledger (the truth) into the record's redshift side."""
        for key, load in self.partitions.items():
            rec.loaded_partitions[key] = LoadState(
                files=sorted(load.ledger),
                rows=sum(f.rows for f in load.ledger.values()),
                md5={k: f.md5 for k, f in load.ledger.items()},
                loaded_at=utcnow(),
            )
        rec.redshift_status = "success"
        rec.last_redshift_load_time = utcnow()
        rec.last_error = None


#: what stops a step when its run is stopped: Ctrl-C or SIGTERM in `s3rs sync` (a
#: KeyboardInterrupt, or Dagster's own error while it holds the signal), Terminate in the UI
INTERRUPTS = (KeyboardInterrupt, dg.DagsterExecutionInterruptedError)
INTERRUPTED_MESSAGE = (
    "interrupted (Ctrl-C, SIGTERM or Terminate): the step stopped where it was; the next "
    "sync resumes from the last checkpoint"
)


@contextlib.contextmanager
def dagster_step() -> Iterator[None]:
    """Around an asset's body: a transient error (retry.is_transient) propagates, so
    `names.RETRY_POLICY` retries the step; any other error fails it at once (a Failure that
    disallows retries, caused by the original error, which the UI and `s3rs sync` show).

    An interrupt fails it at once too: Dagster hands an interrupt inside a step with a
    retry policy to that policy, so Ctrl-C retried the step and the sync ran on to the end
    and exited 0."""
    try:
        yield
    except Exception as e:
        if is_transient(e):
            raise
        raise dg.Failure(description=f"{type(e).__name__}: {e}", allow_retries=False) from e
    except INTERRUPTS as e:
        raise dg.Failure(
            description=INTERRUPTED_MESSAGE,
            allow_retries=False,
            metadata={INTERRUPTED_METADATA_KEY: True},
        ) from e


def record_failure(store: WatermarkStore, table: str, stage: str, error: BaseException) -> None:
    """Mark the stage (`mysql` or `redshift`) failed in the watermark and write the backups
    of the progress made; never let this hide the original error."""

    def mark(rec: WatermarkRecord) -> None:
        setattr(rec, f"{stage}_status", "failed")
        interrupted = isinstance(error, INTERRUPTS)
        what = INTERRUPTED_MESSAGE if interrupted else f"{type(error).__name__}: {error}"
        rec.last_error = what[:2000]

    with contextlib.suppress(Exception):  # the original error is what the operator needs
        store.update(table, mark)
    with contextlib.suppress(Exception):
        store.write_copies(table)


# ------------------------------------------------------------------------- metadata
# The UI lists a materialization's entries in the order given, the IO manager's first: a
# few formatted facts a person looks for (rows, files, size, cursor range, status,
# seconds, what waits), then `details` (every raw figure, for tests, the CLI and people
# who dig; `names.metadata_facts` reads both), then the watermark snapshot (a recovery
# source) on the run's last partition.


def count(n: int) -> str:
    return f"{n:,}"


def size(n: int) -> str:
    """Bytes for people: 2,779 -> "2.7 KiB"."""
    value, unit = float(n), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{n:,} bytes" if unit == "bytes" else f"{value:,.1f} {unit}"


def seconds(s: float) -> str:
    return f"{s:,.1f} s"


def _text(**entries: str) -> Metadata:
    return {k: dg.MetadataValue.text(v) for k, v in entries.items()}


def _details(figures: dict[str, Any]) -> Metadata:
    return {DETAILS_METADATA_KEY: dg.MetadataValue.json(figures)}


def save_metadata(result: UpdateResult, backups: SaveInfo | None = None) -> Metadata:
    """Where a save and its copies landed, in one line (the IO manager's output metadata:
    on every partition, listed first); the recovery its read needed, when it needed one."""
    save = result.save.merged(backups) if backups is not None else result.save
    line = f"{', '.join(sorted(save.written)) or 'nothing'} written"
    if save.cas_rounds > 1:
        line += f" ({save.cas_rounds} compare-and-swap rounds)"
    if save.failed:
        line += "; FAILED: " + "; ".join(f"{k}: {v}" for k, v in sorted(save.failed.items()))
    md: Metadata = {"watermark_saved": dg.MetadataValue.text(line)}
    if result.recovery is not None:
        md["watermark_recovery"] = dg.MetadataValue.json(result.recovery.as_metadata())
    return md


NOT_REACHED = "not reached: the row limit ran out first; the next sync reads it"


def not_reached() -> Metadata:
    """A partition of the run that a `--limit` stopped before (nothing known of it)."""
    return _text(status=NOT_REACHED)


def backup_quiet() -> Metadata:
    """A partition the run found complete and empty: nothing read, nothing written."""
    return {
        **_text(rows="0", files="0", size="0 bytes", status="complete"),
        **_details({"rows": 0, "files": 0, "bytes": 0}),
    }


def backup_partition_metadata(run: PartitionRun, record: WatermarkRecord) -> Metadata:
    state = record.partitions.get(run.partition_key)
    status = run.status
    if status != "complete":
        status = "partial: the next sync reads on from the cursor range's end"
    written = sum(f.bytes for f in run.files)
    start = str(run.cursor_from) if run.cursor_from else "the partition's start"
    end = str(run.cursor_to) if run.cursor_to else "-"
    return {
        **_text(
            rows=count(run.rows),
            files=count(len(run.files)),
            size=size(written),
            cursor_range=f"{start} .. {end}",
            status=status + (" (read again from its start)" if run.recomputed else ""),
            seconds=seconds(run.seconds),
        ),
        **_details({
            "rows": run.rows,
            "files": len(run.files),
            "bytes": written,
            "chunks": run.chunks,
            "cursor_from": str(run.cursor_from) if run.cursor_from else "-",
            "cursor_to": end,
            "seconds": round(run.seconds, 3),
            "recomputed": run.recomputed,
            "partition_rows_total": state.rows if state else 0,
        }),
    }


def backup_is_quiet(run: PartitionRun) -> bool:
    return run.rows == 0 and not run.files and run.status == "complete" and not run.recomputed


#: What a run adds to its last partition: entries shown, raw figures (into `details`),
#: entries kept last (the watermark snapshot).
RunMetadata = tuple[Metadata, dict[str, Any], Metadata]


def backup_run_metadata(out: BackupOutput, record: WatermarkRecord) -> RunMetadata:
    """The run's summary and what waits (shown), its raw figures (for `details`) and the
    backup side of the record (last partition only)."""
    rows = out.rows
    read = max(0.0, out.seconds - out.spark_seconds)
    rate = round(rows / read, 1) if read > 0 else 0.0
    partial = [r.partition_key for r in out.runs if r.status != "complete"]
    files = sum(len(r.files) for r in out.runs)
    retries = out.retries.total + out.step_retries
    line = (
        f"{count(rows)} rows, {count(files)} files in {len(out.runs)} partition(s): "
        f"{seconds(out.seconds)} ({seconds(read)} reading at {count(round(rate))} rows/s, "
        f"Spark start-up {seconds(out.spark_seconds)})"
    )
    if retries:
        line += f"; {retries} retries"
    shown = _text(run=line)
    found = out.anomalies
    waiting = []  # rows a later sync reads, said as `matches_mysql` says them
    if found.above_bound:
        waiting.append(f"{count(found.above_bound)} at or above the safety bound "
                       f"{iso(out.bound.upper)}: read once the bound passes them")
    if found.future:
        waiting.append(f"{count(found.future)} dated after MySQL's clock "
                       f"(latest {iso(found.latest_future)})")
    if waiting:
        shown["rows_not_yet_synced"] = dg.MetadataValue.text("; ".join(waiting))
    never = [w for w in found.warnings(out.table) if "never copied" in w]
    if never:
        shown["rows_never_synced"] = dg.MetadataValue.text("; ".join(never))
    if out.skipped:
        shown["not_reached"] = dg.MetadataValue.text(", ".join(out.skipped))
    figures = {
        "run_partitions": len(out.runs),
        "run_rows": rows,
        "run_files": files,
        "run_seconds": round(out.seconds, 3),
        # the rate of the reading: the step's time less Spark's start-up (shown apart), so
        # a small run does not read as slow because a JVM started
        "run_read_seconds": round(read, 3),
        "run_rows_per_second": rate,
        "spark_startup_seconds": round(out.spark_seconds, 3),
        **retry_figures(out.retries, out.step_retries),
        # a Spark Connect server shows the same application id in every run attached to it
        "spark_application": out.spark_app or "-",
        "run_partial_partitions": partial,
        "skipped_partitions": out.skipped,
        "zero_dates_as_null": out.zero_dates,
        **out.anomalies.metadata(),
        "latest_future_cursor": iso(out.anomalies.latest_future) or "-",
        "safety_bound": out.bound.metadata(),
        "table_rows_extracted": record.mysql_rows_extracted,
        "table_s3_file_count": record.s3_file_count,
        "last_mysql_data_timestamp": iso(record.last_mysql_data_timestamp) or "-",
    }
    if out.recovery:
        shown["watermark_recovery"] = dg.MetadataValue.json(out.recovery)
    kept = {WATERMARK_BACKUP_METADATA_KEY: dg.MetadataValue.json(backup_side(record))}
    return shown, figures, kept


def retry_figures(retries: Retries, step_retries: int) -> dict[str, Any]:
    """`retries`: every retry the run needed (in the step, and Dagster's of the step)."""
    return {
        RETRIES_METADATA_KEY: retries.total + step_retries,
        "retry_details": {**retries.metadata(), "dagster_step_retries": step_retries},
    }


def backup_side(record: WatermarkRecord) -> dict[str, Any]:
    """The record without its load mirror: what `s3_parquet` knows to be current."""
    return record.model_dump(
        mode="json",
        exclude={
            "last_redshift_load_time",
            "redshift_rows_loaded",
            "redshift_status",
            "processed_s3_files",
            "loaded_partitions",
        },
    )


def load_quiet() -> Metadata:
    return {
        **_text(rows="0", files="0", loaded="nothing to load"),
        **_details({"files_loaded": 0, "rows_inserted": 0, "rows_staged": 0}),
    }


def load_partition_metadata(load: PartitionLoad) -> Metadata:
    st = load.stats
    figures: dict[str, Any] = {k: v for k, v in st.items() if isinstance(v, int | float | str)}
    figures["ledger_files"] = len(load.ledger)
    figures["ledger_rows"] = sum(f.rows for f in load.ledger.values())
    loaded = (
        f"{count(st.get('files_loaded', 0))} file(s), {count(st.get('rows_staged', 0))} rows "
        f"staged, {count(st.get('rows_inserted', 0))} inserted"
    )
    if st.get("files_skipped"):
        loaded += f"; {count(st['files_skipped'])} file(s) already in the ledger"
    shown = _text(
        rows=count(figures["ledger_rows"]),
        files=count(figures["ledger_files"]),
        loaded=loaded,
        size=size(int(st.get("bytes_loaded", 0))),
        seconds=seconds(float(st.get("seconds", 0.0))),
    )
    if st.get("reloaded_reason"):
        shown["reloaded"] = dg.MetadataValue.text(str(st["reloaded_reason"]))
    return {**shown, **_details(figures)}


def load_is_quiet(load: PartitionLoad) -> bool:
    return not load.ledger and not load.stats.get("files_loaded")


def load_run_metadata(out: LoadOutput, record: WatermarkRecord) -> RunMetadata:
    stats = [p.stats for p in out.partitions.values()]
    staged = sum(s.get("rows_staged", 0) for s in stats)
    inserted = sum(s.get("rows_inserted", 0) for s in stats)
    files = sum(s.get("files_loaded", 0) for s in stats)
    rate = round(staged / out.seconds, 1) if out.seconds else 0.0
    retries = out.retries.total + out.step_retries
    line = (
        f"{count(staged)} rows staged, {count(inserted)} inserted from {count(files)} file(s) "
        f"in {len(out.partitions)} partition(s) into {out.target}: {seconds(out.seconds)} "
        f"({count(round(rate))} rows/s)"
    )
    if retries:
        line += f"; {retries} retries"
    figures = {
        "run_partitions": len(out.partitions),
        "run_files_loaded": files,
        "run_rows_staged": staged,
        "run_rows_inserted": inserted,
        "run_seconds": round(out.seconds, 3),
        "run_rows_per_second": rate,
        "target": out.target,
        "dialect": out.dialect,
        **retry_figures(out.retries, out.step_retries),
        "table_rows_loaded": record.redshift_rows_loaded,
    }
    kept = {WATERMARK_METADATA_KEY: dg.MetadataValue.json(record.model_dump(mode="json"))}
    return _text(run=line), figures, kept


# --------------------------------------------------------------------------- publishing


def preview(store: WatermarkStore, out: BackupOutput | LoadOutput) -> WatermarkRecord:
    """The record as the IO manager will store it (the run's checkpoints plus `close`):
    what the snapshot on the run's last partition shows."""
    current = store.read(out.table)
    rec = (
        current.model_copy(deep=True) if current is not None else WatermarkRecord.new(out.table)
    )
    out.close(rec)
    return rec.refresh()


def publish(
    context: dg.AssetExecutionContext, out: BackupOutput | LoadOutput, store: WatermarkStore
) -> None:
    """Each partition of the run gets its own metadata; the last one the run's too, with
    the record as the IO manager will store it (`preview`) and where it lives."""
    record = preview(store, out)
    keys = list(context.partition_keys)
    if isinstance(out, BackupOutput):
        done = {r.partition_key: r for r in out.runs}
        per = {
            k: not_reached()
            if k in out.skipped or k not in done
            else backup_quiet()
            if backup_is_quiet(done[k])
            else backup_partition_metadata(done[k], record)
            for k in keys
        }
        run_md = backup_run_metadata(out, record)
    else:
        per = {
            k: load_partition_metadata(out.partitions[k])
            if k in out.partitions and not load_is_quiet(out.partitions[k])
            else load_quiet()
            for k in keys
        }
        run_md = load_run_metadata(out, record)
    shown, figures, kept = run_md
    kept = {WATERMARK_LOCATION_METADATA_KEY: store.location, **kept}  # the snapshot last
    for k in keys[:-1]:
        context.add_asset_metadata(per[k], partition_key=k)
    context.add_asset_metadata(
        with_run(per[keys[-1]], shown, figures, kept), partition_key=keys[-1]
    )


def with_run(part: Metadata, shown: Metadata, figures: dict[str, Any], kept: Metadata) -> Metadata:
    """The last partition's entries: its own, the run's, one `details` for both, then the
    snapshot."""
    part = dict(part)
    details = part.pop(DETAILS_METADATA_KEY, None)
    merged = {**(details.value if details is not None else {}), **figures}
    return {**part, **shown, **_details(merged), **kept}
