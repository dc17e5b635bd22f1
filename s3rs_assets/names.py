"""The Dagster names of a table: asset keys, job, pool, group, tags, metadata keys, retry policy.

Everything that refers to a table's assets from elsewhere (sensors, the CLI, the IO
manager, recovery from the event log) builds the names here, so no module needs to import
the asset factory to find them.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from types import CodeType
from typing import Any, Literal, TypeVar

import dagster as dg

from s3rs_assets.config import TableConfig
from s3rs_assets.identifiers import split_qualified
from s3rs_assets.retry import STEP_MAX_RETRIES, STEP_RETRY_DELAY_SECONDS

Stage = Literal["s3_parquet", "redshift_table"]
STAGES: tuple[Stage, Stage] = ("s3_parquet", "redshift_table")

IO_MANAGER_KEY = "s3rs_io_manager"
#: Run tag naming the table a run syncs (CLI and sensor runs; UI launches carry none).
TABLE_TAG = "s3rs/table"
#: Materialization metadata entry holding the whole watermark record (a recovery source),
#: on the last partition of each `redshift_table` run.
WATERMARK_METADATA_KEY = "s3rs/watermark"
#: The backup side of the record (no load mirror), on the last partition of `s3_parquet` runs.
WATERMARK_BACKUP_METADATA_KEY = "s3rs/watermark_backup"
#: Beside either snapshot: where its record lives (`s3://bucket/prefix`, `Layout.location`).
#: The event log is the instance's, not the bucket's: after S3RS_S3_BUCKET or _PREFIX
#: changes, the snapshots of the old place are not a copy of the new place's record.
WATERMARK_LOCATION_METADATA_KEY = "s3rs/watermark_location"
#: Run-level materialization metadata of both assets: how many retries the run needed.
RETRIES_METADATA_KEY = "retries"
#: The one materialization metadata entry (JSON) holding every raw figure behind the few
#: formatted entries the UI shows first (stage_results.py); read it with `metadata_facts`.
DETAILS_METADATA_KEY = "details"
#: Both assets' Dagster retry policy, for steps that still failed with a transient error
#: after retrying it where it happened (retry.py; stage_results.dagster_step lets no other
#: error reach it).
RETRY_POLICY = dg.RetryPolicy(
    max_retries=STEP_MAX_RETRIES,
    delay=STEP_RETRY_DELAY_SECONDS,
    backoff=dg.Backoff.EXPONENTIAL,
    jitter=dg.Jitter.PLUS_MINUS,
)
#: Metadata of the Failure that stops a step on an interrupt (Ctrl-C or SIGTERM in `s3rs
#: sync`, Terminate in the UI): `progress.interrupted` finds it in the run's events.
INTERRUPTED_METADATA_KEY = "s3rs/interrupted"
#: Definition metadata of both assets: the configured table ("schema.table").
TABLE_METADATA_KEY = "s3rs/table"
#: The asset check on `redshift_table` comparing MySQL and the warehouse.
CHECK_NAME = "matches_mysql"
#: The asset check on `s3_parquet` naming partitions the next sync reads again.
BACKUP_CHECK_NAME = "backup_complete"
#: The asset check on `redshift_table` running one `s3rs reconcile` pass.
RECONCILE_CHECK_NAME = "reconciled"
#: The code location's name (workspace.yaml, pyproject's [tool.dagster]).
CODE_LOCATION = "s3rs"
#: Dagster's hidden run tag naming the repository and code location a run belongs to; the
#: UI's job pages and timeline find runs by it. Runs launched from the UI or the daemon get
#: it by themselves; `dagster job execute` and the CLI's in-process runs are given it.
REPOSITORY_TAG = ".dagster/repository"
REPOSITORY_LABEL = f"__repository__@{CODE_LOCATION}"
#: Dagster's run tags for a single-run partition range (documented, but not exported as
#: constants by the public API).
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
#: Dagster's run tag of a one-partition run (shown in the runs list).
PARTITION_TAG = "dagster/partition"
#: Run tag naming a run's partitions for people: the runs list shows user tags and
#: `dagster/partition`, but hides Dagster's range tags.
PARTITIONS_TAG = "s3rs/partitions"


F = TypeVar("F", bound=Callable[..., Any])
_SIGNATURES: dict[CodeType, inspect.Signature] = {}


def shared_signature(fn: F) -> F:
    """Give a per-table closure the signature computed once for its code. Dagster's
    decorators call `inspect.signature` ~17 times per op; with `__signature__` set each call
    returns at once (a third of the definitions' build time at 500 tables)."""
    sig = _SIGNATURES.get(fn.__code__)
    if sig is None:
        sig = _SIGNATURES[fn.__code__] = inspect.signature(fn)
    fn.__signature__ = sig  # type: ignore[attr-defined]
    return fn


def metadata_facts(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A materialization's figures as plain values: its entries, with the raw numbers of
    `details` (`rows` as 1234, not the "1,234" shown) taking precedence."""
    plain = {k: getattr(v, "value", v) for k, v in metadata.items()}
    details = plain.pop(DETAILS_METADATA_KEY, None)
    if isinstance(details, str):
        details = json.loads(details)
    return {**plain, **(details or {})}


def _parts(table: TableConfig | str) -> tuple[str, str]:
    if isinstance(table, TableConfig):
        return table.schema, table.table
    return split_qualified(table, "table")


def asset_key(table: TableConfig | str, stage: Stage) -> dg.AssetKey:
    schema, name = _parts(table)
    return dg.AssetKey([schema, name, stage])


def stage_keys(table: TableConfig | str) -> list[dg.AssetKey]:
    return [asset_key(table, s) for s in STAGES]


def sync_check_keys(table: TableConfig | str) -> list[dg.AssetCheckKey]:
    """The checks a sync run executes (reconcile is too costly to run on every sync): every
    launcher of a run of one stage selects these of its asset, never `reconciled`."""
    return [
        dg.AssetCheckKey(asset_key(table, "redshift_table"), CHECK_NAME),
        dg.AssetCheckKey(asset_key(table, "s3_parquet"), BACKUP_CHECK_NAME),
    ]


def group_name(table: TableConfig | str) -> str:
    """The asset group: the MySQL schema, so the UI's sidebar lists a few dozen schemas,
    not one group per table (each node still names its table through `kinds`)."""
    schema, _ = _parts(table)
    return schema


def table_slug(table: TableConfig | str) -> str:
    """`<schema>__<table>`: the prefix of a table's job and schedule names."""
    schema, name = _parts(table)
    return f"{schema}__{name}"


#: Past this many tables the code location defines no per-table sync job and no per-table
#: schedule: each asset job is resolved against the whole asset graph, so N jobs cost N^2
#: (Dagster issues #22523, #10236). Runs then go to Dagster's implicit asset job with an
#: asset and check selection.
TABLE_JOBS_MAX_ENV = "S3RS_TABLE_JOBS_MAX"
TABLE_JOBS_MAX_DEFAULT = 100
#: Dagster's implicit asset job (`dagster._core...IMPLICIT_ASSET_JOB_NAME`, not exported).
ASSET_JOB = "__ASSET_JOB"


def per_table_jobs(n_tables: int) -> bool:
    """Whether a location of `n_tables` tables gets one sync job per table."""
    raw = os.environ.get(TABLE_JOBS_MAX_ENV, "")
    limit = int(raw) if raw.strip().isdigit() else TABLE_JOBS_MAX_DEFAULT
    return n_tables <= limit


def kinds(table: TableConfig | str, *technologies: str) -> set[str]:
    """An asset's kinds: its technologies and the table's name. The Dagster UI labels a node
    with the key's last part (`s3_parquet`); its kind tags are what names the table on every
    node and asset row (and a click on one selects both assets of the table)."""
    _, name = _parts(table)
    table_kind = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:63]  # Dagster's tag-key rules
    return {*technologies, table_kind}


def job_name(table: TableConfig | str) -> str:
    return f"{table_slug(table)}__sync"


def run_tags(table: TableConfig | str, partition_keys: Sequence[str]) -> dict[str, str]:
    """The tags of a run of `table` over `partition_keys` (oldest first), whatever launches
    it (the CLI, the sensors): the table and its partitions in the runs list, and the
    partition or single-run range Dagster executes."""
    schema, name = _parts(table)
    tags = {TABLE_TAG: f"{schema}.{name}"}
    keys = list(partition_keys)
    if len(keys) == 1:
        tags[PARTITION_TAG] = keys[0]  # shown by the runs list as it is
    elif keys:
        tags[RANGE_START_TAG], tags[RANGE_END_TAG] = keys[0], keys[-1]
        tags[PARTITIONS_TAG] = f"{keys[0]} .. {keys[-1]} ({len(keys)})"
    return tags


def pool_name(table: TableConfig | str) -> str:
    """One slot per table: two runs of the same table never extract at the same time."""
    schema, name = _parts(table)
    return f"s3rs-{schema}-{name}"


#: The sensors (sensors/): their names and the tag on the runs they launch.
WATERMARK_GUARD = "s3rs_watermark_guard"
STAGE_CHAIN = "s3rs_stage_chain"
NEW_DATA = "s3rs_new_data"
TRIGGER_TAG = "s3rs/trigger"
