"""The asset checks of a table, each its own step so it can be executed alone from the UI.

* `matches_mysql` on `redshift_table`: row count and a checksum of (primary key, cursor)
  per partition window, computed in MySQL and in the warehouse (`verify.verify_table`, the
  same comparison as `s3rs verify`), over what the backup claims to have copied
  (`synced_windows`); in a sync run only over what the run loaded (`moved_windows`).
  ERROR when anything differs: `s3rs sync` then exits 1. The rows it
  leaves out (after a partition's cursor: above the safety bound, not read yet) are
  counted apart as "not yet synced", never a mismatch.
* `backup_complete` on `s3_parquet`: which partitions are partial, i.e. read again from
  their cursor by the next sync. The open window (the current partition, or any partition
  still above the safety bound) is partial by nature and only listed; an older partial
  partition is a WARN (a run stopped early, a `--limit`, a `watermark set`).
* `reconciled` on `redshift_table`: one `s3rs reconcile` pass (by primary key, not by
  partition: deleted rows, silent edits, stragglers), WARN when anything differs; its run
  config can ask for `columns: all` and `apply: true`. It is not part of the sync jobs
  (`SYNC_CHECKS`): execute it alone from the UI, or turn on the table's reconcile schedule
  (`build_reconcile_schedules`, daily at 03:00, stopped by default).

In a sync run the first two cover the run's partitions; executed alone they cover every
partition the watermark knows.
"""

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import dagster as dg
from pydantic import Field

from s3rs_assets import check_ahead
from s3rs_assets.check_ahead import synced_windows
from s3rs_assets.config import TableConfig
from s3rs_assets.io_manager import store_for
from s3rs_assets.load import loaded_since
from s3rs_assets.load_stage import load_target
from s3rs_assets.names import (
    BACKUP_CHECK_NAME,
    CHECK_NAME,
    RECONCILE_CHECK_NAME,
    asset_key,
    per_table_jobs,
    pool_name,
    shared_signature,
    table_slug,
)
from s3rs_assets.partitions import partitions_def, window
from s3rs_assets.reconcile.diff import KINDS
from s3rs_assets.reconcile.run import ReconcileOptions, reconcile_table
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.retry import Retries
from s3rs_assets.verify import PartitionCheck, Window, verify_table
from s3rs_assets.waiting import count_windows
from s3rs_assets.warehouse import FirstAttempt, WarehouseResource
from s3rs_assets.watermark import WatermarkRecord


def backup_complete_result(
    pdef: dg.TimeWindowPartitionsDefinition, keys: list[str], record: WatermarkRecord | None
) -> dg.AssetCheckResult:
    """`backup_complete` over `keys` (the check step and the catch-up op): the open window
    is listed; a partial partition wholly below the safety bound is a warning."""
    states = record.partitions if record else {}
    partial = [k for k in keys if k in states and states[k].status != "complete"]
    bound = record.source_counts.upper_bound if record and record.source_counts else None
    open_ = [k for k in partial if bound is None or window(pdef, k)[1] > bound]
    stuck = [k for k in partial if k not in open_]
    parts = []
    if open_:
        parts.append(f"open (read on by the next sync): {', '.join(open_)}")
    if stuck:
        parts.append(f"PARTIAL below the safety bound: {', '.join(stuck)}")
    return dg.AssetCheckResult(
        passed=not stuck,
        severity=dg.AssetCheckSeverity.WARN,
        description="; ".join(parts) or f"{len(keys)} partition(s) complete",
        metadata={
            "partitions_checked": len(keys),
            "open_partitions": dg.MetadataValue.json(open_),
            "partial_partitions": dg.MetadataValue.json(stuck),
            "cursors": dg.MetadataValue.json(
                {k: str(states[k].cursor) for k in partial if states[k].cursor}
            ),
        },
    )


def run_started(instance: dg.DagsterInstance, run_id: str) -> datetime:
    """When the run started (naive UTC, like the ledger's `loaded_at`)."""
    rec = instance.get_run_record_by_id(run_id)
    started = (rec.start_time if rec else None) or (rec.create_timestamp.timestamp() if rec
                                                    else time.time())
    return datetime.fromtimestamp(started, UTC).replace(tzinfo=None)


