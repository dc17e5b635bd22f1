"""`s3rs_new_data` (every 2 min) asks MySQL, per table, whether rows exist past the stored
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
run that failed leaves that state as it was, and Dagster never launches a key again (of
any status): the key of a failed run gets `:retry-N`, up to RETRIES_AFTER_FAILURE times,
then the sensor says so and waits for new rows or a person. A table with a sync queued
or running (tag `s3rs/table`) is not probed at all.

A tick costs queries per schema, not per table (issue 18, `scan.py`): the catalog, the
safety bound per distinct lag and the newest row below it per table in one UNION ALL
per schema; a table with no row below the bound is done without reading its record;
records are read by threads (unchanged ones kept by ETag between ticks; a table with no
primary and no copy, the copies listed once per tick, is never synced without a search of
its own), and the index probes above run only when the newest row lies past the first
unread position, for every such table at once (`find_new_data_many`: one UNION ALL per
schema and key shape for the first rows, one for the newest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import dagster as dg

from s3rs_assets.config import TableConfig
from s3rs_assets.cursor import position_token
from s3rs_assets.errors import ConfigError, SourceSchemaError, WatermarkError
from s3rs_assets.io_manager import store_for
from s3rs_assets.names import (
    NEW_DATA,
    TABLE_TAG,
    TRIGGER_TAG,
    asset_key,
    job_name,
    stage_keys,
)
from s3rs_assets.partitions import key_for, partitions_def, window, windows
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.scan import (
    RecordCache,
    newest_cursors,
    primary_etags,
    read_records,
    rows_after,
    rows_at,
)
from s3rs_assets.sensors.common import IN_FLIGHT, clip, partition_request
from s3rs_assets.source import (
    SafetyBound,
    SourceTable,
    describe_many,
    safety_bound,
)
from s3rs_assets.source.probes import first_row_sql, last_row_sql
from s3rs_assets.watermark import PartitionState, Position, WatermarkRecord, iso
from s3rs_assets.watermark.store import S3_ERRORS, WatermarkStore
from s3rs_assets.watermark_eventlog import unlisted_with_events

#: Runs the sensor requests again for the same rows after a failed run, before it waits for
#: new rows or a person (Dagster's retry policy already reran each step of those runs).
RETRIES_AFTER_FAILURE = 3
_RUN_KEY_TAG, _SENSOR_TAG = "dagster/run_key", "dagster/sensor_name"  # set by the daemon
_FAILED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def launchable_key(instance: dg.DagsterInstance, key: str) -> str | None:
    """`key`, or after failed runs with it `key:retry-N` (a key Dagster has not launched
    or whose run did not fail); None after RETRIES_AFTER_FAILURE retries failed too."""
    for attempt in range(RETRIES_AFTER_FAILURE + 1):
        candidate = key if attempt == 0 else f"{key}:retry-{attempt}"
        runs = instance.get_runs(
            dg.RunsFilter(tags={_RUN_KEY_TAG: candidate, _SENSOR_TAG: NEW_DATA}), limit=1
        )
        if not runs or runs[0].status not in _FAILED:
            return candidate
    return None


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


def _planned(
    cfg: TableConfig,
    record: WatermarkRecord | None,
    row: Position,
    newest: Position,
    done: list[Probe],
    complete: int,
) -> ProbeResult:
    """The sync for new rows from `row` (the first row of the first probe in `done`'s order
    that holds one) to `newest` (the newest row below the bound)."""
    pdef = partitions_def(cfg)
    last = pdef.get_last_partition_key() or ""
    # The MySQL clock may run ahead of this host's: no partition past the last one.
    first_key = min(key_for(pdef, row.c) or last, last)
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


def find_new_data_many(
    conn: Any,
    items: Sequence[
        tuple[TableConfig, SourceTable, WatermarkRecord | None, SafetyBound, list[Probe], int]
    ],
) -> dict[str, ProbeResult]:
    """Probe MySQL for rows past each table's record below its bound, its regions planned
    (`_probes`), and plan the syncs: the first row of every region, then the newest row of
    every table that has one, each step one UNION ALL per schema and key shape
    (`scan.rows_at`; `source.first_row` and `last_row` are the same statements alone), not
    two statements per table. A table's first row is the one of its first region (in
    `_probes`' order) that holds one, its newest row the greatest at or after it below the
    bound."""
    firsts = rows_at(
        conn,
        [
            ((cfg.name, i), src, first_row_sql(src, p.start, p.end))
            for cfg, src, _, _, probes, _ in items
            for i, p in enumerate(probes)
        ],
    )
    found: dict[str, tuple[Position, int]] = {}
    for cfg, _, _, _, probes, _ in items:
        for i in range(len(probes)):
            row = firsts[(cfg.name, i)]
            if row is not None:
                found[cfg.name] = (row, i + 1)
                break
    newest = rows_at(
        conn,
        [
            (cfg.name, src, last_row_sql(src, found[cfg.name][0].c, bound.upper))
            for cfg, src, _, bound, _, _ in items
            if cfg.name in found
        ],
    )
    out: dict[str, ProbeResult] = {}
    for cfg, _, record, _, probes, complete in items:
        if cfg.name not in found:
            out[cfg.name] = ProbeResult(None, probes, complete)
            continue
        row, n = found[cfg.name]
        out[cfg.name] = _planned(
            cfg, record, row, newest.get(cfg.name) or row, probes[:n], complete
        )
    return out


def _in_flight(
    instance: dg.DagsterInstance, tables: Sequence[TableConfig]
) -> dict[str, dg.DagsterRun]:
    """table -> a queued or running run that materializes either asset of it, however it
    was launched (the UI's Materialize button, a backfill, a sensor, the CLI): found by the
    assets it targets, not by a tag only some launch paths set. One runs query per tick."""
    runs = instance.get_runs(dg.RunsFilter(statuses=IN_FLIGHT))
    if not runs:
        return {}
    by_key = {k: cfg.name for cfg in tables for k in stage_keys(cfg)}
    by_job = {job_name(cfg): cfg.name for cfg in tables}
    found: dict[str, dg.DagsterRun] = {}
    for run in runs:
        if run.asset_selection is not None:
            names = {by_key[k] for k in run.asset_selection if k in by_key}
        else:
            names = {by_job[run.job_name]} if run.job_name in by_job else set()
        for name in names:
            found.setdefault(name, run)
    return found


#: records of the tables, by ETag, kept between ticks by the code server's process
_RECORDS = RecordCache()


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
        waiting = _in_flight(context.instance, tables)
        lines = [
            f"{name}: run {run.run_id[:8]} is {run.status.value}, not checked"
            for name, run in waiting.items()
        ]
        todo = [t for t in tables if t.name not in waiting]
        requests: list[dg.RunRequest] = []
        if todo:
            with mysql.connect() as conn:
                for _, reqs, line in scan_tables(conn, store, todo, context.instance):
                    if reqs is None:
                        context.log.error(line)
                    requests += reqs or []
                    lines.append(line)
        kinds = {
            "with rows past the watermark": sum(
                1 for ln in lines if "rows past the watermark below" in ln and ": no rows" not in ln
            ),
            "empty below the bound": sum(1 for ln in lines if "table empty there" in ln),
            "waiting for their run": len(waiting),
            "not checked": sum(1 for ln in lines if ": not checked: " in ln),
        }
        counts = ", ".join(f"{n} {what}" for what, n in kinds.items() if n)
        summary = (
            f"checked {len(tables)} tables for MySQL rows past the watermark: "
            + (f"[{counts}] " if counts and len(tables) > 1 else "")
            + "; ".join(lines)
        )
        if requests:
            context.log.info(clip(summary))
            return dg.SensorResult(run_requests=requests)
        return dg.SkipReason(clip(summary))

    return s3rs_new_data


def scan_tables(
    conn: Any, store: WatermarkStore, tables: Sequence[TableConfig], instance: dg.DagsterInstance
) -> list[tuple[TableConfig, list[dg.RunRequest] | None, str]]:
    """(table, run requests or None when it could not be checked, line) for every table.

    Costs a fixed number of MySQL queries per schema and distinct lag, not per table: the
    catalog (two per schema), the safety bound (once per lag), the newest cursor below the
    bound (one UNION ALL per schema), one LIST of the primaries; records are read (by
    threads, unchanged ones from memory) only for tables with rows; the regions `_probes`
    plans are asked as EXISTS in one UNION ALL per schema (`scan.rows_after`); only tables
    with a row there get the probes that find the first and newest row.
    """
    described = describe_many(conn, list(tables))
    bounds: dict[tuple[Any, bool], SafetyBound] = {}
    out: list[tuple[TableConfig, list[dg.RunRequest] | None, str]] = []
    live: list[tuple[TableConfig, SourceTable, SafetyBound]] = []
    for cfg in tables:
        src = described[cfg.name]
        if isinstance(src, SourceSchemaError):
            out.append((cfg, None, f"{cfg.name}: not checked: {src}"))
            continue
        key = (cfg.lag, src.cursor_is_date)
        if key not in bounds:
            bounds[key] = safety_bound(conn, cfg.lag, whole_days=src.cursor_is_date)
        live.append((cfg, src, bounds[key]))
    newest = newest_cursors(conn, [(c.name, src, b.upper) for c, src, b in live])
    with_rows = [item for item in live if newest[item[0].name] is not None]
    for cfg, _, bound in live:
        if newest[cfg.name] is None:
            out.append(
                (
                    cfg,
                    [],
                    f"{cfg.name}: no rows below the safety bound "
                    f"{iso(bound.upper)} (table empty there; record not read)",
                )
            )
    now = max((b.server_now for b in bounds.values()), default=None)
    listed = primary_etags(store) if with_rows else {}
    # the copies of the fleet in one listing per prefix: a table with no primary and no copy
    # is never synced without a recovery search of its own (as the guard does)
    copies: set[str] | None = None  # None: every unlisted table searches on its own
    if any(c.name not in listed for c, _, _ in with_rows):
        try:
            copies = store.tables_with_copies()
        except S3_ERRORS:
            copies = None
    # and which of the rest the event log may hold, in one query (not three per table)
    logged = unlisted_with_events(
        instance, [c.name for c, _, _ in with_rows if c.name not in listed], copies
    )
    records = read_records(
        store,
        [c.name for c, _, _ in with_rows],
        listed,
        now=now,
        cache=_RECORDS,
        search_missing=True,
        copies=copies,
        logged=logged,
    )
    planned: dict[str, tuple[list[Probe], int]] = {}
    for cfg, _, bound in with_rows:
        record = records[cfg.name]
        if not isinstance(record, WatermarkError):
            planned[cfg.name] = _probes(cfg, record, bound.upper)
    has_rows = rows_after(
        conn,
        [
            (c.name, src, [(p.start, p.end) for p in planned[c.name][0]])
            for c, src, _ in with_rows
            if c.name in planned and _may_have_rows(planned[c.name][0], newest[c.name])
        ],
    )
    probed = find_new_data_many(
        conn,
        [
            (cfg, src, records[cfg.name], bound, *planned[cfg.name])
            for cfg, src, bound in with_rows
            if cfg.name in has_rows
        ],
    )
    for cfg, src, bound in with_rows:
        record = records[cfg.name]
        try:
            if isinstance(record, WatermarkError):
                raise record
            probes, complete = planned[cfg.name]
            if cfg.name in has_rows:
                reqs, line = _check_table(cfg, src, bound, probed[cfg.name], instance)
            else:
                reqs, line = (
                    [],
                    (
                        f"{cfg.name}: no rows past the watermark {_where(bound)} (newest row "
                        f"{iso(newest[cfg.name])}; {len(probes)} batched probe(s), {complete} "
                        "complete partition(s) skipped)"
                    ),
                )
        except (SourceSchemaError, WatermarkError, ConfigError) as e:
            reqs, line = None, f"{cfg.name}: not checked: {e}"
        out.append((cfg, reqs, line))
    order = {cfg.name: i for i, cfg in enumerate(tables)}
    return sorted(out, key=lambda o: order[o[0].name])


def _may_have_rows(probes: Sequence[Probe], newest: datetime | None) -> bool:
    """Whether the newest row below the bound can lie in a probed region at all."""
    return bool(probes) and newest is not None and newest >= min(p.start.c for p in probes)


def _where(bound: SafetyBound) -> str:
    where = f"below the safety bound {iso(bound.upper)}"
    return f"{where} ({bound.note})" if bound.note else where


def _check_table(
    cfg: TableConfig,
    src: SourceTable,
    bound: SafetyBound,
    result: ProbeResult,
    instance: dg.DagsterInstance,
) -> tuple[list[dg.RunRequest], str]:
    where = _where(bound)
    probed = f"{len(result.probes)} index probe(s), {result.complete} complete partition(s) skipped"
    if not src.cursor_indexed:
        probed += f"; cursor column {src.cursor} has no index, probes scan"
    found = result.found
    if found is None or not found.ranges:
        return [], f"{cfg.name}: no rows past the watermark {where} ({probed})"
    keyed = [(keys, launchable_key(instance, found.run_key(keys))) for keys in found.ranges]
    given_up = [keys for keys, key in keyed if key is None]
    if given_up:
        return [], (
            f"{cfg.name}: rows past the watermark {where} from {found.first_row}, but "
            f"{RETRIES_AFTER_FAILURE + 1} failed run(s) tried them: waiting for new rows or "
            "a run started by hand"
        )
    requests = [
        partition_request(
            run_key=key,
            job=job_name(cfg),
            keys=keys,
            assets=[asset_key(cfg, "s3_parquet"), asset_key(cfg, "redshift_table")],
            tags={TABLE_TAG: cfg.name, TRIGGER_TAG: NEW_DATA},
            cfg=cfg,
        )
        for keys, key in keyed
    ]
    spans = ", ".join(k[0] if len(k) == 1 else f"{k[0]}..{k[-1]}" for k in found.ranges)
    line = (
        f"{cfg.name}: rows past the watermark {where} from {found.first_row} to "
        f"{found.newest_row}; syncing {spans} ({probed})"
    )
    return requests, line
