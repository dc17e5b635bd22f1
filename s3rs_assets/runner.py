"""Launching syncs through Dagster from Python (the CLI, the demo, tests).

Runs go through `execute_job` on the job reconstructed from `s3rs_assets.definitions`, in
this process: they are recorded in the Dagster instance (so they show in the UI with their
metadata), and several tables synced by one command share one SparkSession.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import dagster as dg

from s3rs_assets.backup import Scan, close_empty, scan
from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError
from s3rs_assets.names import (
    RANGE_END_TAG,
    RANGE_START_TAG,
    REPOSITORY_LABEL,
    REPOSITORY_TAG,
    TABLE_TAG,
    asset_key,
)
from s3rs_assets.partitions import partition_keys, partitions_def, windows
from s3rs_assets.source import check_clock, describe, safety_bound
from s3rs_assets.watermark import WatermarkRecord
from s3rs_assets.watermark_store import WatermarkStore

DEFINITIONS_MODULE = "s3rs_assets.definitions"
# One planned-materialization event per asset for a range run, not one per partition: a run
# over 1,000 partitions then costs ~50 s less on SQLite (Dagster's own switch; the UI's
# webserver and the daemon need it in their environment too: scripts/env.sh sets it).
os.environ.setdefault("DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS", "1")


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


#: Partitions two runs may lie apart and still be one run. A run costs Dagster ~3 s of its
#: own on this machine's SQLite instance, each partition in it ~50 ms (its planned and
#: materialization events): joining across more empty partitions than this costs more
#: than a second run.
RUN_GAP = 64


def load_work(table: TableConfig, record: WatermarkRecord | None) -> list[str]:
    """Partitions whose files are not all loaded (per the record's load mirror)."""
    if record is None:
        return []
    out = []
    for key, state in record.partitions.items():
        loaded = record.loaded_partitions.get(key)
        done = set(loaded.files) if loaded else set()
        if any(f.key not in done for f in state.files):
            out.append(key)
    return out


def group(
    keys: list[str], index: dict[str, int], joinable: Callable[[int, int], bool]
) -> list[tuple[str, str]]:
    """Consecutive ranges covering `keys`; two keys share a range when at most RUN_GAP
    partitions lie between them and `joinable(i, j)` allows reading those."""
    ranges: list[tuple[str, str]] = []
    ordered = sorted(set(keys), key=index.__getitem__)
    for key in ordered:
        if ranges:
            first, last = ranges[-1]
            i, j = index[last], index[key]
            if j - i - 1 <= RUN_GAP and joinable(i, j):
                ranges[-1] = (first, key)
                continue
        ranges.append((key, key))
    return ranges


def plan_work(
    table: TableConfig,
    record: WatermarkRecord | None,
    stages: tuple[str, ...],
    backup_work: list[str],
) -> list[SyncPlan]:
    """The runs for the partitions with work only (`backup.scan` found `backup_work`):
    cost follows the partitions holding rows, not the calendar. A backup range joins two
    partitions only across partitions that are closed (empty: read again at the cost of a
    probe), never across complete ones holding rows (they would be recomputed); load
    ranges join across anything (a load reads only unloaded files)."""
    all_windows = windows(partitions_def(table))
    index = {k: i for i, (k, _, _) in enumerate(all_windows)}
    closed = [
        record is not None
        and k not in record.partitions
        and record.closed_range(s, e) is not None
        for k, s, e in all_windows
    ]

    def only_closed(i: int, j: int) -> bool:
        return all(closed[i + 1 : j])

    plans: list[SyncPlan] = []
    covered: set[int] = set()
    if "backup" in stages:
        for first, last in group(backup_work, index, only_closed):
            plans.append(SyncPlan(table, stages, first, last))
            covered.update(range(index[first], index[last] + 1))
    if "load" in stages:
        pending = [k for k in load_work(table, record) if index.get(k) not in covered]
        for first, last in group(pending, index, lambda i, j: True):
            plans.append(SyncPlan(table, ("load",), first, last))
    return sorted(plans, key=lambda p: index[p.start])


@dataclass
class Prepared:
    """What `prepare` found before any run: the runs to launch and what needed none."""

    plans: list[SyncPlan]
    closed: int  # empty partitions closed without a run
    probes: int
    bound: datetime | None


def prepare(
    table: TableConfig, mysql: Any, store: WatermarkStore, stages: tuple[str, ...]
) -> Prepared:
    """Plan a table's sync from what MySQL holds: index probes find the partitions with rows
    below the safety bound, the empty stretches between them are closed without a run (one
    watermark write), and runs are planned for the partitions with work only. A table with
    nothing new gets no run at all."""
    record = store.read(table.name, fresh=True)
    backup_work: list[str] = []
    found = Scan([], [])
    bound = None
    if "backup" in stages:
        with mysql.connection() as conn:
            src = describe(conn, table)
            check_clock(conn, src)  # a zone mismatch stops here, before any probe or write
            bound = safety_bound(conn, table.lag, whole_days=src.cursor_is_date).upper
            found = scan(conn, src, record, windows(partitions_def(table)), bound)
        if found.empty:
            close_empty(store, table.name, found.empty)
            record = store.read(table.name)
        backup_work = found.work
    plans = plan_work(table, record, stages, backup_work)
    return Prepared(plans, len(found.empty), found.probes, bound)


def instance() -> dg.DagsterInstance:
    if not os.environ.get("DAGSTER_HOME"):
        raise ConfigError(
            "DAGSTER_HOME is not set: point it at the Dagster instance directory the UI uses "
            "(the demo uses .local/dagster_home; `source scripts/env.sh` sets it)"
        )
    return dg.DagsterInstance.get()


def for_threads(inst: dg.DagsterInstance) -> dg.DagsterInstance:
    """Make `inst` safe for runs executed side by side in threads of this process
    (`s3rs sync --parallel`).

    Dagster 1.13 calls `logging.config.dictConfig` at the start of every run, to collect the
    handlers of dagster.yaml's `python_logs.dagster_handler_config`, even when none is
    configured. dictConfig closes every logging handler of the process while holding
    logging's module lock, so a run starting while another thread's run emits an event
    deadlocks: seen here, the starting run held logging's lock waiting for the other run's
    event-log handler, whose thread held it waiting for logging's lock. Without such
    handlers that call yields nothing, so this instance skips it; with them configured,
    side-by-side runs are refused. No public API exists to turn the call off.
    """
    if inst.get_python_log_dagster_handler_config():
        raise ConfigError(
            "`s3rs sync --parallel` cannot run with python_logs.dagster_handler_config in "
            "dagster.yaml (Dagster reconfigures logging at every run start, which deadlocks "
            "runs in threads): remove it or sync with --parallel 1"
        )
    inst.get_yaml_python_handlers = lambda: []  # type: ignore[method-assign]
    return inst


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
        REPOSITORY_TAG: REPOSITORY_LABEL,  # linked to the code location in the UI
        **(extra_tags or {}),
    }
    # Both stages: the whole sync job, whose checks leave out `reconciled` (a full compare).
    # An asset selection would bring back every check of the selected assets.
    selection = None if set(plan.stages) == {"backup", "load"} else plan.selection
    return dg.execute_job(
        recon, instance=inst, run_config=run_config, tags=tags, asset_selection=selection
    )
