"""The IO manager between the two stages: the storage of each stage's result.

Each stage's asset returns what its run did (`stage_results.BackupOutput` / `LoadOutput`;
the backup's chunk checkpoints are already in the watermark store by then, since a crash
may lose at most the chunk in flight) and publishes its per-partition metadata.
`handle_output` is where a stage's run ends for the watermark: it closes that stage's side
of the record compare-and-swap and writes the daily and session copies (`write_copies`,
which checkpoints do not). `redshift_table` asks `load_input` for the files of its
partitions: the manifests of the record, loaded exactly once through the warehouse's
ledger. `store_for` is the one way a watermark store is built.
"""

import threading
from collections import OrderedDict
from typing import Any

import dagster as dg

from s3rs_assets.names import TABLE_METADATA_KEY
from s3rs_assets.resources import S3Resource
from s3rs_assets.stage_results import BackupOutput, LoadOutput, save_metadata
from s3rs_assets.watermark import FileEntry
from s3rs_assets.watermark.store import WatermarkStore
from s3rs_assets.watermark_eventlog import event_log_fallback

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
    location = s3.layout.location(s3.bucket)
    fallback = event_log_fallback(instance, location) if instance is not None else None
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


class S3RSIOManager(dg.ConfigurableIOManager):
    """Persists each stage's side of the watermark and hands the load stage its files."""

    s3: S3Resource

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        """Persist a stage's result: close its side of the record compare-and-swap, then
        the daily and session copies (checkpoints write the primary only). The asset has
        already published the per-partition metadata; this adds where the record went."""
        if not isinstance(obj, BackupOutput | LoadOutput):
            raise TypeError(f"s3rs IO manager cannot store {type(obj).__name__}")
        # the run's own store (the asset built it with the instance's event log)
        store = store_for(self.s3, context.run_id)
        result = store.update(obj.table, obj.close)
        copies = store.write_copies(obj.table)  # the stage's end: the copies catch up
        context.add_output_metadata(save_metadata(result, copies))

    def load_input(self, context: dg.InputContext) -> dict[str, list[FileEntry]]:
        """Files of the upstream partitions, from the watermark's manifests."""
        upstream = context.upstream_output
        table = upstream.definition_metadata[TABLE_METADATA_KEY] if upstream else None
        if not table:
            raise TypeError(f"{context.asset_key} is not an s3rs asset (no {TABLE_METADATA_KEY})")
        # The run's own store: after this run's backup step it holds the record that step
        # wrote (the load step reads the same store), so no GET; in a run without a backup
        # step (load alone, a re-execution) it reads the primary from S3 as before.
        try:
            run_id: str | None = context.step_context.run_id
        except dg.DagsterInvariantViolationError:  # an InputContext built outside a run
            run_id = None
        record = store_for(self.s3, run_id, context.instance).read(table)
        keys = context.asset_partition_keys if context.has_asset_partitions else []
        if record is None:
            return {k: [] for k in keys}
        return {k: list(record.partitions[k].files) if k in record.partitions else [] for k in keys}
