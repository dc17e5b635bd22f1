"""Catching up a long history in one run: the `s3rs_catchup` op job.

A table whose data days lie far apart (a 20-year daily table with rows on 73 days) would
otherwise take one asset run per data day: a range run over the empty years between them
costs Dagster ~50 ms per partition (its events), and each separate run ~3 s of its own.
This job syncs any set of partitions of one table in one run, calling the same backup
(`assets.run_backup`) and load (`load_stage.run_load`) code as the assets, and records
what the assets would: one AssetMaterialization per partition for both `s3_parquet` and
`redshift_table`, with the same metadata, and the `matches_mysql` / `backup_complete`
evaluations. `work.plan_work` plans it where it would otherwise launch several range runs.
"""

import os
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from s3rs_assets.assets import run_backup
from s3rs_assets.checks import backup_complete_result, compare_with_mysql, run_started
from s3rs_assets.config import TableConfig, find_table, load_tables
from s3rs_assets.errors import ConfigError
from s3rs_assets.io_manager import store_for
from s3rs_assets.load_stage import run_load
from s3rs_assets.names import (
    BACKUP_CHECK_NAME,
    CHECK_NAME,
    PARTITIONS_TAG,
    REPOSITORY_LABEL,
    REPOSITORY_TAG,
    RETRY_POLICY,
    TABLE_TAG,
    asset_key,
)
from s3rs_assets.partitions import partitions_def, window
from s3rs_assets.resources import MySQLResource, S3Resource, SparkResource
from s3rs_assets.stage_results import dagster_step, publish, save_metadata
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets.work import SyncPlan

JOB_NAME = "s3rs_catchup"


@dataclass
class _Context:
    """What `run_backup`, `run_load` and `publish` ask of an asset context, for a set of
    partitions that need not be contiguous: the metadata they add is collected here and
    emitted as one materialization per partition."""

    op: dg.OpExecutionContext
    partition_keys: list[str]
    metadata: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.op.run_id

    @property
    def instance(self) -> dg.DagsterInstance:
        return self.op.instance

    @property
    def log(self) -> Any:
        return self.op.log

    @property
    def retry_number(self) -> int:
        return self.op.retry_number

    def add_asset_metadata(self, metadata: dict[str, Any], partition_key: str) -> None:
        self.metadata.setdefault(partition_key, {}).update(metadata)


class CatchupConfig(dg.Config):
    """The table and the partitions (oldest first) to back up and to load."""

    table: str
    backup_keys: list[str] = []
    load_keys: list[str] = []
    limit: int | None = None


def _materialize(
    ctx: dg.OpExecutionContext, table: TableConfig, stage: str, part: _Context
) -> None:
    key = asset_key(table, stage)  # type: ignore[arg-type]
    for k in part.partition_keys:
        ctx.log_event(dg.AssetMaterialization(key, partition=k, metadata=part.metadata.get(k)))


def _check(
    ctx: dg.OpExecutionContext,
    table: TableConfig,
    keys: list[str],
    mysql: MySQLResource,
    s3: S3Resource,
    warehouse: WarehouseResource,
) -> None:
    """`matches_mysql` over what this run moved, as the sync job's check step computes it."""
    pdef = partitions_def(table)
    record = store_for(s3, ctx.run_id, ctx.instance).read(table.name)
    since = run_started(ctx.instance, ctx.run_id)
    _, res = compare_with_mysql(
        table, keys, record, mysql, warehouse, ctx.run_id, ctx.log.warning, since
    )
    checks = [
        ("redshift_table", CHECK_NAME, res),
        ("s3_parquet", BACKUP_CHECK_NAME, backup_complete_result(pdef, keys, record)),
    ]
    for stage, name, r in checks:
        ctx.log_event(
            dg.AssetCheckEvaluation(
                asset_key=asset_key(table, stage),  # type: ignore[arg-type]
                check_name=name,
                passed=r.passed,
                severity=r.severity,
                description=r.description,
                metadata=r.metadata,
            )
        )