def compare_with_mysql(
    table: TableConfig,
    scope: list[str],
    record: WatermarkRecord | None,
    mysql: MySQLResource,
    warehouse: WarehouseResource,
    run_id: str,
    warn: Any,
    moved_since: datetime | None,
    known: Mapping[Window, tuple[int, int]] | None = None,
) -> tuple[list[str], dg.AssetCheckResult]:
    """`matches_mysql` over `scope` (the partitions compared, and the result). With
    `moved_since` (a sync run: the check step or the catch-up op), only the partitions the
    run loaded files into since then; a dropped connection is reopened and the comparison
    run again (retry.py). `known`: MySQL's side of some windows, computed while the run
    loaded (check_ahead.py)."""
    pdef = partitions_def(table)
    windows = synced_windows(pdef, scope, record)
    target = load_target(table, mysql, run_id=run_id)
    # The ledger read runs on the comparison's first connection (connections.FirstAttempt).
    with FirstAttempt(warehouse.connect(autocommit=True)) as spare:
        if moved_since is not None:
            moved = loaded_since(warehouse, target, moved_since, spare.conn)
            windows = moved_windows(windows, moved)
            scope = [k for k in scope if k in {w[0] for w in windows}]

        def compare(conn: Any) -> tuple[list[Any], int]:
            wconn = spare.take()
            try:
                return (
                    verify_table(conn, warehouse, target, table, windows, wconn, known),
                    sum(count_windows(conn, table, not_compared(pdef, scope, windows))),
                )
            finally:
                if wconn is not None:
                    wconn.close()

        checks, pending = mysql.run(
            f"{table.name}: comparing with the warehouse", compare, Retries(), warn
        )
    return scope, matches_mysql_result(scope, checks, pending)


def _scope(
    context: dg.AssetCheckExecutionContext,
    pdef: dg.TimeWindowPartitionsDefinition,
    record: WatermarkRecord | None,
) -> list[str]:
    """The run's partitions, or every partition the record knows when run alone."""
    if context.has_partition_key_range:
        return list(pdef.get_partition_keys_in_range(context.partition_key_range))
    if context.has_partition_key:
        return [context.partition_key]
    known = record.partitions if record else {}
    return sorted(known, key=lambda k: known[k].window_start)


def moved_windows(
    windows: list[tuple[str, datetime, datetime]], moved: set[str]
) -> list[tuple[str, datetime, datetime]]:
    """`windows` of the partitions a sync run moved rows into (`moved`: partitions with
    files loaded since the run started, from the warehouse ledger), each whole: a sync's
    check then costs in proportion to what it moved, not to the table, and still sees any
    difference in a partition it touched. `s3rs verify`, `reconcile` and the check executed
    alone compare everything."""
    return [w for w in windows if w[0] in moved]


def not_compared(
    pdef: dg.TimeWindowPartitionsDefinition,
    keys: list[str],
    compared: list[tuple[str, datetime, datetime]],
) -> list[tuple[datetime, datetime]]:
    """The part of each partition `synced_windows` left out: from where its comparison
    stops (its cursor) to the window's end. Rows there are not yet synced (or share the
    cursor's instant), not missing."""
    ends = {k: end for k, _, end in compared}
    out = []
    for key in keys:
        start, end = window(pdef, key)
        stop = ends.get(key, start)
        if stop < end:
            out.append((stop, end))
    return out


