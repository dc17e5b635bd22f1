"""One reconcile pass over one table: validate, (finish a pending repair), diff, repair,
confirm, record. What `s3rs reconcile`, the `reconciled` asset check and the schedule all
call.

Bad input changes nothing: the table, options, MySQL table and warehouse target are all
checked before the first write (a `ConfigError`, exit 2).

Its MySQL reads (the description, the safety bound, the diff's checksums) are run again on a
new connection after a transient error (a killed connection, a failover: retry.py), like a
sync's; the retries are counted in the report's notes. The repair's writes are not retried
here: a failed `--apply` is finished by the next one (`RepairIncomplete`).

A pass without `apply` only reads: it writes nothing anywhere (no S3 object, no watermark
record, no warehouse statement other than SELECT). It reads the primary watermark record
as it is, without the store's recovery (which would write), only to tell of a pending
repair. With `apply`, the record's reconcile section gets the pending repair, the loaded
repair and the pass's summary; an error after the first write is a `RepairIncomplete`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError, S3rsError
from s3rs_assets.load import LoadTarget
from s3rs_assets.reconcile.diff import KINDS, Differ
from s3rs_assets.reconcile.keys import restrict, root
from s3rs_assets.reconcile.repair import (
    RepairResult,
    confirm,
    load_repair,
    new_pass_id,
    plan_repair,
    read_keys,
    write_repair_file,
)
from s3rs_assets.reconcile.report import REPORT_VERSION, ReconcileOptions, ReconcileReport
from s3rs_assets.reconcile.sql import (
    DELETED_AT,
    TableSQL,
    add_deleted_at_sql,
    first_key_is_integer,
)
from s3rs_assets.retry import MYSQL_BACKOFF, Retries, SharedRetries, call
from s3rs_assets.source import describe, safety_bound
from s3rs_assets.watermark import ReconcileRepair, ReconcileState, WatermarkRecord, utcnow
from s3rs_assets.watermark.store import WatermarkStore

if TYPE_CHECKING:  # any object with the same calls: connections.py's connectors too
    from s3rs_assets.resources import MySQLResource, S3Resource
    from s3rs_assets.warehouse import WarehouseResource

__all__ = ["REPORT_VERSION", "ReconcileOptions", "ReconcileReport", "RepairIncomplete",
           "reconcile_table"]

#: reads a read-only pass does beside the diff (the watermark record)
_BACKGROUND = ThreadPoolExecutor(2, thread_name_prefix="s3rs-rc-peek")
#: loaded repair files the record keeps
REPAIRS_KEPT = 50
T = TypeVar("T")


class RepairIncomplete(S3rsError):
    """`--apply` failed after its first write (a repair file, the pending record, the
    load): what was written is recorded as pending, and the next `--apply` finishes it."""


def _warehouse_columns(warehouse: WarehouseResource, target: LoadTarget) -> set[str] | None:
    schema, table = target.schema, target.table
    if warehouse.dialect == "redshift":
        schema, table = schema.lower(), table.lower()
    with warehouse.connection(autocommit=True) as conn:
        rows = conn.query(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s",
            (schema, table),
        )
    return {str(r[0]) for r in rows} or None


def _fold(name: str, dialect: str) -> str:
    return name.lower() if dialect == "redshift" else name


def reconcile_table(
    table: TableConfig,
    mysql: MySQLResource,
    warehouse: WarehouseResource,
    s3: S3Resource,
    store: WatermarkStore | None,
    options: ReconcileOptions,
    *,
    checkpoint: Callable[[str], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> ReconcileReport:
    """Compare (and with `options.apply`, repair) `table`; with `apply`, record the pass in
    its watermark's reconcile section (without, nothing is written: module docstring).
    `checkpoint(name)` is called at "after_diff", "after_repair_file", "after_pending",
    inside the load (load.CHECKPOINTS) and at "after_load" (committed, not yet recorded);
    what it raises stops the pass there."""
    say = log or (lambda _m: None)
    observe = checkpoint or (lambda _n: None)
    t0 = time.monotonic()
    options.check(table.name)
    p: _Pass | None = None
    peek: Future | None = None
    retries = SharedRetries()  # the diff's query threads count into it
    try:
        if not options.apply:  # the record only tells of a pending repair: read it meanwhile
            peek = _BACKGROUND.submit(_peek_record, s3, table.name)
        p = _validate(table, mysql, warehouse, store, options, retries, say)
        p.timings["validate"] = time.monotonic() - t0
        if peek is not None:
            report, _ = _diff(p, mysql, options, [], say)
            observe("after_diff")
            record, notes = peek.result()
            state = record.reconcile if record else None
            report.pending = state.pending.file.key if state and state.pending else None
            report.notes += notes
            p.timings["total"] = time.monotonic() - t0
            return report
        resumed = _finish_pending(p, s3, options, say, observe)
        report, sides = _diff(p, mysql, options, resumed, say)
        report.pass_id = new_pass_id()
        observe("after_diff")
        if report.diff.differences:
            _repair(p, mysql, s3, options, report, sides, observe)
        p.timings["total"] = time.monotonic() - t0
        assert store is not None  # _validate refused --apply without it
        _record_run(store, table.name, report)
        return report
    except Exception as e:
        if not isinstance(e, S3rsError) and not _service_error(e):
            raise  # a bug, or a test's injected crash: as it is
        what = str(e) if isinstance(e, S3rsError) else f"{type(e).__name__}: {e}"
        if p is not None and p.wrote:
            raise RepairIncomplete(
                f"{table.name}: reconcile --apply stopped after it began to write: {what}; "
                "run `s3rs reconcile --apply` again: it finishes the pending repair (if one "
                "was recorded) and repairs what is left"
            ) from e
        if isinstance(e, S3rsError):
            raise
        raise ConfigError(f"{table.name}: {what}; nothing was changed") from None


def _service_error(e: BaseException) -> bool:
    """An error of a database driver or of S3 (a connection refused or lost, a privilege
    missing, a statement refused): the service's answer, not a bug of ours."""
    return type(e).__module__.split(".")[0] in ("pymysql", "psycopg", "redshift_connector",
                                                "botocore")


