"""What `s3rs sync` shows while a run executes: a live line on a terminal, log lines
otherwise, the root cause of a failed step (the s3rs error, not Dagster's wrapper), and
after the run where its time went (`RunTimings`): the rate shown is the rate of the work,
with Dagster's set-up and Spark's start-up shown apart, never folded into it."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from s3rs_assets import logs
from s3rs_assets.config import TableConfig
from s3rs_assets.names import INTERRUPTED_METADATA_KEY, RETRIES_METADATA_KEY, metadata_facts
from s3rs_assets.watermark import WatermarkRecord
from s3rs_assets.watermark.archive import expand, s3_loader

log = logging.getLogger("s3rs.cli")

SYNC_TAG = "s3rs/cli_sync"  # unique per (command, table): finds the run while it executes


def failure_reasons(result: Any) -> list[str]:
    """One line per failed step: the innermost cause (the s3rs error), not Dagster's wrapper."""
    out = []
    try:
        for ev in result.get_step_failure_events():
            err = ev.step_failure_data.error
            while err is not None and err.cause is not None:
                err = err.cause
            msg = ((err.message if err else "") or "step failed").strip()
            out.append(f"{ev.step_key}: {msg.splitlines()[0]}")
    except Exception:  # noqa: BLE001 - best effort; the UI has the full story
        pass
    return out[:5]


def interrupted(result: Any) -> bool:
    """Whether the run stopped on an interrupt: a step failed by `stage_results.dagster_step`
    on one, or by Dagster itself (a signal it held until the next step began)."""
    with contextlib.suppress(Exception):  # best effort: a failed run is reported anyway
        for ev in result.get_step_failure_events():
            data = ev.step_failure_data
            user = data.user_failure_data
            if (user is not None and INTERRUPTED_METADATA_KEY in (user.metadata or {})) or (
                getattr(data.error_source, "value", None) == "INTERRUPT"
            ):
                return True
    return False


def run_retries(result: Any) -> int:
    """How many retries a run needed: the `retries` metadata of its materializations (the
    transient errors retried inside the steps, and Dagster's retries of those steps), or,
    when no step got that far, the Dagster step retries in its event log."""
    total, found = 0, False
    with contextlib.suppress(Exception):  # best effort: a count for people
        for ev in result.get_asset_materialization_events():
            value = metadata_facts(ev.materialization.metadata).get(RETRIES_METADATA_KEY)
            if value is not None:
                total += int(value)
                found = True
        if not found:
            total = sum(
                1 for ev in result.all_events if ev.event_type_value == "STEP_UP_FOR_RETRY"
            )
    return total


@dataclass
class RunTimings:
    """Where a sync run's time went, so its speed is the speed of the work: Dagster's
    set-up (before the first step), Spark's start-up, reading (the backup step less Spark's
    start-up), loading, and the rest (checks, Dagster between steps)."""

    total: float
    dagster_setup: float | None = None
    spark_startup: float | None = None
    reading: float | None = None
    rows_read: int = 0
    loading: float | None = None
    rows_loaded: int = 0

    @property
    def rest(self) -> float:
        known = (self.dagster_setup, self.spark_startup, self.reading, self.loading)
        return max(0.0, self.total - sum(x for x in known if x))

    def rate(self, rows: int, seconds: float | None) -> float | None:
        return rows / seconds if rows and seconds and seconds > 0 else None

    def line(self, table: str) -> str:
        """`T: 1,000 rows read in 3.0 s (333 rows/s), ...; 26.7 s in all: Dagster set-up
        3.1 s, Spark start-up 20.6 s, ...`"""
        work = []
        if self.reading is not None:
            rate = self.rate(self.rows_read, self.reading)
            work.append(
                f"{self.rows_read:,} rows read in {self.reading:.1f} s"
                + (f" ({rate:,.0f} rows/s)" if rate else "")
            )
        if self.loading is not None:
            rate = self.rate(self.rows_loaded, self.loading)
            work.append(
                f"{self.rows_loaded:,} rows loaded in {self.loading:.1f} s"
                + (f" ({rate:,.0f} rows/s)" if rate else "")
            )
        apart = [
            f"{what} {secs:.1f} s"
            for what, secs in (
                ("Dagster set-up", self.dagster_setup),
                ("Spark start-up", self.spark_startup),
                ("checks and the rest", self.rest),
            )
            if secs is not None
        ]
        return (
            f"{table}: {', '.join(work) or 'nothing read or loaded'}; "
            f"{self.total:.1f} s in all: {', '.join(apart)}"
        )

    def fields(self) -> dict[str, Any]:
        return {
            "seconds": round(self.total, 3),
            "rows": self.rows_read,
            "rows_per_second": round(self.rate(self.rows_read, self.reading) or 0, 1),
            "dagster_setup_seconds": _round(self.dagster_setup),
            "spark_startup_seconds": _round(self.spark_startup),
            "read_seconds": _round(self.reading),
            "load_seconds": _round(self.loading),
            "rows_loaded": self.rows_loaded,
        }


