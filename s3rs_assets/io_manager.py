"""The IO manager between the two stages: watermark -> asset metadata + S3 mirror.

`s3_parquet` returns a `BackupOutput` (what each partition run did); the chunk-level
checkpoints are already in the watermark store by then, so `handle_output` closes the
MySQL side of the record (status, extraction time) and turns it into materialization
metadata, including the whole record as JSON so that the event log is one more place a
lost watermark can be recovered from. Each stage's `handle_output` is also where its run
ends for the watermark: it writes the daily and session backups (`write_backups`), which
checkpoints no longer do. `redshift_table` asks `load_input` for the files of its
partitions, read from the same record.
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from s3rs_assets.extract import PartitionRun
from s3rs_assets.names import WATERMARK_METADATA_KEY
from s3rs_assets.resources import S3Resource
from s3rs_assets.source import SafetyBound
from s3rs_assets.watermark import FileEntry, SourceCounts, WatermarkRecord, iso, utcnow
from s3rs_assets.watermark_store import (
    SaveInfo,
    UpdateResult,
    WatermarkStore,
    event_log_fallback,
)

# The stores of the runs this process works for, by (S3 location, run id): the steps of a
# run (the asset, its IO manager, the failure path) share one store and so one read of
# each record. A run process holds one; the bound only matters to long-lived processes.
_RUN_STORES: OrderedDict[tuple[Any, ...], WatermarkStore] = OrderedDict()
_RUN_STORES_LOCK = threading.Lock()
RUN_STORES_KEPT = 8


@dataclass
class BackupOutput:
    table: str
    runs: list[PartitionRun]
    bound: SafetyBound
    anomalies: SourceCounts
    seconds: float
    spark_seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)
    recovery: dict[str, Any] | None = None  # set when this run restored a lost watermark


@dataclass
class LoadOutput:
    table: str
    partitions: dict[str, dict[str, Any]]  # partition -> ledger files/rows and load stats
    seconds: float
    metadata: dict[str, Any] = field(default_factory=dict)


def store_for(
    s3: S3Resource, run_id: str | None = None, instance: dg.DagsterInstance | None = None
) -> WatermarkStore:
    """The watermark store, built only here (sensors, CLI, assets and tests all use it).

    With a `run_id` (which names the session backups) every call in this process returns
    the same store for that run, so the run reads each record once and then keeps it
    current from its own writes. Without one (CLI commands, sensor ticks) the store is new.
    With an instance, its event log is the last recovery source.
    """
    fallback = event_log_fallback(instance) if instance is not None else None
    if run_id is None:
        return WatermarkStore(s3.client(), s3.bucket, s3.layout, event_log_fallback=fallback)
    key = (s3.bucket, s3.layout, s3.client().meta.endpoint_url, run_id)
    with _RUN_STORES_LOCK:
        store = _RUN_STORES.get(key)
        if store is None:
            store = WatermarkStore(
                s3.client(), s3.bucket, s3.layout, session_id=run_id, event_log_fallback=fallback
            )
            _RUN_STORES[key] = store
            while len(_RUN_STORES) > RUN_STORES_KEPT:
                _RUN_STORES.popitem(last=False)
        else:
            _RUN_STORES.move_to_end(key)
            if store.event_log_fallback is None:
                store.event_log_fallback = fallback
    return store


def save_metadata(result: UpdateResult, backups: SaveInfo | None = None) -> dict[str, Any]:
    """Where a save (and its backups) landed, and the recovery its read needed: for the UI."""
    save = result.save.merged(backups) if backups is not None else result.save
    md: dict[str, Any] = {"watermark_save": dg.MetadataValue.json(save.as_metadata())}
    if result.recovery is not None:
        md["watermark_recovery"] = dg.MetadataValue.json(result.recovery.as_metadata())
    return md


def backup_metadata(out: BackupOutput, record: WatermarkRecord) -> dict[str, Any]:
    rows = sum(r.rows for r in out.runs)
    files = [f for r in out.runs for f in r.files]
    first = next((r.cursor_from for r in out.runs if r.cursor_from), None)
    last = next((r.cursor_to for r in reversed(out.runs) if r.cursor_to), None)
    statuses = {r.partition_key: r.status for r in out.runs}
    per_partition = {
        r.partition_key: {
            "status": r.status,
            "rows": r.rows,
            "files": len(r.files),
            "chunks": r.chunks,
            "cursor_from": str(r.cursor_from) if r.cursor_from else None,
            "cursor_to": str(r.cursor_to) if r.cursor_to else None,
            "recomputed": r.recomputed,
            "partition_rows_total": record.partitions[r.partition_key].rows
            if r.partition_key in record.partitions
            else 0,
        }
        for r in out.runs
    }
    complete = all(s == "complete" for s in statuses.values()) and not out.skipped
    return {
        "rows": dg.MetadataValue.int(rows),
        "files": dg.MetadataValue.int(len(files)),
        "bytes": dg.MetadataValue.int(sum(f.bytes for f in files)),
        "cursor_from": dg.MetadataValue.text(str(first) if first else "window start"),
        "cursor_to": dg.MetadataValue.text(str(last) if last else "-"),
        "seconds": dg.MetadataValue.float(round(out.seconds, 3)),
        "spark_startup_seconds": dg.MetadataValue.float(round(out.spark_seconds, 3)),
        "rows_per_second": dg.MetadataValue.float(
            round(rows / out.seconds, 1) if out.seconds > 0 else 0.0
        ),
        "status": dg.MetadataValue.text("complete" if complete else "partial"),
        "partitions": dg.MetadataValue.json(per_partition),
        "skipped_partitions": dg.MetadataValue.json(out.skipped),
        **{k: dg.MetadataValue.int(v) for k, v in out.anomalies.metadata().items()},
        "latest_future_cursor": dg.MetadataValue.text(iso(out.anomalies.latest_future) or "-"),
        "safety_bound": dg.MetadataValue.json(out.bound.metadata()),
        "written_files": dg.MetadataValue.json([f.key for f in files]),
        "table_rows_extracted": dg.MetadataValue.int(record.mysql_rows_extracted),
        "table_s3_file_count": dg.MetadataValue.int(record.s3_file_count),
        "last_mysql_data_timestamp": dg.MetadataValue.text(
            iso(record.last_mysql_data_timestamp) or "-"
        ),
        WATERMARK_METADATA_KEY: dg.MetadataValue.json(record.model_dump(mode="json")),
    }


class S3RSIOManager(dg.ConfigurableIOManager):
    """Persists each stage's side of the watermark and hands the load stage its files."""

    s3: S3Resource

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        store = store_for(self.s3, context.run_id, context.step_context.instance)
        if isinstance(obj, BackupOutput):

            def close(rec: WatermarkRecord) -> None:
                rec.mysql_status = "success"
                rec.last_mysql_extraction_time = utcnow()
                rec.last_error = None
                rec.source_counts = obj.anomalies

            result = store.update(obj.table, close)
            backups = store.write_backups(obj.table)  # the stage's end: backups catch up
            md = {**backup_metadata(obj, result.record), **save_metadata(result, backups)}
            if obj.recovery:
                md["watermark_recovery"] = dg.MetadataValue.json(obj.recovery)
            context.add_output_metadata(md)
        elif isinstance(obj, LoadOutput):
            from s3rs_assets.load_stage import close_load

            record = store.update(obj.table, lambda rec: close_load(rec, obj)).record
            store.write_backups(obj.table)  # the stage's end: backups catch up
            context.add_output_metadata(
                {
                    **obj.metadata,
                    WATERMARK_METADATA_KEY: dg.MetadataValue.json(record.model_dump(mode="json")),
                }
            )
        else:
            raise TypeError(f"s3rs IO manager cannot store {type(obj).__name__}")

    def load_input(self, context: dg.InputContext) -> dict[str, list[FileEntry]]:
        """Files of the upstream partitions, from the watermark's manifests."""
        table = ".".join(context.asset_key.path[:2])
        record = store_for(self.s3, instance=context.instance).read(table)
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        if record is None:
            return {k: [] for k in keys}
        return {k: list(record.partitions[k].files) if k in record.partitions else [] for k in keys}
