"""What each stage's run did, how it closes the watermark, and what the UI shows of it.

A stage's asset returns its result (`BackupOutput` / `LoadOutput`: files, rows, cursor
range, positions per partition) and `publish`es what the UI shows of it; the IO manager
persists it (`close` folded into the record compare-and-swap, then the daily and session
copies) and hands the processed files to `redshift_table`.

Metadata is per partition, through the public `AssetExecutionContext.add_asset_metadata`,
so the Dagster UI tells the truth for each one (a range run records one materialization
per partition):

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
    RETRIES_METADATA_KEY,
    WATERMARK_BACKUP_METADATA_KEY,
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


@contextlib.contextmanager
def dagster_step() -> Iterator[None]:
    """Around an asset's body: a transient error (retry.is_transient) propagates, so
    `names.RETRY_POLICY` retries the step; any other error fails it at once (a Failure that
    disallows retries, caused by the original error, which the UI and `s3rs sync` show)."""
    try:
        yield
    except Exception as e:
        if is_transient(e):
            raise
        raise dg.Failure(description=f"{type(e).__name__}: {e}", allow_retries=False) from e


def record_failure(store: WatermarkStore, table: str, stage: str, error: Exception) -> None:
    """Mark the stage (`mysql` or `redshift`) failed in the watermark and write the backups
    of the progress made; never let this hide the original error."""

    def mark(rec: WatermarkRecord) -> None:
        setattr(rec, f"{stage}_status", "failed")
        rec.last_error = f"{type(error).__name__}: {error}"[:2000]

    with contextlib.suppress(Exception):  # the original error is what the operator needs
        store.update(table, mark)
    with contextlib.suppress(Exception):
        store.write_copies(table)


# ------------------------------------------------------------------------- metadata


def save_metadata(result: UpdateResult, backups: SaveInfo | None = None) -> Metadata:
    """Where a save (and its copies) landed, and the recovery its read needed: small, as
    the IO manager's output metadata goes on every partition of the run."""
    save = result.save.merged(backups) if backups is not None else result.save
    md: Metadata = {"watermark_save": dg.MetadataValue.json(save.as_metadata())}
    if result.recovery is not None:
        md["watermark_recovery"] = dg.MetadataValue.json(result.recovery.as_metadata())
    return md


NOT_REACHED = "not reached: the row limit ran out first; the next sync reads it"


def not_reached() -> Metadata:
    """A partition of the run that a `--limit` stopped before (nothing known of it)."""
    return {"status": dg.MetadataValue.text(NOT_REACHED)}


def backup_quiet() -> Metadata:
    """A partition the run found complete and empty: nothing read, nothing written."""
    return {
        "rows": dg.MetadataValue.int(0),
        "files": dg.MetadataValue.int(0),
        "bytes": dg.MetadataValue.int(0),
        "status": dg.MetadataValue.text("complete"),
    }


def backup_partition_metadata(run: PartitionRun, record: WatermarkRecord) -> Metadata:
    state = record.partitions.get(run.partition_key)
    status = run.status
    if status != "complete":
        status = "partial: the next sync reads on from cursor_to"
    return {
        "rows": dg.MetadataValue.int(run.rows),
        "files": dg.MetadataValue.int(len(run.files)),
        "bytes": dg.MetadataValue.int(sum(f.bytes for f in run.files)),
        "chunks": dg.MetadataValue.int(run.chunks),
        "cursor_from": dg.MetadataValue.text(str(run.cursor_from) if run.cursor_from else "-"),
        "cursor_to": dg.MetadataValue.text(str(run.cursor_to) if run.cursor_to else "-"),
        "status": dg.MetadataValue.text(status),
        "seconds": dg.MetadataValue.float(round(run.seconds, 3)),
        "recomputed": dg.MetadataValue.bool(run.recomputed),
        "partition_rows_total": dg.MetadataValue.int(state.rows if state else 0),
    }


def backup_is_quiet(run: PartitionRun) -> bool:
    return run.rows == 0 and not run.files and run.status == "complete" and not run.recomputed


