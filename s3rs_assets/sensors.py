"""Sensors: the watermark guard, stage chaining and new-data syncs (never Spark).

Three sensors, built by `build_sensors(tables)` from the table list. They talk to MySQL
through pymysql (`MySQLResource.connect`), to S3 through boto3 and to Dagster through the
instance; none of them imports pyspark, so a daemon tick costs milliseconds, not a JVM.
Each one ends in a `SkipReason` that names what it checked, so the UI shows why nothing ran.

* `s3rs_watermark_guard` (every 5 min) validates every configured table's primary
  watermark with `WatermarkStore.recover`: a lost or corrupt primary is restored from the
  daily backup, a session backup, or the latest `s3rs/watermark` materialization metadata
  (`watermark_eventlog.event_log_watermark`), written back, and reported as an
  `AssetObservation` on the table's `s3_parquet` (metadata `recovered_from`, `key`). A
  table with no copy anywhere was never synced, which is fine. When no valid copy is left
  the guard names the table and the `s3rs watermark set` command; it never resets
  anything itself.

* `s3rs_stage_chain` (every 30 s) runs `redshift_table` for the partitions `s3_parquet`
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

* `s3rs_new_data` (every 2 min) asks MySQL, per table, whether rows exist past the stored
  watermark and below the run's safety bound (`safety_bound(...).upper`, on the MySQL
  clock): one index-only `ORDER BY cursor, pk LIMIT 1` probe per partial partition (from
  its stored (cursor, pk), with the predicates of cursor.py) and per stretch of partitions
  the watermark has never seen, oldest first, stopping at the first row found. Complete
  partitions are not probed: their window was read to its end and the safety bound keeps
  late commits out of it. When rows are found it requests the sync job (both assets) from
  the first partition with new rows through the partition of the newest row below the
  bound (the current partition whenever the table is being written; an idle table does not
  get a run over months of empty windows), leaving out complete partitions (a sync never
  recomputes a finished window by itself), as one range run per contiguous stretch. The
  run key is `<table>:<range>:<first new row>:<newest row below the bound>`: the same state
  gives the same key (Dagster launches it once); progress or new rows give a new one. A
  table with a sync queued or running (tag `s3rs/table`) is not probed at all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import dagster as dg
import pymysql

from s3rs_assets.assets import build_sync_job
from s3rs_assets.checks import sync_check_keys
from s3rs_assets.config import TableConfig
from s3rs_assets.cursor import position_token
from s3rs_assets.errors import ConfigError, S3rsError, SourceSchemaError, WatermarkError
from s3rs_assets.io_manager import store_for
from s3rs_assets.names import (
    RANGE_END_TAG,
    RANGE_START_TAG,
    TABLE_TAG,
    asset_key,
    job_name,
    stage_keys,
)
from s3rs_assets.partitions import key_for, partitions_def, window, windows
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.source import (
    SafetyBound,
    SourceTable,
    describe,
    first_row,
    last_row,
    safety_bound,
    server_now,
)
from s3rs_assets.watermark import PartitionState, Position, WatermarkRecord, iso
from s3rs_assets.watermark_reports import RecoveryReport
from s3rs_assets.watermark_store import WatermarkStore

WATERMARK_GUARD = "s3rs_watermark_guard"
STAGE_CHAIN = "s3rs_stage_chain"
NEW_DATA = "s3rs_new_data"

TRIGGER_TAG = "s3rs/trigger"

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

def _clip(text: str, limit: int = SKIP_TEXT_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " ... (clipped)"


# ---------------------------------------------------------------------- watermark guard


@dataclass
class WatermarkCheck:
    """What the guard found for one table."""

    table: str
    state: Literal["valid", "never_synced", "recovered", "needs_person"]
    detail: str
    report: RecoveryReport | None = None

    def line(self) -> str:
        return f"{self.table}: {self.detail}"


def check_watermark(store: WatermarkStore, table: str, now: datetime | None) -> WatermarkCheck:
    """Validate `table`'s primary watermark, recovering it when lost or corrupt."""
    try:
        report = store.recover(table, now=now)
    except (WatermarkError, ConfigError) as e:
        return WatermarkCheck(table, "needs_person", str(e))
    if report.record is None:
        return WatermarkCheck(table, "never_synced", "no watermark anywhere (never synced)")
    if not report.recovered:
        return WatermarkCheck(table, "valid", "primary valid", report)
    where = f"s3://{store.bucket}/{report.key}" if report.source != "event_log" else report.key
    return WatermarkCheck(
        table,
        "recovered",
        f"primary {report.primary_error}; recovered from {report.source} {where} "
        f"(last_mysql_data_timestamp {iso(report.record.last_mysql_data_timestamp)})",
        report,
    )


