"""The asset factory: one `s3_parquet` and one `redshift_table` asset per configured table.

Both are partitioned by time windows of the table's cursor column and use a single-run
backfill policy, so a backfill of many partitions is one run: one Spark session reading
partition after partition. Transient errors are retried where they happen (retry.py); a
step that still fails with one is retried by Dagster (`names.RETRY_POLICY`), any other
error fails it at once. Materializing `s3_parquet` alone is the old "backup-only",
`redshift_table` alone is "redshift-only".
"""

import time
from collections.abc import Callable
from typing import Any, TypeVar

import dagster as dg

from s3rs_assets.backup import BackupRun
from s3rs_assets.backup.extract import Extractor
from s3rs_assets.checks import build_checks
from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError, SourceSchemaError
from s3rs_assets.io_manager import store_for
from s3rs_assets.load_stage import build_redshift_asset, described
from s3rs_assets.names import (
    IO_MANAGER_KEY,
    RETRY_POLICY,
    TABLE_METADATA_KEY,
    TABLE_TAG,
    asset_key,
    group_name,
    job_name,
    kinds,
    pool_name,
    shared_signature,
    sync_check_keys,
)
from s3rs_assets.partitions import partitions_def, window
from s3rs_assets.resources import MySQLResource, S3Resource, SparkResource
from s3rs_assets.retry import Retries
from s3rs_assets.source import (
    SafetyBound,
    SourceTable,
    check_clock,
    safety_bound,
    source_counts,
)
from s3rs_assets.stage_results import (
    INTERRUPTS,
    BackupOutput,
    dagster_step,
    publish,
    record_failure,
)
from s3rs_assets.watermark import SourceCounts

T = TypeVar("T")


class BackupConfig(dg.Config):
    """Run configuration of `s3_parquet` (what `s3rs sync --limit` sets)."""

    limit: int | None = None


#: Built once from the class: given as `config_schema`, rather than a `config: BackupConfig`
#: parameter from which Dagster infers the schema anew for every table's op.
BACKUP_CONFIG_SCHEMA = BackupConfig.to_config_schema()


def _inspect_source(
    context: dg.AssetExecutionContext,
    table: TableConfig,
    mysql: MySQLResource,
    retries: Retries,
) -> tuple[SourceTable, SafetyBound, SourceCounts]:
    """The table's shape, the zones, the safety bound and the rows no run can read, before
    the first write or the first JVM: bad input changes nothing."""

    def query(what: str, fn: Callable[[Any], T]) -> T:
        # One MySQL connection for the whole run, reopened after a transient error.
        return mysql.run(f"{table.name}: {what}", fn, retries, context.log.warning)

    pdef = partitions_def(table)
    src = described(context.run_id, table, mysql, retries, context.log.warning)
    # MySQL's zone against S3RS_SOURCE_TIMEZONE: a mismatch that moves the bound or the
    # windows stops the run here, before anything is read (clock.py)
    clock_warning = query("checking the time zones", lambda c: check_clock(c, src))
    if clock_warning:
        context.log.warning(clock_warning)
    bound = query(
        "taking the safety bound",
        lambda c: safety_bound(c, table.lag, whole_days=src.cursor_is_date),
    )
    first = window(pdef, pdef.get_first_partition_key())[0]
    found = query("counting unreadable rows", lambda c: source_counts(c, src, first, bound))
    if not src.cursor_indexed:
        context.log.warning(
            f"{table.name}: cursor column {src.cursor} has no index; chunk planning scans "
            "the table"
        )
    if bound.note:
        context.log.info(f"{table.name}: safety bound {bound.upper} ({bound.note})")
    for line in found.warnings(table.name):
        context.log.warning(line)
    return src, bound, found


