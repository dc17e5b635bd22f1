"""Stage 1's run: read a range of partitions in (cursor, pk) order, checkpoint as it goes.

The cost of a run follows the rows it reads, not the calendar it spans:

1. The safety bound `upper` is taken once per run, on the MySQL clock, before anything is
   planned (source.safety_bound); nothing at or above it is read by this run.
2. From each partition's resume position (its window start, or its cursor when partial)
   the next rows are planned with index-only queries: `plan_chunk` finds the end of the
   next N rows inside one partition (and, where the key follows the cursor, the span of
   primary key each sub-range lies in), and where a partition runs out, one `first_row`
   probe finds the next row of the range and jumps over every empty partition before it.
3. Plans of several partitions are read together until a batch holds `chunk_rows` rows:
   one Spark job (`Extractor.read`) whose items are sub-ranges, each written as one object
   under its own partition's prefix, then verified in S3.
4. One compare-and-swap write of the watermark then moves every partition of the batch to
   its plan's end, closes the partitions read to their end (complete once the bound is past
   their window), and folds the empty ones into closed ranges: one write per batch, not
   per partition or per day.

5. The read of a batch overlaps the driver's work around it: while Spark reads batch k+1,
   the driver verifies and checkpoints batch k and plans batch k+2 (one read in flight at a
   time, so memory stays bounded by one batch). Checkpoints still happen one at a time, in
   order, each only after its batch's objects were verified in S3; a read that fails
   surfaces after the checkpoint of the batch before it.

So the stored cursor is never ahead of what is durably in S3, and a crash anywhere loses
at most the batches in flight (one being read, one being checkpointed), which the next run
reads again into the same keys. A transient
error (a dropped MySQL connection, a deadlock) is retried where it happens (retry.py): a
query on a new connection, a failed Spark read by reading the batch in flight again. A
partition already complete when the run starts is read again from its start (a backfill);
a partial one resumes at its cursor. Another run that changed a partition since this run
saw it stops this one (WatermarkConflict) unless it wrote exactly the same files.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from s3rs_assets import retry, stopping
from s3rs_assets.backup.extract import Extractor, Item
from s3rs_assets.cursor import ChunkPlan
from s3rs_assets.errors import WatermarkConflict
from s3rs_assets.retry import Retries
from s3rs_assets.source import first_row, plan_chunk
from s3rs_assets.watermark import FileEntry, PartitionState, Position, WatermarkRecord, utcnow

T = TypeVar("T")

#: Seconds between the backup's progress entries in the run's log. Every Dagster log entry
#: is an event committed to the run's SQLite event log (~5 ms of the driver's CPU each on
#: a quiet machine, 20-40 ms of its thread under load), and a chunk takes 0.4-1.4 s with
#: Spark warm (benchmarks/results/2026-11-28-evt28.md): a checkpoint's lines wait
#: until this long after the run's start or its last entry and go out together, the last
#: ones with the run's summary (an increment's backup writes one entry). Every chunk's line
#: is still written; a run whose chunks each take longer than this logs every checkpoint
#: at once. Read when a BackupRun is made (a test may set it).
LOG_EVERY = 2.0


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


@dataclass
class _Part:
    """One slot's share of a batch, detached from the slot when the batch is read (planning
    goes on in the slot while the batch is read and checkpointed)."""

    slot: _Slot
    batch: list[tuple[ChunkPlan, list[FileEntry]]]
    finished: str | None


@dataclass
class _Batch:
    """A batch whose read was started and whose checkpoint is still to come."""

    parts: list[_Part]
    items: list[Item]
    future: Future


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
        overlap: bool = True,
        log_every: float | None = None,
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
        #: read batch k+1 while batch k is checkpointed and k+2 planned (False: one at a time)
        self.overlap = overlap
        self._inflight: _Batch | None = None
        self._pool: ThreadPoolExecutor | None = None
        self.log_every = LOG_EVERY if log_every is None else log_every
        self._held: list[str] = []  # checkpoint lines not logged yet (`_note`)
        self._logged_at = 0.0  # monotonic time of the run's start or its last entry

    # ------------------------------------------------------------------ the run

    def run(self) -> list[PartitionRun]:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="s3rs-read")
        self._logged_at = time.monotonic()
        try:
            self._plan_all()
            self._finish()
        except BaseException:
            with contextlib.suppress(Exception):  # the run's own error is the one to raise
                self._flush_log()  # how far the failed run got, before its error
            raise
        finally:
            inflight, self._inflight = self._inflight, None
            if inflight is not None:  # a failure with a read in flight: let it end first
                inflight.future.exception()
            self._pool.shutdown(wait=True)
            self._pool = None
        results = self._results()
        self._log_summary(results)
        return results

    def _plan_all(self) -> None:
        """Plan the run's batches in order, handing each to `_write` as it fills."""
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
                        read=True,
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
        """A planning query of the run, re-run on a new connection after a transient error.
        When it fails for good (a key date refused, MySQL gone), the batch being read is
        checkpointed first if its read succeeds: every batch before it is checkpointed
        already (`_write`), so the next run goes on after it instead of reading it again."""
        try:
            return self.ex.mysql.run(f"{self.table}: {what}", query, self.retries, self.log)
        except Exception:
            try:
                self._finish()
            except Exception as e:  # noqa: BLE001 - the planning error is the one to raise
                self.log(f"{self.table}: the batch in flight is not checkpointed: {e}")
            raise

    # ------------------------------------------------------------ read + write

    def _write(self, slots: list[_Slot]) -> None:
        """Start reading every planned item of `slots` (one Spark job, in the read thread),
        then checkpoint the batch before it while this one is read. With `overlap` off the
        batch is also checkpointed before returning (the serial path)."""
        if stopping.STOP.is_set():  # asked to stop: keep what is read, start no more
            self._finish()
            stopping.check()
        parts = [_Part(s, s.batch, s.finished) for s in slots]
        for s in slots:
            s.batch = []
        items = [Item(p.slot.key, r) for p in parts for plan, _ in p.batch for r in plan.ranges]
        prev, self._inflight = self._inflight, None
        prev_files = prev.future.result() if prev is not None else None  # in order
        assert self._pool is not None
        self._inflight = _Batch(parts, items, self._pool.submit(self._read, items))
        if prev is not None:
            self._checkpoint(prev, prev_files)
        if not self.overlap:
            self._finish()

    def _finish(self) -> None:
        """Wait for the read in flight and checkpoint it."""
        prev, self._inflight = self._inflight, None
        if prev is not None:
            self._checkpoint(prev, prev.future.result())

    def _read(self, items: list[Item]) -> tuple[list[FileEntry | None], float]:
        """The batch's Spark job (retried after a transient failure); runs in the read
        thread. Returns the verified files, one per item, and the seconds it took."""
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
        return files, time.monotonic() - t0

    def _checkpoint(
        self, batch: _Batch, read: tuple[list[FileEntry | None], float] | None
    ) -> None:
        """Move the batch's partitions to their plans' ends (and close the finished ones)
        with one compare-and-swap write: its objects are verified in S3 by now."""
        assert read is not None
        files, read_seconds = read
        parts = batch.parts
        it = iter(files)
        for p in parts:
            for plan, got in p.batch:
                got.extend(f for f in (next(it) for _ in plan.ranges) if f is not None)
        t1 = time.monotonic()
        record = self.store.update(self.table, lambda rec: self._apply(rec, parts)).record
        checkpoint = time.monotonic() - t1
        self.batches += 1
        batch_rows = sum(plan.rows for p in parts for plan, _ in p.batch) or 1
        # one log line per partition of the checkpoint, logged together (`_note`): each
        # entry is an event in Dagster's storage, and a catch-up batch may span 73 data days
        lines: list[str] = []
        for p in parts:
            s = p.slot
            got = [f for _, fs in p.batch for f in fs]
            share = sum(plan.rows for plan, _ in p.batch) / batch_rows
            s.run.read_seconds += read_seconds * share
            s.run.checkpoint_seconds += checkpoint * share
            s.run.rows += sum(f.rows for f in got)
            s.run.files.extend(got)
            s.run.chunks += len(p.batch)
            s.seen = signature(record, s.key, s.start, s.end)
            s.reset = False
            for plan, fs in p.batch:
                read_rows = sum(f.rows for f in fs)
                if read_rows != plan.rows:
                    lines.append(
                        f"{self.table} {s.key}: chunk planned {plan.rows} rows, read "
                        f"{read_rows} (rows changed while reading; they are picked up by their "
                        "new cursor value)"
                    )
            if p.batch:
                ranges = [r for plan, _ in p.batch for r in plan.ranges]
                spans = sum(r.span is not None for r in ranges)
                by_key = f", {spans} of {len(ranges)} sub-range(s) by primary key" if spans else ""
                lines.append(
                    f"{self.table} {s.key}: chunk {s.run.chunks} {s.run.rows} rows in "
                    f"{read_seconds:.1f}s (plan {s.run.plan_seconds:.2f}s, checkpoint "
                    f"{s.run.checkpoint_seconds:.2f}s so far{by_key}), cursor -> "
                    f"{p.batch[-1][0].end}"
                )
        self._note(lines)

    # ------------------------------------------------------------------ the log

    def _note(self, lines: list[str]) -> None:
        """A checkpoint's lines: logged now when `log_every` seconds passed since the last
        entry (or the run's start), else held for the next entry."""
        self._held.extend(lines)
        now = time.monotonic()
        if now - self._logged_at >= self.log_every:
            self._flush_log()

    def _flush_log(self) -> None:
        if self._held:
            self.log("\n".join(self._held))
            self._held = []
            self._logged_at = time.monotonic()

    def _log_summary(self, runs: list[PartitionRun]) -> None:
        """The held checkpoint lines, one line per partition that held rows or is still
        open, then a summary line, in one entry: a catch-up over 73 data days would
        otherwise write 74 events."""
        active = [r for r in runs if r.rows or r.status != "complete" or r.recomputed]
        lines = self._held + [
            f"{self.table} {r.partition_key}: {r.status}, {r.rows} rows in {len(r.files)} "
            f"files, cursor {r.cursor_to}"
            for r in active
        ]
        lines.append(
            f"{self.table}: {len(runs)} partition(s), {len(runs) - len(active)} complete and "
            f"empty, {self.batches} checkpoint write(s)"
        )
        self._held = []
        self.log("\n".join(lines))

    def _apply(self, rec: WatermarkRecord, parts: list[_Part]) -> None:
        """The checkpoint as a change function (it may run again after a lost race)."""
        now = utcnow()
        for p in parts:
            s = p.slot
            current = signature(rec, s.key, s.start, s.end)
            if current != s.seen and not self._same_progress(rec, p):
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
            written = [f for _, fs in p.batch for f in fs]
            names = {f.key for f in written}
            state.files = [f for f in state.files if f.key not in names] + written
            load = rec.loaded_partitions.get(s.key)
            if load is not None:  # a key rewritten with other content is not loaded yet
                fresh = {f.key for f in written if load.md5.get(f.key) != f.md5}
                load.files = [k for k in load.files if k not in fresh]
            if p.batch:
                state.cursor = p.batch[-1][0].end
            state.status = "complete" if p.finished == "complete" else "partial"
            state.run_id = self.run_id
            state.updated_at = now
            if state.status == "complete" and not state.files and not p.batch:
                rec.close_empty(s.key, s.start, s.end)
            else:
                rec.partitions[s.key] = state

    def _same_progress(self, rec: WatermarkRecord, p: _Part) -> bool:
        """Another run wrote exactly what this one is about to (same end, same objects with
        the same checksums): compatible, the two merged."""
        state = rec.partitions.get(p.slot.key)
        if state is None or not p.batch or state.cursor is None:
            return False
        if state.cursor.key() != p.batch[-1][0].end.key():
            return False
        theirs = {f.key: f.md5 for f in state.files}
        ours = [f for _, fs in p.batch for f in fs]
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