def matches_mysql_result(
    scope: list[str], checks: list[PartitionCheck], pending: int, **ids: Any
) -> dg.AssetCheckResult:
    """The `matches_mysql` evaluation (`ids`: its asset_key and check_name, where one op
    yields several checks). Row counts are text: a check covers the run's partitions in a
    sync and every known partition when executed alone, so as numbers Dagster would plot
    100,000 and then 17,544 — which reads as loss. The numbers it plots keep one meaning:
    partitions checked and partitions that differ."""
    bad = [c for c in checks if not c.ok]
    span = f"partition(s) {scope[0]} .. {scope[-1]}" if scope else "no partition"
    mysql_rows = sum(c.mysql_rows for c in checks)
    wh_rows = sum(c.warehouse_rows for c in checks)
    not_yet = (
        f"; {pending:,} row(s) not compared yet (from their partition's cursor on: at or "
        "above the safety bound or not read yet, which the next sync reads, or sharing the "
        "cursor's instant, compared once the partition moves on)"
        if pending
        else ""
    )
    summary = (
        "; ".join(c.describe() for c in bad)
        if bad
        else f"{len(checks)} partition(s) match ({mysql_rows:,} rows)"
    )
    return dg.AssetCheckResult(
        **ids,
        passed=not bad,
        severity=dg.AssetCheckSeverity.ERROR,
        description=summary + not_yet,
        metadata={
            "partitions_checked": len(checks),
            "mismatched_partitions": len(bad),
            "mismatches": dg.MetadataValue.json([c.describe() for c in bad]),
            "mysql_rows": dg.MetadataValue.text(f"{mysql_rows:,} in {span}"),
            "warehouse_rows": dg.MetadataValue.text(f"{wh_rows:,} in {span}"),
            "rows_not_yet_synced": dg.MetadataValue.text(f"{pending:,} in {span}"),
        },
    )


def build_checks(table: TableConfig) -> list[dg.AssetChecksDefinition]:
    """Long on purpose: the three check definitions of a table, nested so each closes over its
    table."""
    pdef = partitions_def(table)

    @dg.asset_check(
        asset=asset_key(table, "redshift_table"),
        name=CHECK_NAME,
        pool=pool_name(table),  # never beside a load of the same table: no false mismatch
        description=(
            f"`{table.name}`: row count and (primary key, cursor) checksum per partition equal "
            "MySQL's, over what the backup copied (a partial partition up to its cursor)."
        ),
    )
    @shared_signature
    def matches_mysql(
        context: dg.AssetCheckExecutionContext,
        mysql: MySQLResource,
        s3: S3Resource,
        warehouse: WarehouseResource,
    ) -> dg.AssetCheckResult:
        record = store_for(s3, context.run.run_id, context.instance).read(table.name)
        sync_run = context.has_partition_key_range or context.has_partition_key
        since = run_started(context.instance, context.run.run_id) if sync_run else None
        known = check_ahead.take(context.run.run_id, table) if sync_run else None
        return compare_with_mysql(
            table, _scope(context, pdef, record), record, mysql, warehouse,
            context.run.run_id, context.log.warning, since, known,
        )[1]

    @dg.asset_check(
        asset=asset_key(table, "s3_parquet"),
        name=BACKUP_CHECK_NAME,
        pool=pool_name(table),
        description=(
            f"`{table.name}`: partitions the next sync reads again from their cursor. The open "
            "window is listed; an older partial partition is a warning."
        ),
    )
    @shared_signature
    def backup_complete(
        context: dg.AssetCheckExecutionContext, s3: S3Resource
    ) -> dg.AssetCheckResult:
        record = store_for(s3, context.run.run_id, context.instance).read(table.name)
        return backup_complete_result(pdef, _scope(context, pdef, record), record)

    return [matches_mysql, backup_complete, build_reconcile_check(table)]


DEFAULT_CRON = "0 3 * * *"


class ReconcileCheckConfig(dg.Config):
    """Run config of the `reconciled` check."""

    columns: Literal["key", "all"] = Field(
        default="key", description="key: hash (primary key, cursor); all: every column."
    )
    apply: bool = Field(default=False, description="Repair what differs (through the ledger).")
    threshold: int = Field(default=256, description="Rows per range before rows are fetched.")


#: Built once (see assets.BACKUP_CONFIG_SCHEMA).
RECONCILE_CONFIG_SCHEMA = ReconcileCheckConfig.to_config_schema()


def reconcile_check_key(table: TableConfig) -> dg.AssetCheckKey:
    return dg.AssetCheckKey(asset_key(table, "redshift_table"), RECONCILE_CHECK_NAME)


