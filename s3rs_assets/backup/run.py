"""Stage 1's run: read a range of partitions in (cursor, pk) order, checkpoint as it goes.

The cost of a run follows the rows it reads, not the calendar it spans:

1. The safety bound `upper` is taken once per run, on the MySQL clock, before anything is
   planned (source.safety_bound); nothing at or above it is read by this run.
2. From each partition's resume position (its window start, or its cursor when partial)
   the next rows are planned with index-only queries: `plan_chunk` finds the end of the
   next N rows inside one partition, and where a partition runs out, one `first_row` probe
   finds the next row of the range and jumps over every empty partition before it.
3. Plans of several partitions are read together until a batch holds `chunk_rows` rows:
   one Spark job (`Extractor.read`) whose items are sub-ranges, each written as one object
   under its own partition's prefix, then verified in S3.
4. One compare-and-swap write of the watermark then moves every partition of the batch to
   its plan's end, closes the partitions read to their end (complete once the bound is past
   their window), and folds the empty ones into closed ranges: one write per batch, not
   per partition or per day.

So the stored cursor is never ahead of what is durably in S3, and a crash anywhere loses
at most the batch in flight, which the next run reads again into the same keys. A transient
error (a dropped MySQL connection, a deadlock) is retried where it happens (retry.py): a
query on a new connection, a failed Spark read by reading the batch in flight again. A
partition already complete when the run starts is read again from its start (a backfill);
a partial one resumes at its cursor. Another run that changed a partition since this run
saw it stops this one (WatermarkConflict) unless it wrote exactly the same files.
"""

from __future__ import annotations

import bisect
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from s3rs_assets import retry
from s3rs_assets.backup.extract import Extractor, Item
from s3rs_assets.cursor import ChunkPlan
from s3rs_assets.errors import WatermarkConflict
from s3rs_assets.retry import Retries
from s3rs_assets.source import first_row, plan_chunk
from s3rs_assets.watermark import FileEntry, PartitionState, Position, WatermarkRecord, utcnow

T = TypeVar("T")


@dataclass
class PartitionRun:
    """What one run did to one partition."""

    partition_key: str
    window_start: datetime
    window_end: datetime
    cursor_from: Position | None
    cursor_to: Position | None = None
    status: str = "partial"
    rows: int = 0
    files: list[FileEntry] = field(default_factory=list)
    chunks: int = 0
    seconds: float = 0.0
    recomputed: bool = False
    plan_seconds: float = 0.0
    read_seconds: float = 0.0
    checkpoint_seconds: float = 0.0


@dataclass
class _Slot:
    """One partition of the run, with this run's progress in it."""

    key: str
    start: datetime
    end: datetime
    position: Position  # where the next read in this partition starts
    recompute: bool
    recomputes: int  # of the prior state
    run: PartitionRun
    seen: tuple  # the partition's signature as this run last saw or wrote it
    reset: bool  # the next write replaces the partition's state (new, or recomputed)
    finished: str | None = None  # "complete" or "partial" once this run is done with it
    batch: list[tuple[ChunkPlan, list[FileEntry]]] = field(default_factory=list)

    @property
    def fresh(self) -> bool:
        """Reads from its window start: a probe from an earlier partition may jump here."""
        return self.position.pk is None and self.position.c == self.start


def signature(record: WatermarkRecord, key: str, start: datetime, end: datetime) -> tuple:
    """What identifies a partition's progress for compare-and-swap merging."""
    state = record.partitions.get(key)
    if state is not None:
        return (state.cursor.key() if state.cursor else None, state.status)
    return ("closed",) if record.closed_range(start, end) else (None, None)