@dataclass
class _Pass:
    """What one reconcile pass knows once validated."""

    table: TableConfig
    warehouse: WarehouseResource
    store: WatermarkStore | None  # None: a read-only pass, which never writes the record
    target: LoadTarget
    integer_key: bool
    record: WatermarkRecord | None
    soft_col: bool  # the warehouse table has DELETED_AT
    date_cursor: bool  # the bound is rounded down to whole days
    retries: Retries  # transient errors of its reads, run again (retry.py)
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wrote: bool = False  # the pass has begun to write (S3, the record or the warehouse)

    @property
    def records(self) -> WatermarkStore:
        """The store an --apply pass writes its reconcile section through."""
        assert self.store is not None  # _validate refused --apply without one
        return self.store

    def ensure_deleted_at(self) -> None:
        if not self.soft_col:
            self.wrote = True
            _add_deleted_at(self.warehouse, self.target)
            self.soft_col = True


def _read(
    mysql: MySQLResource, what: str, read: Callable[[Any], T], retries: Retries,
    say: Callable[[str], None],
) -> T:
    """`read(conn)` on a new MySQL connection, run again on another after a transient
    error (retry.py): these reads change nothing, so running one twice is harmless."""

    def attempt() -> T:
        with mysql.connect() as conn:
            return read(conn)

    return call(attempt, what=what, retries=retries, backoff=MYSQL_BACKOFF, log=say)


def _validate(
    table: TableConfig,
    mysql: MySQLResource,
    warehouse: WarehouseResource,
    store: WatermarkStore | None,
    options: ReconcileOptions,
    retries: Retries,
    say: Callable[[str], None],
) -> _Pass:
    """Everything a pass needs, or a ConfigError naming what is missing (nothing changed)."""
    src = _read(mysql, f"{table.name}: describe", lambda c: describe(c, table), retries, say)
    target = LoadTarget.from_table_config(table, src.columns, src.primary_key)
    integer_key = first_key_is_integer(target)
    if (options.from_key is not None or options.to_key is not None) and not integer_key:
        first = target.primary_key[0]
        kind = next(c.column_type for c in src.columns if c.name == first)
        raise ConfigError(
            f"{table.name}: --from/--to need an integer first primary-key column; "
            f"{first!r} is {kind}"
        )
    record: WatermarkRecord | None = None  # read-only: peeked at in the background
    if options.apply:
        if store is None:
            raise ConfigError(f"{table.name}: --apply needs the watermark store")
        record = store.read(table.name)
        if record is None:
            raise ConfigError(
                f"{table.name} has never been synced (no watermark): run `s3rs sync -t "
                f"{table.name}` first; nothing was compared"
            )
    have = _warehouse_columns(warehouse, target)
    if have is None:
        raise ConfigError(
            f"{table.name} has never been synced: the warehouse table {target.qualified} "
            f"does not exist ({warehouse.redacted()}); run `s3rs sync -t {table.name}` "
            "first; nothing was compared"
        )
    lacking = [c.name for c in target.columns if _fold(c.name, warehouse.dialect) not in have]
    if lacking:
        raise ConfigError(
            f"{table.name}: warehouse table {target.qualified} lacks column(s) {lacking} "
            "that MySQL has: the next load adds them; run a sync first"
        )
    soft_col = _fold(DELETED_AT, warehouse.dialect) in have
    return _Pass(
        table, warehouse, store, target, integer_key, record, soft_col, src.cursor_is_date,
        retries,
    )


