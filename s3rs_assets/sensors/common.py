"""What the sensors share: runs in flight, run requests over partition ranges, skip texts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import dagster as dg

from s3rs_assets.config import TableConfig
from s3rs_assets.names import PARTITION_TAG, run_tags, sync_check_keys

# Runs of a table that are queued or running: the new-data sensor waits for them.
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
CHAIN_BATCH = 500  # materialization events read per table per tick; the rest next tick
SKIP_TEXT_LIMIT = 4000  # Dagster stores the skip message; keep it readable


def clip(text: str, limit: int = SKIP_TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " ... (clipped)"


def contiguous(pdef: dg.TimeWindowPartitionsDefinition, keys: Sequence[str]) -> list[list[str]]:
    """Split partition keys (any order) into runs of consecutive partitions, oldest first."""
    ranges: list[list[str]] = []
    for key in sorted(set(keys), key=lambda k: pdef.time_window_for_partition_key(k).start):
        if ranges and pdef.get_next_partition_key(ranges[-1][-1]) == key:
            ranges[-1].append(key)
        else:
            ranges.append([key])
    return ranges


def partition_request(
    *,
    run_key: str,
    job: str,
    keys: Sequence[str],
    assets: Sequence[dg.AssetKey],
    tags: Mapping[str, str],
    cfg: TableConfig,
) -> dg.RunRequest:
    """One partition as `partition_key`, several consecutive ones as a single-run range.
    The run executes the sync checks of `assets` only: without `asset_check_keys` Dagster
    adds every check of the selected assets, `reconciled` (a full compare) included."""
    checks = [k for k in sync_check_keys(cfg) if k.asset_key in set(assets)]
    all_tags = {**run_tags(cfg, keys), **tags}  # the table and its partitions in the runs list
    if len(keys) == 1:
        all_tags.pop(PARTITION_TAG)  # partition_key sets it
        return dg.RunRequest(
            run_key=run_key,
            job_name=job,
            asset_selection=list(assets),
            asset_check_keys=checks,
            partition_key=keys[0],
            tags=all_tags,
        )
    return dg.RunRequest(
        run_key=run_key,
        job_name=job,
        asset_selection=list(assets),
        asset_check_keys=checks,
        tags=all_tags,
    )
