"""The `reconciled` asset check on `redshift_table`, and the optional reconcile schedules.

The check runs one reconcile pass (run.py) and reports the counts per kind as metadata,
with severity WARN when anything differs: a difference is work for `--apply`, not a broken
load. It can be executed on its own from the UI (it needs no materialization), and its run
config can ask for `columns: all` and `apply: true`.

`build_reconcile_schedules` gives one schedule per table running that check alone, daily
at 03:00 by default and STOPPED: an operator turns it on per table in the UI.

Dagster-layer code kept beside the stage it drives; it builds the watermark store from
the S3 resource itself (core), so nothing here imports the IO manager.
"""


from typing import Literal

import dagster as dg
from pydantic import Field

from s3rs_assets.config import TableConfig
from s3rs_assets.names import asset_key, group_name
from s3rs_assets.reconcile.diff import KINDS
from s3rs_assets.reconcile.run import ReconcileOptions, reconcile_table
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets.watermark_store import WatermarkStore

#: the asset check's name on every `redshift_table`
RECONCILE_CHECK_NAME = "reconciled"
DEFAULT_CRON = "0 3 * * *"


class ReconcileCheckConfig(dg.Config):
    """Run config of the `reconciled` check."""

    columns: Literal["key", "all"] = Field(
        default="key", description="key: hash (primary key, cursor); all: every column."
    )
    apply: bool = Field(default=False, description="Repair what differs (through the ledger).")
    threshold: int = Field(default=256, description="Rows per range before rows are fetched.")


def reconcile_check_key(table: TableConfig) -> dg.AssetCheckKey:
    return dg.AssetCheckKey(asset_key(table, "redshift_table"), RECONCILE_CHECK_NAME)


def build_reconcile_check(table: TableConfig) -> dg.AssetChecksDefinition:
    """The `reconciled` check of one table's `redshift_table`."""

    @dg.asset_check(
        asset=asset_key(table, "redshift_table"),
        name=RECONCILE_CHECK_NAME,
        description=(
            f"MySQL `{table.name}` and the warehouse compared by primary key (rows below the "
            "safety bound or with a NULL cursor): rows missing in the warehouse, rows "
            "deleted in MySQL, rows whose content differs. Runs `s3rs reconcile`."
        ),
    )
    def reconciled(
        context: dg.AssetCheckExecutionContext,
        config: ReconcileCheckConfig,
        mysql: MySQLResource,
        s3: S3Resource,
        warehouse: WarehouseResource,
    ) -> dg.AssetCheckResult:
        store = WatermarkStore(s3.client(), s3.bucket, s3.layout, context.run.run_id)
        options = ReconcileOptions(
            columns=config.columns, apply=config.apply, threshold=config.threshold
        )
        report = reconcile_table(
            table, mysql, warehouse, s3, store, options, log=context.log.info
        )
        counts = report.counts()
        left = sum(report.plan.skipped.values()) if report.plan else report.total
        repaired = report.repaired() if report.plan else {}
        doc = report.as_json(full=False)
        return dg.AssetCheckResult(
            passed=left == 0,
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
            },
        )

    return reconciled


def reconcile_job_name(table: TableConfig) -> str:
    return f"{group_name(table)}__reconcile"


def build_reconcile_schedules(
    tables: list[TableConfig], cron: str = DEFAULT_CRON
) -> list[dg.ScheduleDefinition]:
    """One schedule per table running its `reconciled` check alone; STOPPED by default."""
    out = []
    for table in tables:
        job = dg.define_asset_job(
            reconcile_job_name(table),
            selection=dg.AssetSelection.checks(reconcile_check_key(table)),
            description=f"Reconcile {table.name}: the `reconciled` check alone.",
        )
        out.append(
            dg.ScheduleDefinition(
                name=f"{group_name(table)}__reconcile_schedule",
                job=job,
                cron_schedule=cron,
                default_status=dg.DefaultScheduleStatus.STOPPED,
                description=f"Reconcile {table.name} (off until turned on).",
            )
        )
    return out