def build_reconcile_check(table: TableConfig) -> dg.AssetChecksDefinition:
    """The `reconciled` check of one table's `redshift_table`."""

    @dg.asset_check(
        asset=asset_key(table, "redshift_table"),
        name=RECONCILE_CHECK_NAME,
        pool=pool_name(table),
        config_schema=RECONCILE_CONFIG_SCHEMA,
        description=(
            f"MySQL `{table.name}` and the warehouse compared by primary key (rows below the "
            "safety bound or with a NULL cursor): rows missing in the warehouse, rows "
            "deleted in MySQL, rows whose content differs. Runs `s3rs reconcile`."
        ),
    )
    @shared_signature
    def reconciled(
        context: dg.AssetCheckExecutionContext,
        mysql: MySQLResource,
        s3: S3Resource,
        warehouse: WarehouseResource,
    ) -> dg.AssetCheckResult:
        config = ReconcileCheckConfig(**(context.op_execution_context.op_config or {}))
        store = store_for(s3, context.run.run_id, context.instance)
        options = ReconcileOptions(
            columns=config.columns, apply=config.apply, threshold=config.threshold
        )
        report = reconcile_table(
            table, mysql, warehouse, s3, store, options, log=context.log.info
        )
        counts = report.counts()
        repaired = report.repaired() if report.plan else {}
        doc = report.as_json(full=False)
        return dg.AssetCheckResult(
            passed=report.ok(),
            severity=dg.AssetCheckSeverity.WARN,
            description=", ".join(f"{counts[k]} {k}" for k in KINDS)
            + (f"; repaired {repaired}" if repaired else ""),
            metadata={
                **{k: dg.MetadataValue.int(counts[k]) for k in KINDS},
                "columns": report.columns,
                "mysql_rows": report.diff.mysql_rows,
                "warehouse_rows": report.diff.warehouse_rows,
                "ranges_compared": report.diff.segments_compared,
                "safety_bound": report.bound.isoformat(),
                "seconds": dg.MetadataValue.float(round(report.timings.get("total", 0.0), 3)),
                "examples": dg.MetadataValue.json(doc["examples"]),
                **({"repaired": dg.MetadataValue.json(repaired)} if repaired else {}),
                **({"not_repaired": dg.MetadataValue.json(report.unrepaired)}
                   if report.unrepaired else {}),
                **({"not_yet": dg.MetadataValue.json(report.not_yet())}
                   if report.not_yet() else {}),
            },
        )

    return reconciled


def reconcile_job_name(table: TableConfig) -> str:
    return f"{table_slug(table)}__reconcile"


RECONCILE_ALL_SCHEDULE = "s3rs_reconcile_all_schedule"


def build_reconcile_schedules(
    tables: list[TableConfig], cron: str = DEFAULT_CRON
) -> list[dg.ScheduleDefinition]:
    """One schedule per table running its `reconciled` check alone; STOPPED by default.
    Past `names.per_table_jobs`, one schedule running every table's `reconciled` check on
    the implicit asset job instead (per-table jobs would cost N^2 to resolve)."""
    if not per_table_jobs(len(tables)):
        return [
            dg.ScheduleDefinition(
                name=RECONCILE_ALL_SCHEDULE,
                target=dg.AssetSelection.checks(*(reconcile_check_key(t) for t in tables)),
                cron_schedule=cron,
                default_status=dg.DefaultScheduleStatus.STOPPED,
                description=f"Reconcile all {len(tables)} tables (off until turned on).",
            )
        ]
    out = []
    for table in tables:
        job = dg.define_asset_job(
            reconcile_job_name(table),
            selection=dg.AssetSelection.checks(reconcile_check_key(table)),
            description=f"Reconcile {table.name}: the `reconciled` check alone.",
        )
        out.append(
            dg.ScheduleDefinition(
                name=f"{table_slug(table)}__reconcile_schedule",
                job=job,
                cron_schedule=cron,
                default_status=dg.DefaultScheduleStatus.STOPPED,
                description=f"Reconcile {table.name} (off until turned on).",
            )
        )
    return out
