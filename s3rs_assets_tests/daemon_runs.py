"""Runs created as Dagster's sensor daemon creates them, for the run worker's tests and the
fleet benchmark: the code location's subset job and execution plan, then the run
(dagster/_daemon/sensor.py, `_create_sensor_run`, whose arguments need a live daemon)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from s3rs_assets.names import CODE_LOCATION


def code_location(instance: dg.DagsterInstance, repo_dir: Path):
    """`s3rs_assets.definitions` as an in-process code location (the whole fleet)."""
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(
            module_name="s3rs_assets.definitions",
            attribute="defs",
            working_directory=str(repo_dir),
        ),
        location_name=CODE_LOCATION,
    )
    return origin.create_location(instance)


def create_run(instance: dg.DagsterInstance, location, req: dg.RunRequest) -> dg.DagsterRun:
    """The run the sensor daemon creates for `req` (not launched)."""
    repo = location.get_repository("__repository__")
    remote_job = location.get_job(
        JobSubsetSelector(
            location_name=location.name,
            repository_name=repo.name,
            job_name=req.job_name,
            op_selection=None,
            asset_selection=set(req.asset_selection) if req.asset_selection else None,
            asset_check_selection=(
                set(req.asset_check_keys) if req.asset_check_keys is not None else None
            ),
        )
    )
    plan = location.get_execution_plan(
        remote_job,
        req.run_config,
        step_keys_to_execute=None,
        known_state=None,
        instance=instance,
    )
    return instance.create_run(
        job_name=req.job_name,
        run_id=None,
        run_config=req.run_config,
        resolved_op_selection=remote_job.resolved_op_selection,
        step_keys_to_execute=None,
        status=dg.DagsterRunStatus.NOT_STARTED,
        op_selection=None,
        root_run_id=None,
        parent_run_id=None,
        tags={**(remote_job.run_tags or {}), **req.tags},
        job_snapshot=remote_job.job_snapshot,
        execution_plan_snapshot=plan.execution_plan_snapshot,
        parent_job_snapshot=remote_job.parent_job_snapshot,
        remote_job_origin=remote_job.get_remote_origin(),
        job_code_origin=remote_job.get_python_origin(),
        asset_selection=frozenset(req.asset_selection) if req.asset_selection else None,
        asset_check_selection=(
            frozenset(req.asset_check_keys) if req.asset_check_keys is not None else None
        ),
        asset_graph=repo.asset_graph,
    )


def started_steps(events) -> set[str]:
    return {
        e.step_key
        for e in events
        if e.dagster_event and e.dagster_event.event_type_value == "STEP_START"
    }