def backup_run_metadata(out: BackupOutput, record: WatermarkRecord) -> Metadata:
    """The run-level summary and the backup side of the record (last partition only)."""
    rows = out.rows
    read = max(0.0, out.seconds - out.spark_seconds)
    partial = [r.partition_key for r in out.runs if r.status != "complete"]
    return {
        "run_partitions": dg.MetadataValue.int(len(out.runs)),
        "run_rows": dg.MetadataValue.int(rows),
        "run_files": dg.MetadataValue.int(sum(len(r.files) for r in out.runs)),
        "run_seconds": dg.MetadataValue.float(round(out.seconds, 3)),
        # the rate of the reading: the step's time less Spark's start-up (shown apart), so
        # a small run does not read as slow because a JVM started
        "run_read_seconds": dg.MetadataValue.float(round(read, 3)),
        "run_rows_per_second": dg.MetadataValue.float(round(rows / read, 1) if read > 0 else 0.0),
        "spark_startup_seconds": dg.MetadataValue.float(round(out.spark_seconds, 3)),
        **retry_metadata(out.retries, out.step_retries),
        # a Spark Connect server shows the same application id in every run attached to it
        "spark_application": dg.MetadataValue.text(out.spark_app or "-"),
        "run_partial_partitions": dg.MetadataValue.json(partial),
        "skipped_partitions": dg.MetadataValue.json(out.skipped),
        "zero_dates_as_null": dg.MetadataValue.int(out.zero_dates),
        **{k: dg.MetadataValue.int(v) for k, v in out.anomalies.metadata().items()},
        "latest_future_cursor": dg.MetadataValue.text(iso(out.anomalies.latest_future) or "-"),
        "safety_bound": dg.MetadataValue.json(out.bound.metadata()),
        "table_rows_extracted": dg.MetadataValue.int(record.mysql_rows_extracted),
        "table_s3_file_count": dg.MetadataValue.int(record.s3_file_count),
        "last_mysql_data_timestamp": dg.MetadataValue.text(
            iso(record.last_mysql_data_timestamp) or "-"
        ),
        WATERMARK_BACKUP_METADATA_KEY: dg.MetadataValue.json(backup_side(record)),
        **(
            {"watermark_recovery": dg.MetadataValue.json(out.recovery)} if out.recovery else {}
        ),
    }


def retry_metadata(retries: Retries, step_retries: int) -> Metadata:
    """`retries`: every retry the run needed (in the step, and Dagster's of the step)."""
    return {
        RETRIES_METADATA_KEY: dg.MetadataValue.int(retries.total + step_retries),
        "retry_details": dg.MetadataValue.json(
            {**retries.metadata(), "dagster_step_retries": step_retries}
        ),
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
        "files_loaded": dg.MetadataValue.int(0),
        "rows_inserted": dg.MetadataValue.int(0),
        "rows_staged": dg.MetadataValue.int(0),
    }


def load_partition_metadata(load: PartitionLoad) -> Metadata:
    md: Metadata = {k: v for k, v in load.stats.items() if isinstance(v, int | float | str)}
    md["ledger_files"] = len(load.ledger)
    md["ledger_rows"] = sum(f.rows for f in load.ledger.values())
    return md


def load_is_quiet(load: PartitionLoad) -> bool:
    return not load.ledger and not load.stats.get("files_loaded")


def load_run_metadata(out: LoadOutput, record: WatermarkRecord) -> Metadata:
    stats = [p.stats for p in out.partitions.values()]
    staged = sum(s.get("rows_staged", 0) for s in stats)
    return {
        "run_partitions": dg.MetadataValue.int(len(out.partitions)),
        "run_files_loaded": dg.MetadataValue.int(sum(s.get("files_loaded", 0) for s in stats)),
        "run_rows_staged": dg.MetadataValue.int(staged),
        "run_rows_inserted": dg.MetadataValue.int(sum(s.get("rows_inserted", 0) for s in stats)),
        "run_seconds": dg.MetadataValue.float(round(out.seconds, 3)),
        "run_rows_per_second": dg.MetadataValue.float(
            round(staged / out.seconds, 1) if out.seconds else 0.0
        ),
        "target": dg.MetadataValue.text(out.target),
        "dialect": dg.MetadataValue.text(out.dialect),
        **retry_metadata(out.retries, out.step_retries),
        "table_rows_loaded": dg.MetadataValue.int(record.redshift_rows_loaded),
        WATERMARK_METADATA_KEY: dg.MetadataValue.json(record.model_dump(mode="json")),
    }


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
    context: dg.AssetExecutionContext, out: BackupOutput | LoadOutput, record: WatermarkRecord
) -> None:
    """Each partition of the run gets its own metadata; the last one the run's too."""
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
    for k in keys[:-1]:
        context.add_asset_metadata(per[k], partition_key=k)
    context.add_asset_metadata({**per[keys[-1]], **run_md}, partition_key=keys[-1])