def _peek_record(s3: S3Resource, table: str) -> tuple[WatermarkRecord | None, list[str]]:
    """The primary record as S3 holds it (or None) and notes: a read that never writes (the
    store's `read` restores a missing or invalid primary from its copies, a write)."""
    notes: list[str] = []
    key = s3.layout.watermark_primary(table)
    try:
        body = s3.client().get_object(Bucket=s3.bucket, Key=key)["Body"].read()
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
            notes.append(f"no watermark record at s3://{s3.bucket}/{key} (not recovered: "
                         "reconcile without --apply writes nothing)")
            return None, notes
        raise ConfigError(
            f"{table}: cannot read its watermark record s3://{s3.bucket}/{key}: {e}; "
            "nothing was compared"
        ) from None
    except BotoCoreError as e:
        raise ConfigError(
            f"{table}: cannot reach S3 to read s3://{s3.bucket}/{key}: {e}; nothing was "
            "compared"
        ) from None
    try:
        return WatermarkRecord.from_json(body, table_name=table), notes
    except Exception as e:  # noqa: BLE001 - an invalid record only loses the pending note
        notes.append(f"the watermark record s3://{s3.bucket}/{key} is not valid ({e}); "
                     "not recovered: reconcile without --apply writes nothing")
        return None, notes


def _finish_pending(
    p: _Pass,
    s3: S3Resource,
    options: ReconcileOptions,
    say: Callable[[str], None],
    observe: Callable[[str], None],
) -> list[RepairResult]:
    """Load the repair a crashed pass recorded as pending (only with --apply)."""
    state = p.record.reconcile if p.record else None
    pending = state.pending if state else None
    if pending is None or not options.apply:
        return []
    say(f"{p.table.name}: finishing the pending repair {pending.file.key}")
    p.wrote = True
    keys = read_keys(s3, pending.file)
    if pending.soft:
        p.ensure_deleted_at()
    res = load_repair(p.warehouse, s3, p.target, pending, keys, checkpoint=observe)
    observe("after_load")
    _record_loaded(p.records, p.table.name, pending)
    return [res]


def _diff(
    p: _Pass,
    mysql: MySQLResource,
    options: ReconcileOptions,
    resumed: list[RepairResult],
    say: Callable[[str], None],
) -> tuple[ReconcileReport, tuple[TableSQL, TableSQL]]:
    """Checksums by key range on both sides, bisected down to the differing rows."""
    t1 = time.monotonic()
    table, target = p.table, p.target
    bound = _read(
        mysql, f"{table.name}: safety bound",
        lambda c: safety_bound(c, table.lag, whole_days=p.date_cursor).upper, p.retries, say,
    )
    mside = TableSQL("mysql", table.schema, table.table, target, options.columns)
    wside = TableSQL(
        p.warehouse.dialect, target.schema, target.table, target, options.columns, p.soft_col
    )
    differ = Differ(
        mysql, p.warehouse, mside, wside, bound, threshold=options.threshold,
        workers=options.workers, retries=p.retries, log=say,
    )
    start = root(p.integer_key, differ.bounds() if p.integer_key else None)
    start = restrict(start, options.from_key, options.to_key)
    estimate = _read(mysql, f"{table.name}: row estimate", lambda c: _estimate_rows(c, table),
                     p.retries, say)
    diff = differ.run(start, estimate)
    if p.retries.total:
        p.notes.append(
            f"{p.retries.total} read(s) retried after a transient error: "
            + ", ".join(f"{n} {k}" for k, n in sorted(p.retries.by_kind.items()))
        )
    p.timings["diff"] = time.monotonic() - t1
    say(
        f"{table.name}: {diff.mysql_rows:,} MySQL rows and {diff.warehouse_rows:,} warehouse "
        f"rows below {bound.isoformat()} compared in {p.timings['diff']:.2f}s: "
        + ", ".join(f"{n} {k}" for k, n in ((k, diff.count(k)) for k in KINDS))
    )
    state = p.record.reconcile if p.record else None
    pending = state.pending if state and not resumed else None
    report = ReconcileReport(
        table=table.name,
        target=target.qualified,
        dialect=p.warehouse.dialect,
        columns=options.columns,
        applied=options.apply,
        bound=bound,
        diff=diff,
        examples=options.examples,
        resumed=resumed,
        pending=pending.file.key if pending else None,
        timings=p.timings,
        notes=p.notes,
    )
    return report, (mside, wside)


