"""Stage 2 as an asset: `redshift_table`, loading what `s3_parquet` wrote, exactly once.

The asset gets its partitions' file manifests from the IO manager, hands them to
`load.load_files` (which skips files already in the warehouse's load ledger and merges the
rest in one transaction), then mirrors the ledger into the watermark's redshift side.
Its asset check compares MySQL and the warehouse per partition (row count and a checksum
of (primary key, cursor)): the same comparison as `s3rs verify`.
"""

import contextlib
import time
from datetime import datetime
from typing import Any

import dagster as dg

from s3rs_assets.config import TableConfig
from s3rs_assets.io_manager import LoadOutput, store_for
from s3rs_assets.load import LoadTarget, ledger_files, load_files
from s3rs_assets.names import (
    CHECK_NAME,
    IO_MANAGER_KEY,
    TABLE_TAG,
    asset_key,
    group_name,
    pool_name,
)
from s3rs_assets.partitions import window
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.source import describe
from s3rs_assets.verify import verify_table
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets.watermark import LoadState, WatermarkRecord, utcnow
from s3rs_assets.watermark_store import WatermarkStore


def close_load(rec: WatermarkRecord, out: LoadOutput) -> None:
    """Mirror the ledger (the truth) into the record's redshift side."""
    for key, info in out.partitions.items():
        rec.loaded_partitions[key] = LoadState(
            files=sorted(info["ledger"]), rows=sum(info["ledger"].values()), loaded_at=utcnow()
        )
    rec.redshift_status = "success"
    rec.last_redshift_load_time = utcnow()
    rec.last_error = None


def load_target(table: TableConfig, mysql: MySQLResource) -> LoadTarget:
    """The warehouse table as MySQL describes it now (new columns included)."""
    with mysql.connect() as conn:
        src = describe(conn, table)
    return LoadTarget.from_table_config(table, src.columns, src.primary_key)


def run_load(
    context: dg.AssetExecutionContext,
    table: TableConfig,
    files: dict[str, list],
    mysql: MySQLResource,
    s3: S3Resource,
    warehouse: WarehouseResource,
) -> LoadOutput:
    t0 = time.monotonic()
    target = load_target(table, mysql)
    partitions: dict[str, dict[str, Any]] = {}
    totals = {"files_loaded": 0, "files_skipped": 0, "rows_staged": 0, "rows_inserted": 0,
              "rows_deleted": 0}
    try:
        for key in context.partition_keys:
            result = load_files(warehouse, s3, target, key, files.get(key, []))
            for k in totals:
                v = getattr(result, k)
                totals[k] += len(v) if isinstance(v, list) else v
            partitions[key] = {
                "ledger": ledger_files(warehouse, target, key),
                "stats": result.metadata(),
            }
            for other in set(result.reload_partitions) - {key}:
                # Their ledger entries described a dropped or emptied target: the mirror
                # forgets them, so the next sync loads those partitions again.
                partitions[other] = {"ledger": {}, "stats": {}}
            context.log.info(
                f"{table.name} {key}: {len(result.files_loaded)} file(s) loaded, "
                f"{len(result.files_skipped)} already in the ledger, "
                f"{result.rows_inserted} rows inserted"
            )
    except Exception as e:
        _record_failure(store_for(s3, context.run_id, context.instance), table.name, e)
        raise
    seconds = time.monotonic() - t0
    metadata = {
        **{k: dg.MetadataValue.int(v) for k, v in totals.items()},
        "seconds": dg.MetadataValue.float(round(seconds, 3)),
        "rows_per_second": dg.MetadataValue.float(
            round(totals["rows_staged"] / seconds, 1) if seconds else 0.0
        ),
        "target": dg.MetadataValue.text(f"{target.schema}.{target.table}"),
        "dialect": dg.MetadataValue.text(warehouse.dialect),
        "partitions": dg.MetadataValue.json({k: v["stats"] for k, v in partitions.items()}),
        "ledger_files": dg.MetadataValue.int(sum(len(v["ledger"]) for v in partitions.values())),
        "ledger_rows": dg.MetadataValue.int(
            sum(sum(v["ledger"].values()) for v in partitions.values())
        ),
    }
    return LoadOutput(table.name, partitions, seconds, metadata)


