"""Stage 2 as an asset: `redshift_table`, loading what `s3_parquet` wrote, exactly once.

The asset gets its partitions' file manifests from the IO manager, hands them to
`load.load_partitions` (which skips files already in the warehouse's load ledger and merges
the rest; several partitions in one transaction, `load_batches`) and returns what the
ledger holds afterwards; the IO manager mirrors that into the watermark's redshift side.
Its checks live in `checks.py`.
"""

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import dagster as dg

from s3rs_assets import check_ahead, stopping
from s3rs_assets.config import TableConfig
from s3rs_assets.io_manager import store_for
from s3rs_assets.load import LoadTarget, load_partitions
from s3rs_assets.names import (
    IO_MANAGER_KEY,
    RETRY_POLICY,
    TABLE_METADATA_KEY,
    TABLE_TAG,
    asset_key,
    group_name,
    kinds,
    pool_name,
    shared_signature,
)
from s3rs_assets.partitions import partitions_def
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.retry import Retries
from s3rs_assets.source import SourceTable, describe
from s3rs_assets.stage_results import (
    INTERRUPTS,
    LoadOutput,
    PartitionLoad,
    dagster_step,
    publish,
    record_failure,
)
from s3rs_assets.warehouse import WarehouseResource

# The MySQL description of each table, per run: the backup, the load and the checks of one
# run share it, so a run describes its table once (a long-lived process keeps a few runs).
_DESCRIBED: OrderedDict[tuple[str, str], SourceTable] = OrderedDict()
_DESCRIBED_LOCK = threading.Lock()
DESCRIBED_KEPT = 16


def described(
    run_id: str | None,
    table: TableConfig,
    mysql: MySQLResource,
    retries: Retries | None = None,
    log: Callable[[str], None] | None = None,
) -> SourceTable:
    """The table as MySQL describes it, asked once per run (`run_id` None: asked now)."""
    key = (run_id or "", table.name)
    with _DESCRIBED_LOCK:
        src = _DESCRIBED.get(key) if run_id else None
    if src is not None:
        return src
    src = mysql.run(
        f"{table.name}: describing the table",
        lambda c: describe(c, table),
        retries if retries is not None else Retries(),
        log,
    )
    if run_id:
        with _DESCRIBED_LOCK:
            _DESCRIBED[key] = src
            while len(_DESCRIBED) > DESCRIBED_KEPT:
                _DESCRIBED.popitem(last=False)
    return src


def load_target(
    table: TableConfig,
    mysql: MySQLResource,
    retries: Retries | None = None,
    log: Callable[[str], None] | None = None,
    run_id: str | None = None,
) -> LoadTarget:
    """The warehouse table as MySQL describes it (new columns included)."""
    src = described(run_id, table, mysql, retries, log)
    return LoadTarget.from_table_config(table, src.columns, src.primary_key)


#: Bounds of one load transaction over several partitions (a catch-up, a range run): the
#: partitions' files are loaded together, their ledger rows committed with them, up to this
#: many files or manifest rows; a larger partition is a transaction of its own.
LOAD_BATCH_FILES = 500
LOAD_BATCH_ROWS = 2_000_000


def load_batches(
    keys: list[str], files: dict[str, list]
) -> list[dict[str, list]]:
    """`keys` (in order) cut into load transactions of at most LOAD_BATCH_FILES files and
    LOAD_BATCH_ROWS rows each: one per run for a catch-up over small scattered days, while
    a crash or retry of one costs a bounded reload."""
    batches: list[dict[str, list]] = []
    n_files = n_rows = 0
    for key in keys:
        todo = files.get(key, [])
        rows = sum(f.rows for f in todo)
        if batches and (
            n_files + len(todo) > LOAD_BATCH_FILES or n_rows + rows > LOAD_BATCH_ROWS
        ):
            batches.append({})
            n_files = n_rows = 0
        if not batches:
            batches.append({})
        batches[-1][key] = todo
        n_files += len(todo)
        n_rows += rows
    return batches