def _repair(
    p: _Pass,
    mysql: MySQLResource,
    s3: S3Resource,
    options: ReconcileOptions,
    report: ReconcileReport,
    sides: tuple[TableSQL, TableSQL],
    observe: Callable[[str], None],
) -> None:
    """Confirm the differences at a fresh read, write them as a repair file, record it as
    pending, load it through the ledger, record it loaded, look the keys up again: a crash
    anywhere repeats nothing."""
    t2 = time.monotonic()
    mside, wside = sides
    bound = report.bound
    with mysql.connect() as conn, p.warehouse.connection(autocommit=True) as wconn:
        plan = plan_repair(conn, wconn, mside, wside, report.diff, bound, options.max_repairs)
    report.plan = plan
    p.timings["confirm"] = time.monotonic() - t2
    if plan.empty:
        return
    soft = p.table.deletes == "soft"
    if soft:
        p.ensure_deleted_at()
    t3 = time.monotonic()
    table = p.table
    p.wrote = True
    entry = write_repair_file(
        s3, (table.schema, table.table), p.target, plan, bound, report.pass_id
    )
    observe("after_repair_file")
    repair = ReconcileRepair(
        file=entry, upserts=plan.upserts, deletes=plan.deletes, soft=soft, bound=bound
    )
    _record_pending(p.records, table.name, repair)
    observe("after_pending")
    keys = read_keys(s3, entry)
    report.repairs.append(
        load_repair(p.warehouse, s3, p.target, repair, keys, checkpoint=observe)
    )
    observe("after_load")
    _record_loaded(p.records, table.name, repair)
    p.timings["repair"] = time.monotonic() - t3
    t4 = time.monotonic()
    wside = replace(wside, soft_deletes=p.soft_col)  # the column may be new: scope follows
    with mysql.connect() as conn, p.warehouse.connection(autocommit=True) as wconn:
        report.after_repair = confirm(conn, wconn, mside, wside, plan, bound)
    p.timings["after_repair_check"] = time.monotonic() - t4


def _add_deleted_at(warehouse: WarehouseResource, target: LoadTarget) -> None:
    with warehouse.connection(autocommit=True) as conn:
        conn.execute(add_deleted_at_sql(target))


def _estimate_rows(conn: Any, table: TableConfig) -> int:
    """InnoDB's row estimate (free): it only sizes the first split."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
            "AND TABLE_NAME = %s",
            (table.schema, table.table),
        )
        row = cur.fetchone()
    return int(row[0] or 0) if row else 0


def _state(rec: WatermarkRecord) -> ReconcileState:
    if rec.reconcile is None:
        rec.reconcile = ReconcileState()
    return rec.reconcile


def _record_pending(store: WatermarkStore, table: str, repair: ReconcileRepair) -> None:
    def change(rec: WatermarkRecord) -> None:
        _state(rec).pending = repair

    store.update(table, change)


def _record_loaded(store: WatermarkStore, table: str, repair: ReconcileRepair) -> None:
    done = repair.model_copy(update={"loaded_at": utcnow()})

    def change(rec: WatermarkRecord) -> None:
        st = _state(rec)
        if st.pending is not None and st.pending.file.key == repair.file.key:
            st.pending = None
        st.repairs = [r for r in st.repairs if r.file.key != done.file.key][-REPAIRS_KEPT + 1 :]
        st.repairs.append(done)

    store.update(table, change)


def _record_run(store: WatermarkStore, table: str, report: ReconcileReport) -> None:
    def change(rec: WatermarkRecord) -> None:
        st = _state(rec)
        st.last_run_at = utcnow()
        st.columns = report.columns  # type: ignore[assignment]
        st.applied = report.applied
        st.bound = report.bound
        st.ranges_compared = report.diff.segments_compared
        st.mysql_rows = report.diff.mysql_rows
        st.warehouse_rows = report.diff.warehouse_rows
        st.found = report.counts()
        st.repaired = report.repaired() if report.applied else {}
        st.seconds = round(report.timings.get("total", 0.0), 3)

    store.update(table, change)
