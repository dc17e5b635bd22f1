"""Where watermark records live in S3, and the only code that writes them.

Every change is a read-modify-write through `update()`, made compare-and-swap with S3
conditional writes: `If-None-Match: *` when the primary does not exist yet, `If-Match:
<etag>` otherwise. A writer that loses the race (412, or 409 from a concurrent conditional
write; a 404 on If-Match means the primary was deleted meanwhile) drops what it knew,
re-reads and re-applies its change function to the newer record, so two runs working on
different partitions merge; the change function itself raises WatermarkConflict when the
newer record is incompatible with what the run did.

Keys come from `s3rs_assets.layout`: the primary, a daily copy per UTC date and a session
copy per Dagster run id (`copies.py`).

Costs are paid once per run, not per checkpoint. A store is the view of one run (one CLI
command, one sensor tick): it keeps, per table, the record and ETag of its own last read
or write of the primary. Its first `update()` of a table reads the primary once; every
later one is a single conditional PUT (`If-Match` the ETag it holds), no GET. `read()`
answers from the same memory once the store has read or written the table; `read(...,
fresh=True)`, `recover()` and `forget()` go back to S3. Nothing is lost by trusting it:
any other writer changes the ETag, so our next PUT fails with 412 and we re-read.

Writes are verified without reading them back: the body goes with its Content-MD5 (S3
rejects a corrupted one) and the ETag S3 returns must be that MD5. S3 calls are retried by
botocore alone (standard mode, set on the S3Resource's client); the store adds no retry
loop, only the compare-and-swap re-apply.

Copies are not written on every update: `write_copies(table)` copies the current record,
byte-identical to the primary, to the daily and session keys. The IO manager calls it at
the end of each stage's materialization, the assets when a stage fails, the CLI after a
manual change, and recovery after it restores a primary. So the copies are at most one
run behind the primary. A failed copy is logged and reported, it never fails the run.
`update()` returns what it did (`UpdateResult`: the saved record, the `SaveInfo`, the
`RecoveryReport` when its read had to recover): nothing travels on the side.

Reading from S3 validates (schema version, types, counts, consistency with the manifests,
cursor not ahead of the source clock); every write validates too. Reading never writes: a
missing or invalid primary is answered with the copy recovery would restore, and restoring
it is the explicit `recover()` (recovery.py); the first `update()` of a run recovers too,
since it writes anyway.

A long record is stored folded: its old complete, loaded partitions live in an immutable
archive object it references, written before the record's compare-and-swap and merged back
on every read (`archive.py`). Everything above sees and writes the whole record.

The store is split by what each part does: `objects.py` (S3 helpers, memory, the verified
primary write), `copies.py` (daily and session copies), `recovery.py` (the recovery order),
`archive.py` (folding a long record), this module (reads and compare-and-swap updates).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime

from s3rs_assets.errors import WatermarkConflict, WatermarkError
from s3rs_assets.layout import check_table
from s3rs_assets.watermark.objects import (
    CAS_ATTEMPTS,
    LOCATIONS,
    S3_ERRORS,
    EventLogFallback,
    _Known,
    _Lost,
    default_session_id,
    is_race,
    log,
)
from s3rs_assets.watermark.record import WatermarkRecord
from s3rs_assets.watermark.recovery import Recovery
from s3rs_assets.watermark.reports import RecoveryReport, UpdateResult

__all__ = [
    "CAS_ATTEMPTS",
    "LOCATIONS",
    "S3_ERRORS",
    "EventLogFallback",
    "WatermarkStore",
    "default_session_id",
    "is_race",
    "require",
]


class WatermarkStore(Recovery):
    """Read, verify, recover and compare-and-swap watermark records for one bucket/layout.

    Build it with `io_manager.store_for` (the one builder). `session_id` names this run's
    session backups (the Dagster run id); a timestamp id is made when None.
    `event_log_fallback(table) -> JSON text | None` is the last recovery source. S3 calls
    are retried by the client's botocore configuration only.

    Records returned by `read()` and `update()` are the store's own copy of the primary:
    read them, do not change them (a change goes through `update()`).
    """

    def update(
        self,
        table: str,
        change: Callable[[WatermarkRecord], None],
        *,
        now: datetime | None = None,
    ) -> UpdateResult:
        """Apply `change` to the latest record and store it compare-and-swap.

        `change` mutates the record in place and may be called more than once (after a lost
        race); it raises WatermarkConflict when it cannot be applied to the newer record.
        The first update of a table reads (and if needed recovers) the primary, so an
        update never starts from an empty record while any copy of the watermark exists;
        later ones start from the record this store last wrote and cost one PUT. Backups
        are not written here: see `write_copies`.
        """
        check_table(table)
        recovery: RecoveryReport | None = None
        for attempt in range(CAS_ATTEMPTS):
            known = self._get_known(table)
            if known is None:
                report, known = self._recover(table, now)
                if report.recovered:
                    recovery = report
            record = (
                self._whole(table, known.body)
                if known.body is not None
                else WatermarkRecord.new(table)
            )
            change(record)
            record.refresh()
            cond = {"IfMatch": known.etag} if known.etag else {"IfNoneMatch": "*"}
            try:
                info = self._write_primary(table, record, cond)
            except _Lost as e:
                log.info("watermark of %s: lost a race (%s); re-reading", table, e)
                time.sleep(min(0.05 * 2**attempt, 1.0) * (0.5 + random.random()))
                continue
            info.cas_rounds = attempt + 1
            return UpdateResult(record, info, recovery)
        raise WatermarkConflict(
            f"watermark of {table} changed {CAS_ATTEMPTS} times while saving; "
            "another run keeps writing it"
        )

    # ----------------------------------------------------------------- reading

    def read_versioned(
        self, table: str, *, now: datetime | None = None, fresh: bool = False
    ) -> tuple[WatermarkRecord | None, str | None]:
        """The primary record and its ETag. Reading never writes: when the primary is
        missing or invalid this is the copy recovery would restore, with ETag None, and
        nothing is written (`recover()` is the explicit step that writes it back).

        (None, None) only for a brand-new table: no primary, no copy, no event-log record.
        `now` is the source clock (naive); a cursor later than now + 1 minute is invalid.
        Once this store has read or written the table the answer comes from memory (it was
        validated then) unless `fresh`.
        """
        known = self.peek(table, now=now, fresh=fresh)[1]
        return known.record, known.etag

    def peek(
        self, table: str, *, now: datetime | None = None, fresh: bool = False
    ) -> tuple[RecoveryReport | None, _Known]:
        """What `read` answers, with the recovery report when the primary was not used
        (None when it was, or when the answer came from memory). Writes nothing."""
        check_table(table)
        known = None if fresh else self._get_known(table)
        if known is not None:
            return None, known
        report, known = self._recover(table, now, write=False)
        return (report if report.recovered else None), known

    def read(
        self, table: str, now: datetime | None = None, *, fresh: bool = False
    ) -> WatermarkRecord | None:
        return self.read_versioned(table, now=now, fresh=fresh)[0]


def require(record: WatermarkRecord | None, table: str) -> WatermarkRecord:
    if record is None:
        raise WatermarkError(f"no watermark for {table}")
    return record

