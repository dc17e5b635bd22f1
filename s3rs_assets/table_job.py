"""One table's definitions alone: what a run of one table reconstructs.

A run of one table builds that table's assets, checks and sync job and nothing else, so its
fixed cost does not grow with the fleet. Two kinds of run get there:

* `s3rs sync -t t` (`runner.execute`) reconstructs `sync_job(t)` from this module;
* a run launched by Dagster (the daemon's sensors, the UI) is executed by a run worker that
  loads the code location `s3rs_assets.definitions`; its loader asks `definitions_for_run`
  for the run's table alone (the whole location is what the UI, the daemon and the sensors
  load, and what any other process reconstructs).

Dagster 1.13 does not tell a definitions loader which run it loads for: `core_execute_run`
(dagster/_grpc/impl.py, the run worker of the default run launcher's code-server subprocess
and of `dagster api execute_run`) holds the run and calls `recon_job.get_definition()`, which
loads the location with a `DefinitionsLoadContext(RECONSTRUCTION)` carrying only the
location-wide `RepositoryLoadData` (dagster/_core/definitions/reconstruct.py,
`reconstruct_repository_def_from_pointer`). `run_being_executed` finds that frame on the
stack; anywhere else the location loads whole. A reduced location is used only when the
job it gives the run has the very snapshot the run was planned with (ops, dependencies,
config schema, resources, tags: `JobSnap`, its lineage aside): otherwise, or when the run
names no single table, the whole location loads, as before.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

import dagster as dg
from dagster._core.snap.job_snapshot import JobSnap
from dagster._record import copy as record_copy

from s3rs_assets import catchup
from s3rs_assets.assets import build_sync_job, build_table_assets
from s3rs_assets.config import TableConfig, find_table, load_tables
from s3rs_assets.env_resources import resources_from_env
from s3rs_assets.names import ASSET_JOB, job_name, stage_keys

log = logging.getLogger(__name__)

#: The engine event a run worker writes when it built its run's table alone (the UI shows
#: it in the run's log; tests and the fleet benchmark look for it).
ONE_TABLE_EVENT = "s3rs: run worker built the definitions of"
WHOLE_LOCATION_EVENT = "s3rs: run worker loads the whole code location"


def table_definitions(table: str | TableConfig) -> dg.Definitions:
    """The Definitions of one configured table (`schema.table`)."""
    cfg = table if isinstance(table, TableConfig) else find_table(load_tables(), table)
    return dg.Definitions(
        assets=build_table_assets(cfg),
        jobs=[build_sync_job(cfg)],
        resources=resources_from_env(tables=[cfg]),
        # Every step of a run in one process: one SparkSession per run, not per step.
        executor=dg.in_process_executor,
    )


def sync_job(table: str) -> dg.JobDefinition:
    """The resolved `<schema>__<table>__sync` job, for `dg.build_reconstructable_job`."""
    return table_definitions(table).resolve_job_def(job_name(table))


def catchup_job() -> dg.JobDefinition:
    """The `s3rs_catchup` job bound to its resources alone, for `dg.build_reconstructable_job`."""
    return dg.Definitions(
        jobs=[catchup.catchup_job],
        resources=resources_from_env(),
        executor=dg.in_process_executor,
    ).resolve_job_def(catchup.JOB_NAME)


@dataclass(frozen=True)
class RunWorker:
    """The run this process executes, as Dagster's run worker holds it."""

    run: dg.DagsterRun
    instance: dg.DagsterInstance


def run_being_executed() -> RunWorker | None:
    """The run whose worker is loading definitions now: the `dagster_run` and `instance` of
    Dagster's `core_execute_run` frame on the stack (found by its code object, not by a
    name), or None in any other process or call."""
    from dagster._grpc.impl import core_execute_run

    code = core_execute_run.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            run, instance = frame.f_locals.get("dagster_run"), frame.f_locals.get("instance")
            if isinstance(run, dg.DagsterRun) and isinstance(instance, dg.DagsterInstance):
                return RunWorker(run, instance)
            return None
        frame = frame.f_back
    return None


def run_table(run: dg.DagsterRun, tables: list[TableConfig]) -> TableConfig | str:
    """The one configured table `run` materializes or checks, or why there is none."""
    if run.resolved_op_selection or run.op_selection:
        return "an op selection"
    keys = set(run.asset_selection or ()) | {k.asset_key for k in run.asset_check_selection or ()}
    by_job = None
    if run.job_name == ASSET_JOB:
        if not run.asset_selection:
            return f"{ASSET_JOB} without an asset selection"
    else:
        by_job = next((t for t in tables if job_name(t) == run.job_name), None)
        if by_job is None:
            return f"job {run.job_name} is not a table's sync job"
        keys |= set(stage_keys(by_job))
    names = {".".join(k.path[:2]) for k in keys}
    if len(names) != 1:
        return f"the run selects {len(names)} tables' assets"
    name = names.pop()
    cfg = next((t for t in tables if t.name == name), None)
    if cfg is None or not keys <= set(stage_keys(cfg)) or (by_job and by_job is not cfg):
        return f"the run's assets are not those of a configured table ({name})"
    return cfg


def _planned_as(job: dg.JobDefinition, run: dg.DagsterRun, instance: dg.DagsterInstance) -> bool:
    """Whether `job` is the job `run` was planned with: the same snapshot, its lineage (the
    parent job it was selected from, here the whole fleet's) aside."""
    if not run.job_snapshot_id or not instance.has_job_snapshot(run.job_snapshot_id):
        return False
    planned = instance.get_job_snapshot(run.job_snapshot_id)
    built = JobSnap.from_job_def(job)
    return (
        record_copy(planned, lineage_snapshot=None).snapshot_id
        == record_copy(built, lineage_snapshot=None).snapshot_id
    )


def definitions_for_run(worker: RunWorker) -> tuple[dg.Definitions | None, str]:
    """The run's table's definitions alone and what was built, or None and why the whole
    location must load. Never raises: any surprise means the whole location."""
    run = worker.run
    try:
        cfg = run_table(run, load_tables())
        if isinstance(cfg, str):
            return None, cfg
        defs = table_definitions(cfg)
        repo = defs.get_repository_def()
        if not repo.has_job(run.job_name):
            return None, f"{cfg.name}'s definitions have no job {run.job_name}"
        other = set(run.asset_check_selection or ()) - set(repo.asset_graph.asset_check_keys)
        if other:  # `caught_up`: one op over the fleet's tables
            names = ", ".join(sorted({k.name for k in other}))
            return None, f"the run selects checks that are not {cfg.name}'s own ({names})"
        job = repo.get_maybe_subset_job_def(
            run.job_name,
            asset_selection=run.asset_selection,
            asset_check_selection=run.asset_check_selection,
        )
        if not _planned_as(job, run, worker.instance):
            return None, f"{cfg.name}'s job differs from the one the run was planned with"
        return defs, cfg.name
    except Exception as e:  # noqa: BLE001 (the whole location is always a sound answer)
        log.warning("run %s: the whole code location loads (%s)", run.run_id, e)
        return None, f"{type(e).__name__}: {e}"