class BackupRun:
    """Reads `windows` (consecutive partitions, oldest first) of one table up to `upper`."""

    def __init__(
        self,
        ex: Extractor,
        store: Any,
        *,
        windows: list[tuple[str, datetime, datetime]],
        upper: datetime,
        chunk_rows: int,
        run_id: str | None,
        row_budget: int | None = None,
        source_now: datetime | None = None,
        log: Callable[[str], None] = lambda _m: None,
        retries: Retries | None = None,
    ):
        self.ex, self.store = ex, store
        self.retries = retries if retries is not None else Retries()
        self.windows, self.upper, self.chunk_rows = windows, upper, chunk_rows
        self.run_id, self.budget, self.source_now, self.log = run_id, row_budget, source_now, log
        self.table = ex.table_name
        self.slots: list[_Slot] = []
        self.planned = 0  # rows planned so far (the --limit budget counts these)
        self.batches = 0
        self.skipped: list[str] = []  # partitions not reached: the row budget ran out

    # ------------------------------------------------------------------ the run

    def run(self) -> list[PartitionRun]:
        record = self.store.read(self.table, now=self.source_now) or WatermarkRecord.new(
            self.table
        )
        self.slots = [self._slot(record, *w) for w in self.windows]
        starts = [s.start for s in self.slots]
        pending: list[_Slot] = []  # slots with plans or closings not written yet
        rows = 0
        i = 0
        while i < len(self.slots):
            slot = self.slots[i]
            n = self._allowance(rows)
            if n <= 0:
                break
            if self.upper <= slot.start:
                break  # nothing at or after this window is below the bound
            hi = min(slot.end, self.upper)
            plan = None
            if slot.position.c < hi:
                t0 = time.monotonic()
                plan = self._query(
                    f"planning a chunk of {slot.key}",
                    functools.partial(
                        plan_chunk,
                        src=self.ex.src,
                        start=slot.position,
                        upper=hi,
                        rows=n,
                        parts=self.ex.parallelism,
                    ),
                )
                slot.run.plan_seconds += time.monotonic() - t0
            if plan is not None:
                slot.batch.append((plan, []))
                slot.position = plan.end
                rows += plan.rows
                self.planned += plan.rows
                if slot not in pending:
                    pending.append(slot)
            if plan is None or plan.rows < n:
                slot.finished = "complete" if self.upper >= slot.end else "partial"
                if slot not in pending:
                    pending.append(slot)
                i = self._jump(i, starts, pending)
            if rows >= self.chunk_rows:
                self._write(pending)
                pending, rows = [], 0
        if pending:
            self._write(pending)
        return self._results()

    def _allowance(self, rows_in_batch: int) -> int:
        n = self.chunk_rows - rows_in_batch
        if self.budget is not None:
            n = min(n, self.budget - self.planned)
        return n

    def _jump(self, i: int, starts: list[datetime], pending: list[_Slot]) -> int:
        """After slot i: the next slot with a row below the bound, closing the fresh, empty
        slots before it with one probe (a partial slot ends the stretch: it resumes at its
        own cursor)."""
        j = i + 1
        stretch_end = j
        while stretch_end < len(self.slots) and self.slots[stretch_end].fresh:
            stretch_end += 1
        if stretch_end == j:
            return j
        last = self.slots[stretch_end - 1]
        hi = min(last.end, self.upper)
        first = self.slots[j]
        row = self._query(
            f"probing from {first.key}",
            lambda c: first_row(c, self.ex.src, Position(c=first.start, pk=None), hi),
        )
        target = stretch_end if row is None else bisect.bisect_right(starts, row.c) - 1
        for empty in self.slots[j:target]:
            if self.upper <= empty.start:
                return len(self.slots)  # past the bound: the rest stays as it is
            empty.finished = "complete" if self.upper >= empty.end else "partial"
            pending.append(empty)
        return max(target, j)

    def _slot(self, record: WatermarkRecord, key: str, start: datetime, end: datetime) -> _Slot:
        prior = record.partitions.get(key)
        closed = prior is None and record.closed_range(start, end) is not None
        recompute = closed or (prior is not None and prior.status == "complete")
        resume = prior is not None and not recompute and prior.cursor is not None
        position = prior.cursor if resume else Position(c=start, pk=None)
        run = PartitionRun(
            key, start, end, prior.cursor if prior else None, recomputed=recompute
        )
        return _Slot(
            key=key,
            start=start,
            end=end,
            position=position,
            recompute=recompute,
            recomputes=prior.recomputes if prior else 0,
            run=run,
            seen=signature(record, key, start, end),
            reset=recompute or prior is None,
        )

    def _query(self, what: str, query: Callable[[Any], T]) -> T:
        """A MySQL query of the run, re-run on a new connection after a transient error."""
        return self.ex.mysql.run(f"{self.table}: {what}", query, self.retries, self.log)

    # ------------------------------------------------------------ read + write

    def _write(self, slots: list[_Slot]) -> None:
        """Read every planned item of `slots` in one Spark job, then checkpoint them all
        (and close the finished ones) with one compare-and-swap write."""
        items = [
            Item(s.key, r) for s in slots for plan, _ in s.batch for r in plan.ranges
        ]
        t0 = time.monotonic()
        files = (
            retry.call(
                lambda: self.ex.read(items),
                what=f"{self.table}: reading {len(items)} range(s)",
                retries=self.retries,
                backoff=retry.SPARK_READ_BACKOFF,
                log=self.log,
            )
            if items
            else []
        )
        read_seconds = time.monotonic() - t0
        it = iter(files)
        for s in slots:
            for plan, got in s.batch:
                got.extend(f for f in (next(it) for _ in plan.ranges) if f is not None)
        t1 = time.monotonic()
        record = self.store.update(self.table, lambda rec: self._apply(rec, slots)).record
        checkpoint = time.monotonic() - t1
        self.batches += 1
        batch_rows = sum(p.rows for s in slots for p, _ in s.batch) or 1
        for s in slots:
            got = [f for _, fs in s.batch for f in fs]
            share = sum(p.rows for p, _ in s.batch) / batch_rows
            s.run.read_seconds += read_seconds * share
            s.run.checkpoint_seconds += checkpoint * share
            s.run.rows += sum(f.rows for f in got)
            s.run.files.extend(got)
            s.run.chunks += len(s.batch)
            s.seen = signature(record, s.key, s.start, s.end)
            s.reset = False
            for plan, fs in s.batch:
                read = sum(f.rows for f in fs)
                if read != plan.rows:
                    self.log(
                        f"{self.table} {s.key}: chunk planned {plan.rows} rows, read {read} "
                        "(rows changed while reading; they are picked up by their new cursor "
                        "value)"
                    )
            if s.batch:
                self.log(
                    f"{self.table} {s.key}: chunk {s.run.chunks} {s.run.rows} rows in "
                    f"{read_seconds:.1f}s (plan {s.run.plan_seconds:.2f}s, checkpoint "
                    f"{s.run.checkpoint_seconds:.2f}s so far), cursor -> {s.position}"
                )
            s.batch = []

    def _apply(self, rec: WatermarkRecord, slots: list[_Slot]) -> None:
        """The checkpoint as a change function (it may run again after a lost race)."""
        now = utcnow()
        for s in slots:
            current = signature(rec, s.key, s.start, s.end)
            if current != s.seen and not self._same_progress(rec, s):
                raise WatermarkConflict(
                    f"{self.table} partition {s.key} was changed by another run (now "
                    f"{current}, this run saw {s.seen}); stopping without overwriting its "
                    "progress"
                )
            state = rec.partitions.get(s.key)
            if s.reset or state is None:
                rec.reopen(s.start, s.end)
                state = PartitionState(
                    window_start=s.start,
                    window_end=s.end,
                    recomputes=s.recomputes + 1 if s.recompute else s.recomputes,
                )
            written = [f for _, fs in s.batch for f in fs]
            names = {f.key for f in written}
            state.files = [f for f in state.files if f.key not in names] + written
            load = rec.loaded_partitions.get(s.key)
            if load is not None:  # a key rewritten with other content is not loaded yet
                fresh = {f.key for f in written if load.md5.get(f.key) != f.md5}
                load.files = [k for k in load.files if k not in fresh]
            if s.batch:
                state.cursor = s.batch[-1][0].end
            state.status = "complete" if s.finished == "complete" else "partial"
            state.run_id = self.run_id
            state.updated_at = now
            if state.status == "complete" and not state.files and not s.batch:
                rec.close_empty(s.key, s.start, s.end)
            else:
                rec.partitions[s.key] = state

    def _same_progress(self, rec: WatermarkRecord, s: _Slot) -> bool:
        """Another run wrote exactly what this one is about to (same end, same objects with
        the same checksums): compatible, the two merged."""
        state = rec.partitions.get(s.key)
        if state is None or not s.batch or state.cursor is None:
            return False
        if state.cursor.key() != s.batch[-1][0].end.key():
            return False
        theirs = {f.key: f.md5 for f in state.files}
        ours = [f for _, fs in s.batch for f in fs]
        return all(theirs.get(f.key) == f.md5 for f in ours)

    def _results(self) -> list[PartitionRun]:
        out = []
        budget_spent = self.budget is not None and self.planned >= self.budget
        for s in self.slots:
            r = s.run
            if budget_spent and s.finished is None and not r.chunks:
                self.skipped.append(s.key)
                continue
            r.status = s.finished or ("partial" if r.chunks else r.status)
            r.cursor_to = s.position if r.chunks else r.cursor_from
            r.seconds = r.plan_seconds + r.read_seconds + r.checkpoint_seconds
            out.append(r)
        return out
