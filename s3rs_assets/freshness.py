"""`caught_up`: the lag of `s3rs status` as an asset check per table, so the UI and alerts
show stale tables.

One `multi_asset_check` (one op) covers every table's `redshift_table`: a check per table
without an op per table, and a run of any subset of the checks costs what `s3rs status`
costs for those tables (`status.fleet_status`: queries per schema, records by threads).
A check WARNs when the warehouse is behind MySQL by more than the table's `lag` plus
`status.ALLOWED_SLACK` (1 h), or holds nothing of a table MySQL has rows of.

The sync jobs select their own checks only (`assets.build_sync_job`), so `caught_up`
never runs inside a sync; run it from the UI (the asset's Checks tab, or "Execute all" on
the checks list) or on the schedule `build_freshness_schedule` builds.
"""

from collections.abc import Iterator, Sequence

import dagster as dg

from s3rs_assets.config import TableConfig
from s3rs_assets.io_manager import store_for
from s3rs_assets.names import asset_key
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.status import BAD, fleet_status, human_lag

CHECK = "caught_up"
CHECKS_OP = "s3rs_caught_up"


def freshness_check_keys(tables: Sequence[TableConfig]) -> list[dg.AssetCheckKey]:
    return [dg.AssetCheckKey(asset_key(t, "redshift_table"), CHECK) for t in tables]


def build_freshness_checks(tables: Sequence[TableConfig]) -> list[dg.AssetChecksDefinition]:
    """The `caught_up` check of every table, as one subsettable multi-asset check."""
    tables = list(tables)
    if not tables:
        return []
    by_key = {asset_key(t, "redshift_table"): t for t in tables}

    @dg.multi_asset_check(
        name=CHECKS_OP,
        specs=[
            dg.AssetCheckSpec(
                CHECK,
                asset=key,
                description=(
                    "The warehouse holds MySQL's rows up to the table's lag + 1 h "
                    "(newest cursor in MySQL against the newest loaded, from the watermark)."
                ),
            )
            for key in by_key
        ],
        can_subset=True,
    )
    def s3rs_caught_up(
        context: dg.AssetCheckExecutionContext, mysql: MySQLResource, s3: S3Resource
    ) -> Iterator[dg.AssetCheckResult]:
        selected = [by_key[k.asset_key] for k in context.selected_asset_check_keys]
        with mysql.connect() as conn:
            statuses = fleet_status(selected, conn, store_for(s3, instance=context.instance))
        names = {t.name: t for t in selected}
        for st in statuses:
            yield dg.AssetCheckResult(
                asset_key=asset_key(names[st.table], "redshift_table"),
                check_name=CHECK,
                passed=st.state not in (*BAD, "error"),
                severity=dg.AssetCheckSeverity.WARN,
                description=st.needs or f"{st.state}, lag {human_lag(st.lag_seconds)}",
                metadata={
                    "state": st.state,
                    "lag_seconds": st.lag_seconds,
                    "allowed_seconds": st.allowed_seconds,
                    "newest_mysql": st.newest_mysql.isoformat() if st.newest_mysql else None,
                    "newest_loaded": st.newest_loaded.isoformat() if st.newest_loaded else None,
                    "rows_last_day": st.rows_last_day,
                },
            )

    return [s3rs_caught_up]


def build_freshness_schedule(
    tables: Sequence[TableConfig], cron: str = "*/15 * * * *"
) -> list[dg.ScheduleDefinition]:
    """Every table's `caught_up` check on a schedule (one run, one op); stopped until a
    person turns it on in the UI (Automation), like the reconcile schedules."""
    if not tables:
        return []
    job = dg.define_asset_job(
        f"{CHECKS_OP}_job", selection=dg.AssetSelection.checks(*freshness_check_keys(tables))
    )
    return [
        dg.ScheduleDefinition(
            name=f"{CHECKS_OP}_schedule",
            job=job,
            cron_schedule=cron,
            default_status=dg.DefaultScheduleStatus.STOPPED,
        )
    ]