def run_backup(
    context: dg.AssetExecutionContext,
    table: TableConfig,
    mysql: MySQLResource,
    s3: S3Resource,
    spark: SparkResource,
    limit: int | None,
) -> BackupOutput:
    t0 = time.monotonic()
    pdef = partitions_def(table)
    retries = Retries()
    src, bound, found = _inspect_source(context, table, mysql, retries)
    store = store_for(s3, context.run_id, context.instance)
    # Validate (and if lost, recover) the watermark before Spark starts or anything is read.
    report = store.recover(table.name, now=bound.server_now)
    recovery = report.as_metadata() if report.recovered else None
    if recovery:
        context.log.warning(f"{table.name}: watermark was lost or invalid and restored: {recovery}")
    t_spark = time.monotonic()
    session = spark.session()
    spark_seconds = time.monotonic() - t_spark
    # sc://host:port/;token=...: the parameters after "/;" may hold a secret
    spark_app = f"{spark.master.split('/;')[0]} {session.conf.get('spark.app.id', None)}"
    ex = Extractor(
        spark=session,
        mysql=mysql,
        s3=s3,
        src=src,
        table_name=table.name,
        reader=table.reader,
        parallelism=table.parallelism,
        spark_pool=pool_name(table),
    )
    backup = BackupRun(
        ex,
        store,
        windows=[(k, *window(pdef, k)) for k in context.partition_keys],
        upper=bound.upper,
        chunk_rows=table.chunk_rows,
        run_id=context.run_id,
        row_budget=limit,
        source_now=bound.server_now,
        log=context.log.info,
        retries=retries,
    )
    try:
        runs = backup.run()
    except (ConfigError, SourceSchemaError):
        raise
    except (Exception, *INTERRUPTS) as e:
        record_failure(store, table.name, "mysql", e)
        raise
    # BackupRun logged its chunks and the partitions' summary (BackupRun._log_summary)
    if backup.skipped:
        context.log.warning(
            f"{table.name}: row limit reached; not read: {', '.join(backup.skipped)}"
        )
    if ex.zero_dates:
        context.log.warning(
            f"{table.name}: {ex.zero_dates} zero date(s) ('0000-00-00' or a zero month or "
            "day) in date/time columns were copied as NULL"
        )
    return BackupOutput(
        table.name,
        runs,
        bound,
        found,
        time.monotonic() - t0,
        spark_seconds,
        backup.skipped,
        recovery,
        retries,
        context.retry_number,
        spark_app,
        ex.zero_dates,
    )


def build_table_assets(table: TableConfig) -> list[dg.AssetsDefinition]:
    """The asset pair of one table and their checks."""
    pdef = partitions_def(table)
    tags = {TABLE_TAG: table.name}

    @dg.asset(
        key=asset_key(table, "s3_parquet"),
        partitions_def=pdef,
        backfill_policy=dg.BackfillPolicy.single_run(),
        io_manager_key=IO_MANAGER_KEY,
        group_name=group_name(table),
        kinds=kinds(table, "mysql", "parquet"),
        pool=pool_name(table),
        retry_policy=RETRY_POLICY,
        op_tags=tags,
        config_schema=BACKUP_CONFIG_SCHEMA,
        metadata={TABLE_METADATA_KEY: table.name},
        description=(
            f"MySQL `{table.name}` copied incrementally to S3 parquet, keyed on "
            f"({table.cursor}, primary key), partitioned {table.partition}."
        ),
    )
    @shared_signature
    def s3_parquet(
        context: dg.AssetExecutionContext,
        mysql: MySQLResource,
        s3: S3Resource,
        spark: SparkResource,
    ) -> BackupOutput:
        config = BackupConfig(**(context.op_config or {}))
        with dagster_step():
            out = run_backup(context, table, mysql, s3, spark, config.limit)
        publish(context, out, store_for(s3, context.run_id))
        return out

    return [s3_parquet, build_redshift_asset(table, s3_parquet, pdef), *build_checks(table)]


def build_sync_job(table: TableConfig) -> "dg.JobDefinition":
    return dg.define_asset_job(
        job_name(table),
        selection=dg.AssetSelection.assets(
            asset_key(table, "s3_parquet"), asset_key(table, "redshift_table")
        ).without_checks()
        | dg.AssetSelection.checks(*sync_check_keys(table)),
        partitions_def=partitions_def(table),
        tags={TABLE_TAG: table.name},
        description=f"Both stages of {table.name}: MySQL -> S3 -> Redshift.",
    )
