"""The asset factory: one `s3_parquet` and one `redshift_table` asset per configured table.

Both are partitioned by time windows of the table's cursor column and use a single-run
backfill policy, so a backfill of many partitions is one run: one Spark session reading
partition after partition. Materializing `s3_parquet` alone is the old "backup-only",
`redshift_table` alone is "redshift-only".
"""

import time

import dagster as dg

from s3rs_assets.backup import BackupRun
from s3rs_assets.checks import build_checks, sync_check_keys
from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError, SourceSchemaError
from s3rs_assets.extract import Extractor
from s3rs_assets.io_manager import store_for
from s3rs_assets.load_stage import build_redshift_asset
from s3rs_assets.names import (
    IO_MANAGER_KEY,
    TABLE_METADATA_KEY,
    TABLE_TAG,
    asset_key,
    group_name,
    job_name,
    pool_name,
)
from s3rs_assets.partitions import partitions_def, window
from s3rs_assets.resources import MySQLResource, S3Resource, SparkResource
from s3rs_assets.source import describe, safety_bound, source_counts
from s3rs_assets.stage_results import BackupOutput, record_failure


class BackupConfig(dg.Config):
    """Run configuration of `s3_parquet` (what `s3rs sync --limit` sets)."""

    limit: int | None = None


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
    keys = context.partition_keys
    # One MySQL connection for the whole run. Everything is validated before the first
    # write or the first JVM: bad input changes nothing.
    with mysql.connection() as conn:
        src = describe(conn, table)
        bound = safety_bound(conn, table.lag)
        found = source_counts(conn, src, window(pdef, pdef.get_first_partition_key())[0], bound)
        if not src.cursor_indexed:
            context.log.warning(
                f"{table.name}: cursor column {src.cursor} has no index; chunk planning scans "
                "the table"
            )
        if bound.note:
            context.log.info(f"{table.name}: safety bound {bound.upper} ({bound.note})")
        for line in found.warnings(table.name):
            context.log.warning(line)
        store = store_for(s3, context.run_id, context.instance)
        # Validate (and if lost, recover) the watermark before Spark starts or anything is read.
        report = store.recover(table.name, now=bound.server_now)
        recovery = report.as_metadata() if report.recovered else None
        if recovery:
            context.log.warning(
                f"{table.name}: watermark was lost or invalid and restored: {recovery}"
            )
        t_spark = time.monotonic()
        session = spark.session()
        spark_seconds = time.monotonic() - t_spark
        ex = Extractor(
            spark=session,
            mysql=mysql,
            s3=s3,
            src=src,
            table_name=table.name,
            reader=table.reader,
            parallelism=table.parallelism,
        )
        backup = BackupRun(
            ex,
            store,
            conn,
            windows=[(k, *window(pdef, k)) for k in keys],
            upper=bound.upper,
            chunk_rows=table.chunk_rows,
            run_id=context.run_id,
            row_budget=limit,
            source_now=bound.server_now,
            log=context.log.info,
        )
        try:
            runs = backup.run()
        except (ConfigError, SourceSchemaError):
            raise
        except Exception as e:
            record_failure(store, table.name, "mysql", e)
            raise
    active = [r for r in runs if r.rows or r.status != "complete" or r.recomputed]
    for r in active:
        context.log.info(
            f"{table.name} {r.partition_key}: {r.status}, {r.rows} rows in {len(r.files)} "
            f"files, cursor {r.cursor_to}"
        )
    context.log.info(
        f"{table.name}: {len(runs)} partition(s), {len(runs) - len(active)} complete and "
        f"empty, {backup.batches} checkpoint write(s)"
    )
    if ex.zero_dates:
        context.log.warning(
            f"{table.name}: {ex.zero_dates} zero date(s) ('0000-00-00' or a zero month or "
            "day) in date/time columns were copied as NULL"
        )
    if backup.skipped:
        context.log.warning(
            f"{table.name}: row limit reached; not read: {', '.join(backup.skipped)}"
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
        kinds={"mysql", "spark", "s3", "parquet"},
        pool=pool_name(table),
        op_tags=tags,
        metadata={TABLE_METADATA_KEY: table.name},
        description=(
            f"MySQL `{table.name}` copied incrementally to S3 parquet, keyed on "
            f"({table.cursor}, primary key), partitioned {table.partition}."
        ),
    )
    def s3_parquet(
        context: dg.AssetExecutionContext,
        config: BackupConfig,
        mysql: MySQLResource,
        s3: S3Resource,
        spark: SparkResource,
    ) -> BackupOutput:
        return run_backup(context, table, mysql, s3, spark, config.limit)

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
