"""`s3rs_stage_chain` (every 30 s) runs `redshift_table` for the partitions `s3_parquet`
  materialized. It reads the event log directly: `fetch_materializations` after the last
  storage id it handled, per table, in storage-id order. That sees every partition of a
  single-run backfill (one run, one materialization event per partition), which an
  `asset_sensor` does not (it hands over only the latest event), and unlike
  `AutomationCondition.eager()` it needs no automation daemon, keeps the load in the table's
  own job and pool, and its decisions are plain run keys a test can assert. Events whose run
  also planned `redshift_table` (the `<table>__sync` job) and partitions whose
  `redshift_table` materialized after the event are skipped: that load already happened or
  is happening. The partitions one run materialized are requested as one load run per
  contiguous range (`partition_key` for one partition, the
  `dagster/asset_partition_range_start/_end` tags for more), with run key
  `<table>:<first>[..<last>]:<storage id of the last event>`: one event never starts two
  loads, and the cursor only moves past events that were handled.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import dagster as dg

from s3rs_assets.assets import build_sync_job
from s3rs_assets.config import TableConfig
from s3rs_assets.names import (
    STAGE_CHAIN,
    TABLE_TAG,
    TRIGGER_TAG,
    asset_key,
    job_name,
)
from s3rs_assets.partitions import partitions_def
from s3rs_assets.sensors.common import CHAIN_BATCH, clip, contiguous, partition_request


def _run_plans_load(instance: dg.DagsterInstance, run_id: str, load_key: dg.AssetKey) -> bool:
    """Whether `run_id` planned `redshift_table` too (a `<table>__sync` run loads itself)."""
    if not run_id or instance.get_run_by_id(run_id) is None:
        return False  # runless events (reported from outside) have no run to load them
    planned = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED
    )
    return any(r.asset_key == load_key for r in planned.records)


def chain_table(
    instance: dg.DagsterInstance, cfg: TableConfig, after_storage_id: int | None
) -> tuple[list[dg.RunRequest], int | None, str]:
    """Load requests for `cfg`'s new `s3_parquet` materializations.

    Returns (run requests, storage id to resume after, one line for the skip reason).
    Long on purpose: the event walk, the skips and the cursor move are one invariant (an event
    never starts two loads).
    """
    backup_key, load_key = asset_key(cfg, "s3_parquet"), asset_key(cfg, "redshift_table")
    pdef = partitions_def(cfg)
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=backup_key, after_storage_id=after_storage_id),
        CHAIN_BATCH,
        ascending=True,
    )
    records = result.records
    if not records:
        return [], after_storage_id, f"{cfg.name}: no new s3_parquet materialization"
    last_id = records[-1].storage_id
    # Partitions loaded after their backup event need no second load.
    loaded_after: dict[str, int] = {}
    partitions = sorted({r.partition_key for r in records if r.partition_key})
    if partitions:
        loads = instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=load_key,
                asset_partitions=partitions,
                after_storage_id=records[0].storage_id,
            ),
            CHAIN_BATCH * 2,
        )
        for r in loads.records:
            if r.partition_key:
                loaded_after[r.partition_key] = max(
                    loaded_after.get(r.partition_key, 0), r.storage_id
                )
    plans_load: dict[str, bool] = {}
    # source run -> partition -> storage id of its latest event (two events, one load)
    todo: dict[str, dict[str, int]] = {}
    skipped: dict[str, int] = {}

    def skip(why: str) -> None:
        skipped[why] = skipped.get(why, 0) + 1

    for r in records:
        key = r.partition_key
        if not key or not pdef.has_partition_key(key):
            skip("not a partition of this table")
            continue
        if loaded_after.get(key, 0) > r.storage_id:
            skip("already loaded since")
            continue
        if r.run_id not in plans_load:
            plans_load[r.run_id] = _run_plans_load(instance, r.run_id, load_key)
        if plans_load[r.run_id]:
            skip("loaded by the same run")
            continue
        todo.setdefault(r.run_id, {})[key] = r.storage_id

    requests = []
    for run_id, by_key in todo.items():
        for keys in contiguous(pdef, list(by_key)):
            event_id = max(by_key[k] for k in keys)
            span = keys[0] if len(keys) == 1 else f"{keys[0]}..{keys[-1]}"
            tags = {TABLE_TAG: cfg.name, TRIGGER_TAG: STAGE_CHAIN}
            if run_id:
                tags["s3rs/backup_run"] = run_id
            requests.append(
                partition_request(
                    run_key=f"{cfg.name}:{span}:{event_id}",
                    job=job_name(cfg),
                    keys=keys,
                    assets=[load_key],
                    tags=tags,
                    cfg=cfg,
                )
            )
    line = f"{cfg.name}: {len(records)} s3_parquet materialization(s) up to storage id {last_id}"
    if skipped:
        line += " (" + ", ".join(f"{n} {why}" for why, n in sorted(skipped.items())) + ")"
    if result.has_more:
        line += "; more next tick"
    return requests, last_id, line


def jobs_by_name(
    tables: Sequence[TableConfig], jobs: Sequence[dg.UnresolvedAssetJobDefinition] | None
) -> list[Any]:
    given = {j.name: j for j in jobs or ()}
    return [given.get(job_name(t)) or build_sync_job(t) for t in tables]


def build_stage_chain_sensor(
    tables: Sequence[TableConfig],
    jobs: Sequence[Any],
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    @dg.sensor(
        name=STAGE_CHAIN,
        minimum_interval_seconds=30,
        jobs=list(jobs),
        default_status=default_status,
        description=(
            "Runs redshift_table for every partition s3_parquet materialized (each partition "
            "of a single-run backfill too), unless that run loaded it already."
        ),
    )
    def s3rs_stage_chain(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        cursor: dict[str, int] = json.loads(context.cursor) if context.cursor else {}
        requests: list[dg.RunRequest] = []
        lines = []
        for cfg in tables:
            reqs, last_id, line = chain_table(context.instance, cfg, cursor.get(cfg.name))
            if last_id is not None:
                cursor[cfg.name] = last_id
            requests += reqs
            lines.append(line)
            if reqs:
                context.log.info(
                    f"{line}: requesting {len(reqs)} load run(s): "
                    + ", ".join(r.run_key or "" for r in reqs)
                )
        new_cursor = json.dumps(cursor, sort_keys=True)
        if requests:
            return dg.SensorResult(run_requests=requests, cursor=new_cursor)
        return dg.SensorResult(
            skip_reason=clip(f"checked {len(tables)} tables for new backups: " + "; ".join(lines)),
            cursor=new_cursor,
        )

    return s3rs_stage_chain