def _record_failure(store: WatermarkStore, table: str, error: Exception) -> None:
    def mark(rec: WatermarkRecord) -> None:
        rec.redshift_status = "failed"
        rec.last_error = f"{type(error).__name__}: {error}"[:2000]

    with contextlib.suppress(Exception):  # the original error is what the operator needs
        store.update(table, mark)
    with contextlib.suppress(Exception):
        store.write_backups(table)


def synced_windows(
    pdef: dg.PartitionsDefinition, keys: list[str], record: WatermarkRecord | None
) -> list[tuple[str, datetime, datetime]]:
    """What the backup claims to have copied, per partition: a complete partition's whole
    window; a partial one's window up to its cursor's timestamp, exclusive. Rows after the
    cursor (above the safety bound, past a --limit) are the next sync's work, not a
    mismatch; rows sharing the cursor's timestamp are compared once the partition moves
    on (comparing them by key would depend on each database's collation)."""
    out = []
    for key in keys:
        start, end = window(pdef, key)
        state = record.partitions.get(key) if record else None
        if state is None:
            continue
        if state.status != "complete":
            end = min(end, state.cursor.c) if state.cursor is not None else start
        if start < end:
            out.append((key, start, end))
    return out


def check_result(
    context: dg.AssetExecutionContext,
    table: TableConfig,
    mysql: MySQLResource,
    s3: S3Resource,
    warehouse: WarehouseResource,
) -> dg.AssetCheckResult:
    pdef = context.assets_def.partitions_def
    target = load_target(table, mysql)
    record = store_for(s3, context.run_id, context.instance).read(table.name)
    parts = synced_windows(pdef, list(context.partition_keys), record)
    with mysql.connect() as conn:
        checks = verify_table(conn, warehouse, target, table, parts)
    bad = [c for c in checks if not c.ok]
    return dg.AssetCheckResult(
        check_name=CHECK_NAME,
        passed=not bad,
        severity=dg.AssetCheckSeverity.ERROR,
        description="; ".join(c.describe() for c in bad) or f"{len(checks)} partition(s) match",
        metadata={
            "partitions_checked": len(checks),
            "mismatches": dg.MetadataValue.json([c.describe() for c in bad]),
            "mysql_rows": sum(c.mysql_rows for c in checks),
            "warehouse_rows": sum(c.warehouse_rows for c in checks),
        },
    )


def build_redshift_asset(
    table: TableConfig, upstream: dg.AssetsDefinition, pdef: dg.PartitionsDefinition
) -> list[dg.AssetsDefinition]:
    key = asset_key(table, "redshift_table")

    @dg.asset(
        key=key,
        ins={"files": dg.AssetIn(key=upstream.key)},
        partitions_def=pdef,
        backfill_policy=dg.BackfillPolicy.single_run(),
        io_manager_key=IO_MANAGER_KEY,
        group_name=group_name(table),
        kinds={"redshift", "s3"},
        pool=pool_name(table),
        op_tags={TABLE_TAG: table.name},
        check_specs=[
            dg.AssetCheckSpec(
                CHECK_NAME,
                asset=key,
                description="Row count and (primary key, cursor) checksum per partition "
                "equal MySQL's, over what the backup copied (a partial partition up to its "
                "cursor)",
            )
        ],
        description=(
            f"`{table.target_schema}.{table.target_table}` in the warehouse, merged by primary "
            f"key from the parquet files of `{table.name}` (exactly once, via the load ledger)."
        ),
    )
    def redshift_table(
        context: dg.AssetExecutionContext,
        files: dict,
        mysql: MySQLResource,
        s3: S3Resource,
        warehouse: WarehouseResource,
    ):
        yield dg.Output(run_load(context, table, files, mysql, s3, warehouse))
        yield check_result(context, table, mysql, s3, warehouse)

    return [redshift_table]
