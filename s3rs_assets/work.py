"""Which partitions of a table have work, decided from the sources of truth.

One place answers "is there anything to do" for `s3rs sync`, `--redshift-only`, the demo
and the watermark edits, and each fact comes from where it lives (DESIGN.md):

* **backup work** — rows in MySQL past each partition's position below the safety bound,
  found with index probes (`backup.scan`); the empty stretches are closed on the way;
* **load work** — files of the partition manifests whose (key, md5) the warehouse's load
  ledger does not hold *for the target as it is now* (`load.ledger_versions`: a dropped,
  re-created or emptied target holds nothing). The watermark's copy of the ledger is never
  asked: it is a summary, and deciding from it is how a truncated target once stayed
  "in sync". Where it disagrees with the ledger (a run killed after its load committed)
  it is rewritten from it (`mirror_ledger`);
* **lost files** — an unloaded manifest file that is no longer in S3 (`s3clean --force`, a
  lifecycle rule) cannot be loaded: its partition is dropped from the record, so the next
  backup reads its rows from MySQL again. What S3 holds is the truth for "extracted";
  "unloaded" is the ledger's, for `--backup-only` too when a warehouse is configured and
  answers (else the record's load mirror).

The warehouse and S3 are asked once per table and sync, not per partition.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from s3rs_assets.backup import Scan, close_empty, scan
from s3rs_assets.config import TableConfig
from s3rs_assets.errors import S3rsError
from s3rs_assets.load import ledger_versions
from s3rs_assets.partitions import partition_keys, time_windows, windows
from s3rs_assets.source import check_clock, describe, safety_bound
from s3rs_assets.watermark import FileEntry, LoadState, WatermarkRecord
from s3rs_assets.watermark.edits import first_incomplete, forget_lost

Loaded = set[tuple[str, str]]  # (file key, md5) the warehouse ledger holds


def unloaded(record: WatermarkRecord | None, loaded: Loaded) -> dict[str, list[FileEntry]]:
    """Per partition, the manifest files the ledger does not hold (key and md5)."""
    out: dict[str, list[FileEntry]] = {}
    for key, state in (record.partitions if record else {}).items():
        todo = [f for f in state.files if (f.key, f.md5) not in loaded]
        if todo:
            out[key] = todo
    return out


@dataclass
class SyncPlan:
    """One Dagster run: `stages` over the partition range [start, end]; or, when
    `backup_keys`/`load_keys` are set, a catch-up run (catchup.py) over those partitions
    only, however far apart they lie."""

    table: TableConfig
    stages: tuple[str, ...]
    start: str
    end: str
    backup_keys: tuple[str, ...] = ()
    load_keys: tuple[str, ...] = ()

    @property
    def catchup(self) -> bool:
        return bool(self.backup_keys or self.load_keys)


def plan_sync(table: TableConfig, record: WatermarkRecord | None) -> SyncPlan:
    """Both stages from the first incomplete backup partition to the newest partition."""
    return SyncPlan(table, ("backup", "load"), first_incomplete(table, record),
                    partition_keys(table)[-1])


#: Partitions two runs may lie apart and still be one run. A run costs Dagster ~3 s of its
#: own on this machine's SQLite instance, each partition in it ~50 ms (its planned and
#: materialization events): joining across more empty partitions than this costs more
#: than a second run.
RUN_GAP = 64


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
    load_work: list[str],
    catchup: bool = True,
) -> list[SyncPlan]:
    """The runs for the partitions with work only: cost follows the partitions holding
    rows, not the calendar. A backup range joins two partitions only across partitions
    that are closed (empty: read again at the cost of a probe), never across complete ones
    holding rows (they would be recomputed); load ranges join across anything (a load
    reads only unloaded files). Where that still leaves two runs or more (data days far
    apart), one catch-up run over the partitions with work replaces them (`catchup`)."""
    all_windows = windows(time_windows(table))
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
        pending = [k for k in load_work if k in index and index[k] not in covered]
        for first, last in group(pending, index, lambda i, j: True):
            plans.append(SyncPlan(table, ("load",), first, last))
    plans.sort(key=lambda p: index[p.start])
    if catchup and len(plans) >= 2 and "load" in stages:
        return [catchup_plan(table, stages, index, backup_work, load_work)]
    return plans


def catchup_plan(
    table: TableConfig,
    stages: tuple[str, ...],
    index: dict[str, int],
    backup_work: list[str],
    load_work: list[str],
) -> SyncPlan:
    """One run for work scattered over the calendar (several range runs otherwise): only
    the partitions with work, each materialized on its own (catchup.py)."""
    order = index.__getitem__
    backup = sorted(set(backup_work) if "backup" in stages else set(), key=order)
    load = sorted({k for k in load_work if k in index} - set(backup), key=order)
    keys = sorted(set(backup) | set(load), key=order)
    return SyncPlan(table, stages, keys[0], keys[-1], tuple(backup), tuple(load))


@dataclass
class Prepared:
    """What `prepare` found before any run: the runs to launch and what needed none."""

    plans: list[SyncPlan]
    closed: int  # empty partitions closed without a run
    probes: int
    bound: datetime | None
    #: partitions whose unloaded files had vanished from S3: dropped from the record, read
    #: again by the backup (or, with --redshift-only, waiting for one)
    lost: dict[str, list[str]] = field(default_factory=dict)
    #: file versions the warehouse ledger holds for the target as it is now
    loaded_files: int = 0
    #: the bound was held back by another thread's transaction or statement (runs started
    #: later may read past it: `s3rs sync` plans once more after them)
    held: bool = False


def mirrored(record: WatermarkRecord) -> Loaded:
    """The file versions the record's load mirror says are loaded (a copy of the ledger:
    for decisions where a wrong "unloaded" costs only a re-read)."""
    out: Loaded = set()
    for key, load in record.loaded_partitions.items():
        state = record.partitions.get(key)
        for f in state.files if state else []:
            # a mirror without a checksum (older records) means the manifest's version, as
            # WatermarkRecord.refresh reads it
            if f.key in load.files and load.md5.get(f.key, f.md5) == f.md5:
                out.add((f.key, f.md5))
    return out


def lost_files(
    s3: Any, table: TableConfig, pending: dict[str, list[FileEntry]]
) -> dict[str, list[str]]:
    """Of the unloaded files, those S3 no longer holds (one listing per partition)."""
    client = s3.client()
    lost: dict[str, list[str]] = {}
    for partition, files in pending.items():
        prefix = s3.layout.data_partition(table.schema, table.table, partition)
        there: set[str] = set()
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=s3.bucket, Prefix=prefix
        ):
            there.update(o["Key"] for o in page.get("Contents", []))
        gone = [f.key for f in files if f.key not in there]
        if gone:
            lost[partition] = gone
    return lost


def _held(record: WatermarkRecord, loaded: Loaded) -> dict[str, dict[str, FileEntry]]:
    """Per partition, the manifest files the ledger holds: what the load mirror must say."""
    out: dict[str, dict[str, FileEntry]] = {}
    for key, state in record.partitions.items():
        held = {f.key: f for f in state.files if (f.key, f.md5) in loaded}
        if held:
            out[key] = held
    return out


def mirror_ledger(
    store: Any, table: str, record: WatermarkRecord | None, loaded: Loaded
) -> WatermarkRecord | None:
    """Make the record's load mirror say what the ledger holds, where it does not: a run
    killed between its load commit and its record write leaves the ledger ahead of the
    mirror, and no later load of those (loaded) files would correct it. One
    compare-and-swap write when they differ, none when they agree."""

    def differs(rec: WatermarkRecord) -> bool:
        have = {k: set(s.files) for k, s in rec.loaded_partitions.items()}
        return {k: set(v) for k, v in _held(rec, loaded).items()} != have

    if record is None or not differs(record):
        return record

    def change(rec: WatermarkRecord) -> None:
        held = _held(rec, loaded)
        for key in set(rec.loaded_partitions) - set(held):
            del rec.loaded_partitions[key]
        for key, files in held.items():
            mirror = rec.loaded_partitions.get(key)
            if mirror is None or set(mirror.files) != set(files):
                rec.loaded_partitions[key] = LoadState(
                    files=sorted(files),
                    rows=sum(f.rows for f in files.values()),
                    md5={k: f.md5 for k, f in files.items()},
                )

    return store.update(table, change).record


def _ledger_if_any(warehouse: Any, table: TableConfig) -> Loaded | None:
    """The ledger's file versions for a --backup-only sync, None without a warehouse or when
    it cannot be reached (a backup does not need it: the record's load mirror stands in)."""
    if warehouse is None:
        return None
    try:
        return ledger_versions(warehouse, table.target_schema, table.target_table)
    except S3rsError:
        return None


def prepare(
    table: TableConfig,
    mysql: Any,
    warehouse: Any,
    s3: Any,
    store: Any,
    stages: tuple[str, ...],
) -> Prepared:
    """Plan a table's sync from the truth: the warehouse's ledger for what is loaded (asked
    once), S3 for what is extracted (only where files wait to be loaded), MySQL's index
    probes for what is new below the safety bound. Empty stretches are closed without a
    run (one watermark write) and runs are planned for the partitions with work only: a
    table with nothing new and nothing unloaded gets no run at all.

    A warehouse or MySQL that cannot be reached raises ConfigError before anything is
    written: a sync must never report "nothing to do" over a target it could not see."""
    backup_work: list[str] = []
    found = Scan([], [])
    bound = None
    held = False
    with ExitStack() as stack:
        # MySQL first: a misspelt column, a refused login or a zone mismatch stops the sync
        # before the ledger's truth is written into the record (exit 2 changes nothing)
        conn = stack.enter_context(mysql.connection()) if "backup" in stages else None
        if conn is not None:
            src = describe(conn, table)
            check_clock(conn, src)  # a zone mismatch stops here, before any probe or write
            sb = safety_bound(conn, table.lag, whole_days=src.cursor_is_date)
            bound = sb.upper
            held = any(b.started < sb.server_now - sb.lag for b in sb.blockers)
        record = store.read(table.name, fresh=True)
        loaded: Loaded = set()
        lost: dict[str, list[str]] = {}
        if "load" in stages:
            loaded = ledger_versions(warehouse, table.target_schema, table.target_table)
            lost = lost_files(s3, table, unloaded(record, loaded))
            if lost:
                record = forget_lost(store, table.name, lost)
            record = mirror_ledger(store, table.name, record, loaded)
        elif record is not None:
            # --backup-only: a file that waits to be loaded and was deleted (`s3clean
            # --force`) is the only copy of its rows, so its partition is read again now,
            # not at the next full sync. Which files wait is the ledger's to say (a target
            # dropped and re-created holds none of them, whatever the record's load mirror
            # says); without a warehouse to ask, the mirror (one it wrongly calls unloaded
            # is only read again: the ledger skips an unchanged version).
            truth = _ledger_if_any(warehouse, table)
            waiting = unloaded(record, mirrored(record) if truth is None else truth)
            lost = lost_files(s3, table, waiting)
            if lost:
                record = forget_lost(store, table.name, lost)
            if truth is not None:
                record = mirror_ledger(store, table.name, record, truth)
        if conn is not None:
            found = scan(conn, src, record, windows(time_windows(table)), bound)
    if found.empty:
        close_empty(store, table.name, found.empty)
        record = store.read(table.name)
    backup_work = found.work
    load_work = list(unloaded(record, loaded)) if "load" in stages else []
    plans = plan_work(table, record, stages, backup_work, load_work)
    return Prepared(plans, len(found.empty), found.probes, bound, lost, len(loaded), held)
