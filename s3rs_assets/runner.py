"""Launching syncs through Dagster from Python (the CLI, the demo, tests).

Runs go through `execute_job` on the job reconstructed from `s3rs_assets.definitions`, in
this process: they are recorded in the Dagster instance (so they show in the UI with their
metadata), and several tables synced by one command share one SparkSession.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import dagster as dg

from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError
from s3rs_assets.names import RANGE_END_TAG, RANGE_START_TAG, TABLE_TAG, asset_key
from s3rs_assets.partitions import partition_keys, partitions_def, windows
from s3rs_assets.watermark import WatermarkRecord

DEFINITIONS_MODULE = "s3rs_assets.definitions"


def first_incomplete(table: TableConfig, record: WatermarkRecord | None, stage: str) -> str:
    """The first partition a sync of `stage` ("backup" or "load") has work in."""
    all_windows = windows(partitions_def(table))
    if record is None:
        return all_windows[0][0]
    for key, start, end in all_windows:
        if stage == "backup" and not record.is_complete(key, start, end):
            return key
        state = record.partitions.get(key)
        if stage == "load" and state is not None:
            loaded = record.loaded_partitions.get(key)
            done = set(loaded.files) if loaded else set()
            if any(f.key not in done for f in state.files) or state.status != "complete":
                return key
    return all_windows[-1][0]


@dataclass
class SyncPlan:
    table: TableConfig
    stages: tuple[str, ...]
    start: str
    end: str

    @property
    def selection(self) -> list[dg.AssetKey]:
        names = {"backup": "s3_parquet", "load": "redshift_table"}
        return [asset_key(self.table, names[s]) for s in self.stages]


def plan_sync(
    table: TableConfig, record: WatermarkRecord | None, stages: tuple[str, ...]
) -> SyncPlan:
    keys = partition_keys(table)
    starts = [first_incomplete(table, record, s) for s in stages]
    return SyncPlan(table, stages, min(starts, key=keys.index), keys[-1])


def plan_runs(
    table: TableConfig, record: WatermarkRecord | None, stages: tuple[str, ...]
) -> list[SyncPlan]:
    """The runs of one table's sync.

    A backup run re-reads (recomputes) every *complete* partition in its range, so a range
    must never reach back past the first incomplete backup partition only because the
    load stage lags there (after `sync --backup-only`, or partitions `watermark set`
    marked complete): that would read again windows the operator declared done. When the
    load starts earlier, its backlog gets its own load-only run first.
    """
    plan = plan_sync(table, record, stages)
    if stages != ("backup", "load"):
        return [plan]
    keys = partition_keys(table)
    backup = keys.index(first_incomplete(table, record, "backup"))
    load = keys.index(first_incomplete(table, record, "load"))
    if load >= backup:
        return [plan]
    return [
        SyncPlan(table, ("load",), keys[load], keys[backup - 1]),
        SyncPlan(table, stages, keys[backup], plan.end),
    ]


def instance() -> dg.DagsterInstance:
    if not os.environ.get("DAGSTER_HOME"):
        raise ConfigError(
            "DAGSTER_HOME is not set: point it at the Dagster instance directory the UI uses "
            "(the demo uses .local/dagster_home; `source scripts/env.sh` sets it)"
        )
    return dg.DagsterInstance.get()


def execute(
    plan: SyncPlan,
    inst: dg.DagsterInstance,
    limit: int | None = None,
    extra_tags: dict[str, str] | None = None,
    loggers: dict | None = None,
) -> dg.ExecuteJobResult:
    """Run `plan` in this process; `loggers` overrides the run's Dagster loggers config."""
    # Reconstructable (not the job object itself): execute_job records the run with a
    # pointer to the code, as `dagster job execute` would.
    recon = dg.build_reconstructable_job(
        DEFINITIONS_MODULE,
        "sync_job",
        reconstructable_args=(plan.table.name,),
        reconstructor_working_directory=os.getcwd(),
    )
    run_config: dict = {}
    if limit is not None and "backup" in plan.stages:
        op = "__".join(asset_key(plan.table, "s3_parquet").path)
        run_config = {"ops": {op: {"config": {"limit": limit}}}}
    if loggers:
        run_config["loggers"] = loggers
    tags = {
        RANGE_START_TAG: plan.start,
        RANGE_END_TAG: plan.end,
        TABLE_TAG: plan.table.name,
        **(extra_tags or {}),
    }
    return dg.execute_job(
        recon, instance=inst, run_config=run_config, tags=tags, asset_selection=plan.selection
    )