def _fingerprint(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def build_watermark_guard(tables: Sequence[TableConfig]) -> dg.SensorDefinition:
    by_name = {t.name: t for t in tables}

    @dg.sensor(
        name=WATERMARK_GUARD,
        minimum_interval_seconds=300,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "Validates every table's primary watermark in S3; restores a lost or corrupt one "
            "from its backups or the event log and reports it on the table's s3_parquet; "
            "names the tables that need `s3rs watermark set`."
        ),
    )
    def s3rs_watermark_guard(
        context: dg.SensorEvaluationContext, mysql: MySQLResource, s3: S3Resource
    ) -> dg.SensorResult:
        # The source clock rejects cursors from the future; without it the check is skipped.
        clock_note = ""
        try:
            with mysql.connect() as conn:
                now = server_now(conn)
        except (S3rsError, pymysql.err.MySQLError) as e:
            now, clock_note = None, f" (MySQL clock not read, future-cursor check skipped: {e})"
        store = store_for(s3, instance=context.instance)
        reported: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
        checks = [check_watermark(store, name, now) for name in by_name]
        events: list[dg.AssetObservation] = []
        for c in checks:
            key = asset_key(by_name[c.table], "s3_parquet")
            if c.state == "recovered":
                assert c.report is not None
                context.log.warning(f"watermark {c.line()}")
                events.append(
                    dg.AssetObservation(
                        asset_key=key,
                        description=f"watermark recovered from {c.report.source}",
                        metadata={
                            "recovered_from": c.report.source,
                            "key": c.report.key,
                            "primary_error": c.report.primary_error,
                            "last_mysql_data_timestamp": iso(
                                c.report.record.last_mysql_data_timestamp
                            )
                            if c.report.record
                            else None,
                            "recovery": dg.MetadataValue.json(c.report.as_metadata()),
                        },
                    )
                )
                reported.pop(c.table, None)
            elif c.state == "needs_person":
                context.log.error(f"watermark {c.line()}")
                # Observed once per distinct problem, not every five minutes.
                if reported.get(c.table) != _fingerprint(c.detail):
                    reported[c.table] = _fingerprint(c.detail)
                    events.append(
                        dg.AssetObservation(
                            asset_key=key,
                            description="watermark lost: needs `s3rs watermark set`",
                            metadata={
                                "watermark_status": "needs s3rs watermark set",
                                "action": f"s3rs watermark set -t {c.table} --timestamp ...",
                                "error": c.detail,
                            },
                        )
                    )
            else:
                reported.pop(c.table, None)
        by_state: dict[str, list[WatermarkCheck]] = {}
        for c in checks:
            by_state.setdefault(c.state, []).append(c)
        parts = [
            f"checked {len(checks)} tables' primary watermarks in "
            f"s3://{store.bucket}/{store.prefix}{clock_note}: "
            f"{len(by_state.get('valid', []))} valid, "
            f"{len(by_state.get('never_synced', []))} never synced, "
            f"{len(by_state.get('recovered', []))} recovered, "
            f"{len(by_state.get('needs_person', []))} need a person"
        ]
        parts += [f"RECOVERED {c.line()}" for c in by_state.get("recovered", [])]
        parts += [
            f"NEEDS `s3rs watermark set -t {c.table}`: {c.detail}"
            for c in by_state.get("needs_person", [])
        ]
        return dg.SensorResult(
            skip_reason=_clip("; ".join(parts)),
            asset_events=events,
            cursor=json.dumps(reported, sort_keys=True),
        )

    return s3rs_watermark_guard


# ------------------------------------------------------------------------ stage chaining


def _contiguous(pdef: dg.TimeWindowPartitionsDefinition, keys: Sequence[str]) -> list[list[str]]:
    """Split partition keys (any order) into runs of consecutive partitions, oldest first."""
    ranges: list[list[str]] = []
    for key in sorted(set(keys), key=lambda k: pdef.time_window_for_partition_key(k).start):
        if ranges and pdef.get_next_partition_key(ranges[-1][-1]) == key:
            ranges[-1].append(key)
        else:
            ranges.append([key])
    return ranges