def _round(x: float | None) -> float | None:
    return round(x, 3) if x is not None else None


def _value(md: Any, key: str) -> Any:
    v = md.get(key)
    return getattr(v, "value", v)


def run_timings(result: Any, monitor: SyncMonitor) -> RunTimings:
    """The run's timings from its materialization metadata (`run_seconds`, `run_rows`,
    `spark_startup_seconds` on the run's last partition) and the step starts the monitor
    saw in the event log. Best effort: what is unknown stays None."""
    t = RunTimings(total=time.time() - monitor.started_at)
    if monitor.step_starts:
        t.dagster_setup = max(0.0, min(monitor.step_starts.values()) - monitor.started_at)
    with contextlib.suppress(Exception):  # a summary for people; never fails the sync
        for ev in result.get_asset_materialization_events():
            mat = ev.materialization
            md = metadata_facts(mat.metadata)  # the run's figures sit in `details`
            seconds = _value(md, "run_seconds")
            if seconds is None:
                continue  # not the run's last partition
            if mat.asset_key.path[-1] == "s3_parquet":
                spark = float(_value(md, "spark_startup_seconds") or 0.0)
                t.spark_startup = spark
                t.reading = max(0.0, float(seconds) - spark)
                t.rows_read = int(_value(md, "run_rows") or 0)
            else:
                t.loading = float(seconds)
                t.rows_loaded = int(_value(md, "run_rows_staged") or 0)
    return t


#: a backup's chunk line; one log entry may hold several (BackupRun._note): the last wins
_CHUNK_MSG = re.compile(
    r"^(?P<table>\S+) (?P<partition>\S+): chunk (?P<chunk>\d+) ", re.MULTILINE
)


_READ = object()  # SyncMonitor(base=...) not given: read it from S3
#: the events that follow a write of the record by the run: a stage's output stored (its
#: side closed, the copies written), a step failed (the failure recorded); every other
#: write of the run (a chunk checkpoint, a recovery) is followed by a log message
_RECORD_MOVED = frozenset({"HANDLED_OUTPUT", "STEP_FAILURE", "STEP_SUCCESS"})