def _refuse_overlap(ctx: dg.OpExecutionContext, table: TableConfig) -> None:
    """This op holds no table pool (one op serves every table): stop before any write when
    another run of the table, tagged by s3rs's launchers, is queued or in progress."""
    active = [
        dg.DagsterRunStatus.QUEUED,
        dg.DagsterRunStatus.STARTING,
        dg.DagsterRunStatus.STARTED,
        dg.DagsterRunStatus.CANCELING,
    ]
    runs = ctx.instance.get_runs(
        filters=dg.RunsFilter(tags={TABLE_TAG: table.name}, statuses=active)
    )
    others = [r.run_id for r in runs if r.run_id != ctx.run_id]
    if others:
        raise ConfigError(
            f"{table.name}: run(s) {', '.join(others)} of this table are in progress; "
            "sync it again once they end"
        )


@dg.op(name="catch_up", tags={"kind": "s3rs"}, retry_policy=RETRY_POLICY)
def catch_up(
    context: dg.OpExecutionContext,
    config: CatchupConfig,
    mysql: MySQLResource,
    s3: S3Resource,
    spark: SparkResource,
    warehouse: WarehouseResource,
) -> None:
    """Back up `backup_keys`, then load them and `load_keys`, in this one step. A retry
    starts over safely: the backup resumes from its checkpoints, the load skips what the
    ledger holds."""
    table = find_table(load_tables(), config.table)
    store = store_for(s3, context.run_id, context.instance)
    with dagster_step():
        _refuse_overlap(context, table)
        if config.backup_keys:
            part = _Context(context, list(config.backup_keys))
            out = run_backup(part, table, mysql, s3, spark, config.limit)  # type: ignore[arg-type]
            publish(part, out, store)  # type: ignore[arg-type]
            result = store.update(table.name, out.close)
            part.metadata[part.partition_keys[-1]].update(
                save_metadata(result, store.write_copies(table.name))
            )
            _materialize(context, table, "s3_parquet", part)
        keys = sorted(
            set(config.backup_keys) | set(config.load_keys),
            key=lambda k: window(partitions_def(table), k)[0],
        )
        record = store.read(table.name)
        files = {
            k: list(record.partitions[k].files) if record and k in record.partitions else []
            for k in keys
        }
        part = _Context(context, keys)
        out_l = run_load(part, table, files, mysql, s3, warehouse)  # type: ignore[arg-type]
        publish(part, out_l, store)  # type: ignore[arg-type]
        result = store.update(table.name, out_l.close)
        part.metadata[keys[-1]].update(save_metadata(result, store.write_copies(table.name)))
        _materialize(context, table, "redshift_table", part)
        _check(context, table, keys, mysql, s3, warehouse)


@dg.job(name=JOB_NAME, description="Sync scattered partitions of one table in one run.")
def catchup_job() -> None:
    catch_up()


def execute_catchup(
    plan: SyncPlan,
    inst: dg.DagsterInstance,
    limit: int | None = None,
    extra_tags: dict[str, str] | None = None,
    loggers: dict | None = None,
) -> Any:
    """Run a catch-up plan in this process, recorded in `inst` like the asset runs."""
    recon = dg.build_reconstructable_job(
        # the job alone with its resources (table_job.py), not the whole code location: a
        # catch-up's fixed cost does not grow with the fleet
        "s3rs_assets.table_job", "catchup_job", reconstructor_working_directory=os.getcwd()
    )
    op_config: dict[str, Any] = {
        "table": plan.table.name,
        "backup_keys": list(plan.backup_keys),
        "load_keys": list(plan.load_keys),
        "limit": limit,
    }
    run_config: dict[str, Any] = {"ops": {"catch_up": {"config": op_config}}}
    if loggers:
        run_config["loggers"] = loggers
    keys = sorted(set(plan.backup_keys) | set(plan.load_keys))
    tags = {
        TABLE_TAG: plan.table.name,
        PARTITIONS_TAG: f"{keys[0]} .. {keys[-1]} ({len(keys)}, catch-up)",
        REPOSITORY_TAG: REPOSITORY_LABEL,
        **(extra_tags or {}),
    }
    return dg.execute_job(recon, instance=inst, run_config=run_config, tags=tags)