def _partition_request(
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
    if len(keys) == 1:
        return dg.RunRequest(
            run_key=run_key,
            job_name=job,
            asset_selection=list(assets),
            asset_check_keys=checks,
            partition_key=keys[0],
            tags=dict(tags),
        )
    return dg.RunRequest(
        run_key=run_key,
        job_name=job,
        asset_selection=list(assets),
        asset_check_keys=checks,
        tags={**tags, RANGE_START_TAG: keys[0], RANGE_END_TAG: keys[-1]},
    )


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
        for keys in _contiguous(pdef, list(by_key)):
            event_id = max(by_key[k] for k in keys)
            span = keys[0] if len(keys) == 1 else f"{keys[0]}..{keys[-1]}"
            tags = {TABLE_TAG: cfg.name, TRIGGER_TAG: STAGE_CHAIN}
            if run_id:
                tags["s3rs/backup_run"] = run_id
            requests.append(
                _partition_request(
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


def _jobs_by_name(
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
            skip_reason=_clip(f"checked {len(tables)} tables for new backups: " + "; ".join(lines)),
            cursor=new_cursor,
        )

    return s3rs_stage_chain


# ------------------------------------------------------------------------------ new data


@dataclass
class NewData:
    """Rows past a table's watermark below the safety bound, and what to sync for them."""

    table: str
    first_row: Position  # the oldest unread row below the bound
    newest_row: Position  # the newest row below the bound (part of the run key)
    ranges: list[list[str]]  # consecutive partitions to sync, complete ones left out
    probes: int

    def run_key(self, keys: Sequence[str]) -> str:
        span = keys[0] if len(keys) == 1 else f"{keys[0]}..{keys[-1]}"
        return (
            f"{self.table}:{span}:{position_token(self.first_row)}:"
            f"{position_token(self.newest_row)}"
        )


@dataclass
class Probe:
    """One index-only look for the first row after `start` and below `end`."""

    start: Position
    end: datetime
    what: str


@dataclass
class ProbeResult:
    found: NewData | None
    probes: list[Probe] = field(default_factory=list)
    complete: int = 0  # complete partitions left unprobed


def _probes(
    cfg: TableConfig, record: WatermarkRecord | None, upper: datetime
) -> tuple[list[Probe], int]:
    """The regions below `upper` that may hold unread rows, oldest first.

    Partial partitions are probed from their stored cursor; stretches no partition of the
    record covers are probed as one range each; complete partitions are left out.
    """
    pdef = partitions_def(cfg)
    first = pdef.get_first_partition_key()
    if first is None:
        return [], 0
    lo = window(pdef, first)[0]
    if upper <= lo:
        return [], 0
    # complete partitions and closed (complete, empty) ranges are never probed
    known: list[tuple[datetime, datetime, str | None, PartitionState | None]] = [
        (p.window_start, p.window_end, k, p)
        for k, p in (record.partitions.items() if record else [])
    ]
    known += [(r.start, r.end, None, None) for r in (record.closed if record else [])]
    known.sort(key=lambda e: e[0])
    probes: list[Probe] = []
    complete = 0
    gap_start = lo
    for ws, we, key, state in known:
        if ws >= upper:
            break
        if we <= gap_start:
            continue  # a window before the first partition (the start was moved later)
        if ws > gap_start:
            probes.append(Probe(Position(c=gap_start, pk=None), ws, "unsynced"))
        if state is None or state.status == "complete":
            complete += 1
        else:
            start = state.cursor
            if start is None or start.c < ws:
                start = Position(c=ws, pk=None)
            probes.append(Probe(start, min(we, upper), f"partial {key}"))
        gap_start = max(gap_start, we)
    if gap_start < upper:
        probes.append(Probe(Position(c=gap_start, pk=None), upper, "unsynced"))
    return probes, complete


def find_new_data(
    conn: Any,
    cfg: TableConfig,
    src: SourceTable,
    record: WatermarkRecord | None,
    bound: SafetyBound,
) -> ProbeResult:
    """Probe MySQL for rows past `record` below `bound.upper`; plan the sync if any."""
    probes, complete = _probes(cfg, record, bound.upper)
    done: list[Probe] = []
    for probe in probes:
        done.append(probe)
        row = first_row(conn, src, probe.start, probe.end)
        if row is None:
            continue
        pdef = partitions_def(cfg)
        last = pdef.get_last_partition_key() or ""
        # The MySQL clock may run ahead of this host's: no partition past the last one.
        first_key = min(key_for(pdef, row.c) or last, last)
        newest = last_row(conn, src, row.c, bound.upper) or row
        last_key = min(key_for(pdef, newest.c) or last, last)
        span = pdef.get_partition_keys_in_range(dg.PartitionKeyRange(first_key, last_key))
        ranges: list[list[str]] = []
        run: list[str] = []
        for k, start, end in windows(pdef, list(span)):
            if record is None or not record.is_complete(k, start, end):
                run.append(k)
            elif run:
                ranges.append(run)
                run = []
        if run:
            ranges.append(run)
        return ProbeResult(NewData(cfg.name, row, newest, ranges, len(done)), done, complete)
    return ProbeResult(None, done, complete)


def _in_flight(instance: dg.DagsterInstance, cfg: TableConfig) -> dg.DagsterRun | None:
    """A queued or running run that materializes either asset of the table, however it was
    launched (the UI's Materialize button, a backfill, a sensor, the CLI): found by the
    assets it targets, not by a tag only some launch paths set."""
    keys = set(stage_keys(cfg))
    for run in instance.get_runs(dg.RunsFilter(statuses=IN_FLIGHT)):
        if run.asset_selection is not None:
            if keys & set(run.asset_selection):
                return run
        elif run.job_name == job_name(cfg):
            return run
    return None


def build_new_data_sensor(
    tables: Sequence[TableConfig],
    jobs: Sequence[Any],
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    @dg.sensor(
        name=NEW_DATA,
        minimum_interval_seconds=120,
        jobs=list(jobs),
        default_status=default_status,
        description=(
            "Syncs a table (both stages) when MySQL holds rows past its watermark below the "
            "safety bound; index-only probes, never a count; waits while a sync is running."
        ),
    )
    def s3rs_new_data(
        context: dg.SensorEvaluationContext, mysql: MySQLResource, s3: S3Resource
    ) -> dg.SensorResult | dg.SkipReason:
        store = store_for(s3, instance=context.instance)
        requests: list[dg.RunRequest] = []
        lines: list[str] = []
        waiting = {}
        for cfg in tables:
            run = _in_flight(context.instance, cfg)
            if run is not None:
                waiting[cfg.name] = run
                lines.append(f"{cfg.name}: run {run.run_id[:8]} is {run.status.value}, not checked")
        todo = [t for t in tables if t.name not in waiting]
        if todo:
            with mysql.connect() as conn:
                for cfg in todo:
                    try:
                        reqs, line = _check_table(conn, store, cfg)
                    except (SourceSchemaError, WatermarkError, ConfigError) as e:
                        reqs, line = [], f"{cfg.name}: not checked: {e}"
                        context.log.error(line)
                    requests += reqs
                    lines.append(line)
        summary = f"checked {len(tables)} tables for MySQL rows past the watermark: " + "; ".join(
            lines
        )
        if requests:
            context.log.info(summary)
            return dg.SensorResult(run_requests=requests)
        return dg.SkipReason(_clip(summary))

    return s3rs_new_data


def _check_table(
    conn: Any, store: WatermarkStore, cfg: TableConfig
) -> tuple[list[dg.RunRequest], str]:
    src = describe(conn, cfg)
    bound = safety_bound(conn, cfg.lag, whole_days=src.cursor_is_date)
    record = store.read(cfg.name, now=bound.server_now)
    result = find_new_data(conn, cfg, src, record, bound)
    where = f"below the safety bound {iso(bound.upper)}"
    if bound.note:
        where += f" ({bound.note})"
    probed = f"{len(result.probes)} index probe(s), {result.complete} complete partition(s) skipped"
    if not src.cursor_indexed:
        probed += f"; cursor column {src.cursor} has no index, probes scan"
    found = result.found
    if found is None or not found.ranges:
        return [], f"{cfg.name}: no rows past the watermark {where} ({probed})"
    requests = [
        _partition_request(
            run_key=found.run_key(keys),
            job=job_name(cfg),
            keys=keys,
            assets=[asset_key(cfg, "s3_parquet"), asset_key(cfg, "redshift_table")],
            tags={TABLE_TAG: cfg.name, TRIGGER_TAG: NEW_DATA},
            cfg=cfg,
        )
        for keys in found.ranges
    ]
    spans = ", ".join(k[0] if len(k) == 1 else f"{k[0]}..{k[-1]}" for k in found.ranges)
    line = (
        f"{cfg.name}: rows past the watermark {where} from {found.first_row} to "
        f"{found.newest_row}; syncing {spans} ({probed})"
    )
    return requests, line


# ------------------------------------------------------------------------------ factory


def build_sensors(
    tables: Sequence[TableConfig],
    jobs: Sequence[Any] | None = None,
    *,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> list[dg.SensorDefinition]:
    """The three sensors for `tables`.

    `jobs` are the `<schema>__<table>__sync` jobs given to `Definitions` (the same objects:
    Dagster refuses two definitions of one job name); missing ones are built here, and
    Definitions picks up a sensor's jobs by itself. `default_status` applies to the two
    sensors that launch runs; the watermark guard only repairs and reports, so it runs by
    default.
    """
    tables = list(tables)
    sync_jobs = _jobs_by_name(tables, jobs)
    return [
        build_watermark_guard(tables),
        build_stage_chain_sensor(tables, sync_jobs, default_status),
        build_new_data_sensor(tables, sync_jobs, default_status),
    ]