class SyncMonitor:
    """Follows one table's run while `execute_job` runs it in this thread.

    Progress comes from two places, polled every half second from a daemon thread:

    * the watermark primary in S3 (rows per partition, cursor, which partition moves):
      read raw, never through recovery, so watching cannot change anything; read only when
      the event log brought a log message or a stage's end since the last read (every
      chunk checkpoint is followed by its "chunk N" message, every stage's record write by
      its HANDLED_OUTPUT or failure; `_RECORD_MOVED`), and once more at `stop` (`final`):
      Dagster's bookkeeping between them costs no GET;
    * the run's Dagster event log (found by the run's unique SYNC_TAG): step starts and
      failures, and the chunk numbers of the backup's log messages. When the runner lets
      the CLI silence Dagster's console logger, these messages are re-emitted through the
      `s3rs.run` logger (so in the chosen format, through the redaction filter).

    On a terminal it redraws one status line; otherwise it logs a `progress` line per
    chunk checkpoint.
    """

    #: seconds between polls
    INTERVAL = 0.5

    def __init__(
        self,
        table: TableConfig,
        stages: tuple[str, ...],
        inst: Any,
        s3: Any,
        token: str,
        *,
        tty: bool,
        interval: float | None = None,
        base: Any = _READ,
    ):
        """`base`: the record before the run when the caller holds it (`s3rs sync`: its
        store's answer after planning), else read from S3 here."""
        self.table = table
        self.stages = stages
        self.inst = inst
        self.s3 = s3
        self.token = token
        self.tty = tty
        self.interval = self.INTERVAL if interval is None else interval
        self.echo_events = True  # runner.execute silences Dagster's own console logger
        self.run_id: str | None = None
        self._cursor: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="s3rs-sync-monitor", daemon=True)
        self._client = s3.client()
        self._key = s3.layout.watermark_primary(table.name)
        self._base = self._read() if base is _READ else base
        #: the record read at `stop` (after the run), None when it could not be read
        self.final: WatermarkRecord | None = None
        self._news = True  # entries came from the event log since the last S3 read
        self._t0 = time.monotonic()
        self._last: tuple | None = None
        self._chunk = 0
        self._partition: str | None = None
        self._first: tuple[float, int] | None = None
        self._drawn = False
        self.run_log = logging.getLogger("s3rs.run")
        self.progress_log = logging.getLogger("s3rs.progress")
        self.snapshots: list[dict[str, Any]] = []
        #: wall-clock (time.time) start of `execute_job` and of each step: Dagster's set-up
        #: is the time before the first step
        self.started_at = time.time()
        self.step_starts: dict[str, float] = {}

    def start(self) -> None:
        self.started_at = time.time()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._poll(final=True)  # the last events and the final counts
        self._clear()

    # --------------------------------------------------------------------- sources

    def _read(self) -> WatermarkRecord | None:
        try:
            body = self._client.get_object(Bucket=self.s3.bucket, Key=self._key)["Body"].read()
            rec = WatermarkRecord.from_json(body, table_name=self.table.name)
            # old partitions may be folded into an archive (read once: it is immutable)
            return expand(rec, s3_loader(self._client, self.s3.bucket))
        except Exception:  # noqa: BLE001 - missing or mid-write: keep the last view
            return None

    def _find_run(self) -> None:
        import dagster as dg

        runs = self.inst.get_runs(filters=dg.RunsFilter(tags={SYNC_TAG: self.token}), limit=1)
        if runs:
            self.run_id = runs[0].run_id
            self._t0 = time.monotonic()

    def _events(self) -> None:
        if self.run_id is None:
            return
        while True:
            conn = self.inst.get_records_for_run(self.run_id, cursor=self._cursor, limit=500)
            for rec in conn.records:
                entry = rec.event_log_entry
                ev = entry.dagster_event
                if ev is None or ev.event_type_value in _RECORD_MOVED:
                    self._news = True
                self._event(entry)
            self._cursor = conn.cursor
            if not conn.has_more:
                return

    def _event(self, entry: Any) -> None:
        msg = entry.user_message or ""
        ev = entry.dagster_event
        for m in _CHUNK_MSG.finditer(msg):
            if m["table"] == self.table.name:
                self._chunk, self._partition = int(m["chunk"]), m["partition"]
        if ev is not None and ev.event_type_value == "STEP_START" and ev.step_key:
            self.step_starts.setdefault(ev.step_key, entry.timestamp)
        if not self.echo_events:
            return
        extra = {"table": self.table.name, "run_id": self.run_id}
        if ev is None:
            self._log(self.run_log, entry.level, msg, event="run_log", **extra)
            return
        kind = ev.event_type_value
        # Dagster's own event lines (step started, finished, value materialized) are its
        # DEBUG events: shown with `s3rs -v`; the run's own messages stay at their level.
        if kind in ("STEP_START", "STEP_SUCCESS", "RUN_START", "RUN_SUCCESS"):
            self._log(
                self.run_log,
                logging.DEBUG,
                msg or kind.lower(),
                event=kind.lower(),
                stage=ev.step_key,
                **extra,
            )
        elif kind in ("STEP_FAILURE", "RUN_FAILURE", "ENGINE_EVENT") and entry.level >= 40:
            self._log(
                self.run_log,
                logging.ERROR,
                msg or kind.lower(),
                event=kind.lower(),
                stage=ev.step_key,
                **extra,
            )
        elif kind == "ASSET_MATERIALIZATION":
            self._log(
                self.run_log,
                logging.DEBUG,
                msg or "materialized",
                event="asset_materialization",
                stage=ev.step_key,
                **extra,
            )

    # ------------------------------------------------------------------- progress

    def snapshot(self, rec: WatermarkRecord | None) -> dict[str, Any] | None:
        if rec is None or self.run_id is None:
            return None
        base = self._base
        rows = 0
        newest: tuple[datetime, str] | None = None
        for key, p in rec.partitions.items():
            if p.run_id != self.run_id:
                continue
            before = base.partitions.get(key) if base else None
            start = 0 if before is None or p.recomputes > before.recomputes else before.rows
            rows += max(0, p.rows - start)
            if newest is None or p.updated_at > newest[0]:
                newest = (p.updated_at, key)
        loaded = rec.redshift_rows_loaded - (base.redshift_rows_loaded if base else 0)
        partition = newest[1] if newest else self._partition
        state = rec.partitions.get(partition) if partition else None
        now = time.monotonic()
        seconds = max(now - self._t0, 1e-6)
        if self._first is None and rows:
            self._first = (now, rows)
        rate: float | None = None
        if self._first is not None and rows > self._first[1] and now - self._first[0] > 0.2:
            # Rows per second of reading, between checkpoints: before the first one the
            # time is mostly Dagster's set-up and Spark's start-up, and a rate over it would
            # be false ("45 rows/s" for a run that read 1,000 rows in 3 s). Until there are
            # two, no rate is shown; the summary after the run gives the true one.
            rate = (rows - self._first[1]) / (now - self._first[0])
        return {
            "table": self.table.name,
            "partition": partition,
            "chunk": self._chunk or None,
            "rows": rows,
            "rows_per_second": round(rate, 1) if rate is not None else None,
            "rows_loaded": max(0, loaded),
            "cursor": str(state.cursor) if state and state.cursor else None,
            "status": state.status if state else None,
            "seconds": round(seconds, 1),
        }

    def _poll(self, final: bool = False) -> None:
        try:
            if self.run_id is None:
                self._find_run()
            self._events()
        except Exception:  # noqa: BLE001 - the display must never break the sync
            log.debug("sync monitor: event poll failed", exc_info=True)
            self._news = True  # unknown: read S3 as before
        if not (final or self._news):
            return  # the run wrote nothing to the event log: the record has not moved
        self._news = False
        rec = self._read()
        if final:
            self.final = rec
        snap = self.snapshot(rec)
        if snap is None:
            return
        sig = (snap["partition"], snap["cursor"], snap["rows"], snap["rows_loaded"], snap["chunk"])
        if sig == self._last:
            if self.tty:
                self._draw(snap)
            return
        self._last = sig
        self.snapshots.append(snap)
        if self.tty:
            self._draw(snap)
        elif snap["rows"] or snap["rows_loaded"]:
            parts = [f"partition {snap['partition']}"]
            if snap["chunk"]:
                parts.append(f"chunk {snap['chunk']}")
            parts.append(f"{snap['rows']:,} rows")
            if snap["rows_per_second"] is not None:
                parts.append(f"{snap['rows_per_second']:,.0f} rows/s")
            if "load" in self.stages:
                parts.append(f"{snap['rows_loaded']:,} rows loaded")
            if snap["cursor"]:
                parts.append(f"cursor {snap['cursor']}")
            self._log(
                self.progress_log,
                logging.INFO,
                f"{self.table.name}: " + ", ".join(parts),
                event="progress",
                table=snap["table"],
                partition=snap["partition"],
                chunk=snap["chunk"],
                rows=snap["rows"],
                rows_per_second=snap["rows_per_second"],
                seconds=snap["seconds"],
                cursor=snap["cursor"],
                run_id=self.run_id,
            )

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._poll()

    def _log(self, logger: logging.Logger, level: int, msg: str, **extra: Any) -> None:
        self._clear()
        logger.log(level, msg, extra={k: v for k, v in extra.items() if v is not None})

    def _draw(self, snap: dict[str, Any]) -> None:
        rate = snap["rows_per_second"]
        line = (
            f"{self.table.name}  {snap['partition'] or '-'}  chunk {snap['chunk'] or '-'}  "
            f"{snap['rows']:,} rows  "
            + (f"{rate:,.0f} rows/s" if rate is not None else "- rows/s")
        )
        if "load" in self.stages:
            line += f"  loaded {snap['rows_loaded']:,}"
        sys.stderr.write("\r\x1b[2K" + logs.redact(line))
        sys.stderr.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
            self._drawn = False