def run_load(
    context: dg.AssetExecutionContext,
    table: TableConfig,
    files: dict[str, list],
    mysql: MySQLResource,
    s3: S3Resource,
    warehouse: WarehouseResource,
) -> LoadOutput:
    t0 = time.monotonic()
    retries = Retries()
    target = load_target(table, mysql, retries, context.log.warning, context.run_id)
    if check_ahead.check_follows(context, table):
        # MySQL's side of this run's check, while the warehouse loads (check_ahead.py)
        record = store_for(s3, context.run_id, context.instance).read(table.name)
        keys = check_ahead.to_load(context.partition_keys, files, record)
        check_ahead.start(context.run_id, table, target, mysql, check_ahead.synced_windows(
            partitions_def(table), keys, record))
    partitions: dict[str, PartitionLoad] = {}
    try:
        for batch in load_batches(context.partition_keys, files):
            stopping.check()  # `--parallel`'s Ctrl-C: between transactions
            results = load_partitions(warehouse, s3, target, batch, retries=retries)
            for key, result in results.items():
                todo = batch[key]
                held = set(result.files_loaded) | set(result.files_skipped)
                partitions[key] = PartitionLoad(
                    {f.key: f for f in todo if f.key in held}, result.metadata()
                )
                for other in set(result.reload_partitions) - {key}:
                    # Their ledger entries described a dropped or emptied target: the
                    # mirror forgets them, so the next sync loads those partitions again.
                    partitions.setdefault(other, PartitionLoad({}, {}))
            # one log entry per transaction (each is an event in Dagster's storage; the
            # transaction logs its per-partition detail outside it)
            context.log.info("\n".join(
                f"{table.name} {key}: {len(r.files_loaded)} file(s) loaded, "
                f"{len(r.files_skipped)} already in the ledger, {r.rows_staged} rows staged, "
                f"{r.rows_inserted} inserted, {r.rows_deleted} replaced, {r.seconds:.2f}s "
                f"({r.dialect}, {r.attempts} attempt(s))" for key, r in results.items()
            ) + (f"\n({len(results)} partitions in one transaction)" if len(results) > 1
                 else ""))
    except (Exception, *INTERRUPTS) as e:
        store = store_for(s3, context.run_id, context.instance)
        record_failure(store, table.name, "redshift", e)
        raise
    return LoadOutput(
        table.name,
        target.qualified,
        warehouse.dialect,
        partitions,
        time.monotonic() - t0,
        retries,
        context.retry_number,
    )


def build_redshift_asset(
    table: TableConfig, upstream: dg.AssetsDefinition, pdef: dg.PartitionsDefinition
) -> dg.AssetsDefinition:
    key = asset_key(table, "redshift_table")

    @dg.asset(
        key=key,
        ins={"files": dg.AssetIn(key=upstream.key)},
        partitions_def=pdef,
        backfill_policy=dg.BackfillPolicy.single_run(),
        io_manager_key=IO_MANAGER_KEY,
        group_name=group_name(table),
        kinds=kinds(table, "redshift"),
        pool=pool_name(table),
        retry_policy=RETRY_POLICY,
        op_tags={TABLE_TAG: table.name},
        metadata={TABLE_METADATA_KEY: table.name},
        description=(
            f"`{table.target_schema}.{table.target_table}` in the warehouse, merged by primary "
            f"key from the parquet files of `{table.name}` (exactly once, via the load ledger)."
        ),
    )
    @shared_signature  # computed once, not per table (names.shared_signature)
    def redshift_table(
        context: dg.AssetExecutionContext,
        files: dict,
        mysql: MySQLResource,
        s3: S3Resource,
        warehouse: WarehouseResource,
    ) -> LoadOutput:
        with dagster_step():
            out = run_load(context, table, files, mysql, s3, warehouse)
        publish(context, out, store_for(s3, context.run_id, context.instance))
        return out

    return redshift_table
