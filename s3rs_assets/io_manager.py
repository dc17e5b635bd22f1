"""The IO manager between the two stages: watermark -> asset metadata + S3 mirror.

Each stage's asset returns what its run did (`stage_results.BackupOutput` / `LoadOutput`;
the backup's chunk checkpoints are already in the watermark store by then).
`handle_output` is where a stage's run ends for the watermark: it closes that stage's side
of the record compare-and-swap, writes the daily and session backups (`write_backups`,
which checkpoints do not), and turns the result into per-partition materialization
metadata, with the record snapshot on the run's last partition (`stage_results`), so the
event log is one more place a lost watermark can be recovered from. `redshift_table` asks
`load_input` for the files of its partitions, read from the same record. `store_for` is
the one way a watermark store is built.
"""

import threading
from collections import OrderedDict
from typing import Any

import dagster as dg

from s3rs_assets.names import TABLE_METADATA_KEY
from s3rs_assets.resources import S3Resource
from s3rs_assets.stage_results import (
    BackupOutput,
    LoadOutput,
    backup_is_quiet,
    backup_partition_metadata,
    backup_quiet,
    backup_run_metadata,
    load_is_quiet,
    load_partition_metadata,
    load_quiet,
    load_run_metadata,
    save_metadata,
)
from s3rs_assets.watermark import FileEntry
from s3rs_assets.watermark_eventlog import event_log_fallback
from s3rs_assets.watermark_store import WatermarkStore

# The stores of the runs this process works for, by (S3 location, run id): the steps of a
# run (the asset, its IO manager, the failure path) share one store and so one read of
# each record. A run process holds one; the bound only matters to long-lived processes.
_RUN_STORES: OrderedDict[tuple[Any, ...], WatermarkStore] = OrderedDict()
_RUN_STORES_LOCK = threading.Lock()
RUN_STORES_KEPT = 8


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


def _partition_metadata(context: dg.OutputContext, key: str, md: dict[str, Any]) -> None:
    """Metadata for one partition's materialization event. OutputContext offers only
    output-wide metadata publicly; the step context's partition-scoped call is what
    `AssetExecutionContext.add_asset_metadata(partition_key=...)` does for asset bodies."""
    context.step_context.add_asset_metadata(md, asset_key=context.asset_key, partition_key=key)


class S3RSIOManager(dg.ConfigurableIOManager):
    """Persists each stage's side of the watermark and hands the load stage its files."""

    s3: S3Resource

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if isinstance(obj, BackupOutput):
            quiet, per_partition = backup_quiet(), {
                r.partition_key: r for r in obj.runs if not backup_is_quiet(r)
            }
        elif isinstance(obj, LoadOutput):
            quiet, per_partition = load_quiet(), {
                k: p for k, p in obj.partitions.items() if not load_is_quiet(p)
            }
        else:
            raise TypeError(f"s3rs IO manager cannot store {type(obj).__name__}")
        store = store_for(self.s3, context.run_id, context.step_context.instance)
        result = store.update(obj.table, obj.close)
        backups = store.write_backups(obj.table)  # the stage's end: backups catch up
        record = result.record
        if isinstance(obj, BackupOutput):
            shown = {k: backup_partition_metadata(r, record) for k, r in per_partition.items()}
            run_md = backup_run_metadata(obj, record)
        else:
            shown = {k: load_partition_metadata(p) for k, p in per_partition.items()}
            run_md = load_run_metadata(obj, record)
        run_md.update(save_metadata(result, backups))
        keys = list(context.asset_partition_keys) if context.has_asset_partitions else []
        if not keys:
            context.add_output_metadata({**quiet, **run_md})
            return
        context.add_output_metadata(quiet)  # every partition: "nothing happened here"
        in_run = set(keys)
        for key, md in shown.items():
            if key != keys[-1] and key in in_run:
                _partition_metadata(context, key, md)
        _partition_metadata(context, keys[-1], {**shown.get(keys[-1], {}), **run_md})

    def load_input(self, context: dg.InputContext) -> dict[str, list[FileEntry]]:
        """Files of the upstream partitions, from the watermark's manifests."""
        upstream = context.upstream_output
        table = upstream.definition_metadata[TABLE_METADATA_KEY] if upstream else None
        if not table:
            raise TypeError(f"{context.asset_key} is not an s3rs asset (no {TABLE_METADATA_KEY})")
        record = store_for(self.s3, instance=context.instance).read(table)
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        if record is None:
            return {k: [] for k in keys}
        return {k: list(record.partitions[k].files) if k in record.partitions else [] for k in keys}
