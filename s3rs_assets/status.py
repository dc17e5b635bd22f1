"""The fleet at a glance (`s3rs status`, the `caught_up` asset check): per table, how far the
warehouse is behind MySQL, its last run and what needs a person.

Lag is the newest cursor in MySQL against the newest cursor loaded into the warehouse, the
latter read from the watermark record (the source of truth, DESIGN.md): the greatest
cursor of the partitions whose files the load ledger mirror (`loaded_partitions`) holds.
A table is behind when the lag exceeds its configured `lag` (rows newer than the safety
bound wait on purpose) plus ALLOWED_SLACK (one hourly sync missed).

Costs are per schema, not per table (`scan.py`): the catalog and the newest cursors in
three MySQL queries per schema. From LIST_AT tables on, one LIST (a page per 1,000 tables,
made while MySQL answers) says which records exist and their ETags, and only those are
read, by threads; with a `BodyCache` (the CLI's, on disk) a record whose listed ETag is the
MD5 of the body kept from an earlier look is not read again, so a second `s3rs status` GETs
only what changed. Below LIST_AT every record is one GET (a missing one answers 404): one
round of the threads, which a LIST before it would only lengthen. A missing primary is
"never synced": no recovery search (that is the guard's and a run's job). Nothing here
imports Dagster or Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from s3rs_assets.body_cache import BodyCache, save_archives, warm_archives
from s3rs_assets.config import TableConfig
from s3rs_assets.connections import S3_POOL
from s3rs_assets.errors import SourceSchemaError, WatermarkError
from s3rs_assets.scan import newest_cursors, primary_etags, read_records
from s3rs_assets.source import describe_many, server_now
from s3rs_assets.watermark.record import ArchiveSummary, WatermarkRecord, loaded_to
from s3rs_assets.watermark.store import WatermarkStore

#: how much more than its configured lag a table may be behind before it counts as behind
ALLOWED_SLACK = timedelta(hours=1)
#: states that make `s3rs status` exit 1 (a person should look)
BAD = ("behind", "failed", "never_synced")
#: from this many tables on, records are found by one LIST (and their ETags checked against
#: the body cache); fewer are GETs (a missing record answers 404), which a LIST before them
#: would only lengthen
LIST_AT = S3_POOL


@dataclass
class TableStatus:
    """One table's line of `s3rs status` (and its `--json` object)."""

    table: str
    state: str  # ok | behind | failed | never_synced | empty | error
    newest_mysql: datetime | None = None
    newest_loaded: datetime | None = None
    lag_seconds: float | None = None
    allowed_seconds: float = 0.0
    last_run: str | None = None
    last_run_at: datetime | None = None
    last_result: str | None = None
    rows_last_day: int = 0
    needs: str | None = None  # what a person should do, when anything

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        for k in ("newest_mysql", "newest_loaded", "last_run_at"):
            out[k] = out[k].isoformat() if out[k] is not None else None
        return out

    @property
    def sort_key(self) -> tuple[int, float]:
        """Most behind first: never synced and failed tables before any lag, empty last."""
        rank = {"error": 0, "failed": 1, "never_synced": 2}.get(self.state, 3)
        if self.state == "empty":
            rank = 4
        return rank, -(self.lag_seconds or 0.0)


def _summary(record: WatermarkRecord) -> ArchiveSummary | None:
    """The summary of the archived partitions of a record read folded (`read_for_status`)."""
    ref = record._archive
    return ref.summary if record._folded and ref is not None else None


def newest_loaded(record: WatermarkRecord) -> datetime | None:
    """The greatest cursor the warehouse holds according to the record: per partition the
    load mirror lists, its cursor when every file of it is loaded, else the greatest
    `cursor_max` of its loaded files (`record.loaded_to`); of a folded record's archived
    partitions, their summary's."""
    summary = _summary(record)
    found = [summary.loaded_to] if summary is not None else []
    found += [
        loaded_to(record.partitions[key], load)
        for key, load in record.loaded_partitions.items()
        if key in record.partitions
    ]
    return max((c for c in found if c is not None), default=None)


def _last_run(record: WatermarkRecord) -> tuple[str | None, datetime | None, str]:
    # the archived partitions are the oldest: first, as in the whole record (ties: the first)
    summary = _summary(record)
    runs = [(summary.last_run_at, summary.last_run_id)] if summary and summary.last_run_at else []
    runs += [(p.updated_at, p.run_id) for p in record.partitions.values() if p.run_id]
    run = max(runs, key=lambda r: r[0])[1] if runs else None
    times = [t for t in (record.last_mysql_extraction_time, record.last_redshift_load_time) if t]
    return (
        run,
        max(times, default=None),
        (f"extract {record.mysql_status}, load {record.redshift_status}"),
    )


def table_status(
    cfg: TableConfig,
    newest: datetime | None,
    record: WatermarkRecord | None,
    now_utc: datetime,
) -> TableStatus:
    """What one table's figures mean (no I/O: the scan has read them)."""
    allowed = cfg.lag + ALLOWED_SLACK
    st = TableStatus(cfg.name, "ok", newest_mysql=newest, allowed_seconds=allowed.total_seconds())
    if record is None:
        if newest is None:
            st.state = "empty"
        else:
            st.state, st.needs = "never_synced", f"s3rs sync -t {cfg.name}"
        return st
    st.last_run, st.last_run_at, st.last_result = _last_run(record)
    day_ago = now_utc - timedelta(days=1)
    # a record read folded has no archived partition loaded since (`read_for_status`)
    st.rows_last_day = sum(
        ld.rows for ld in record.loaded_partitions.values() if _aware(ld.loaded_at) >= day_ago
    )
    st.newest_loaded = newest_loaded(record)
    if newest is not None:
        loaded = st.newest_loaded
        st.lag_seconds = (newest - loaded).total_seconds() if loaded else None
        if loaded is None or newest - loaded > allowed:
            st.state = "behind"
            st.needs = f"s3rs sync -t {cfg.name} (behind more than {allowed})"
    elif st.newest_loaded is None:
        st.state = "empty"
    if "failed" in (record.mysql_status, record.redshift_status):
        st.state = "failed"
        st.needs = f"last run failed: {record.last_error or 'no error recorded'}"[:300]
    return st


def _aware(ts: datetime) -> datetime:
    return ts.replace(tzinfo=ts.tzinfo or UTC)


def read_for_status(
    store: WatermarkStore, table: str, body: bytes, now_utc: datetime
) -> WatermarkRecord:
    """The record a primary's body holds, for `s3rs status`: a long record's archive
    (`watermark/archive.py`) is not read when its reference's summary answers what status
    shows, i.e. when no archived partition was loaded in the last day (the record is then
    checked as stored, `check(folded=True)`: its kept partitions, the reference's totals
    for the rest; the archive's own integrity is checked by every run and the guard).
    Otherwise, or for a reference written before summaries, the whole record, as any read
    (`store._parse`), from the one parse of the body."""
    rec = WatermarkRecord.from_json(body, table_name=table)
    summary = _summary(rec)
    day_ago = now_utc - timedelta(days=1)
    if summary is None or (
        summary.last_loaded_at is not None and _aware(summary.last_loaded_at) >= day_ago
    ):
        return store._merged(table, rec).check(table_name=table)
    return rec.check(table_name=table, folded=True)


def fleet_status(
    tables: Sequence[TableConfig],
    conn: Any,
    store: WatermarkStore,
    *,
    cache: BodyCache | None = None,
) -> list[TableStatus]:
    """Every table's status, most behind first (see the module docstring for the costs;
    `cache` keeps record bodies between processes, checked against the listed ETags)."""
    tables = list(tables)
    now_utc = datetime.now(UTC)
    # the LIST (S3) runs while MySQL answers: neither waits for the other
    with ThreadPoolExecutor(max_workers=1) as pool:
        listing = pool.submit(primary_etags, store) if len(tables) >= LIST_AT else None
        server_now(conn)  # the connection works before anything is read
        described = describe_many(conn, tables)
        out: list[TableStatus] = []
        live = []
        for cfg in tables:
            src = described[cfg.name]
            if isinstance(src, SourceSchemaError):
                out.append(TableStatus(cfg.name, "error", needs=f"fix tables.yaml or MySQL: {src}"))
            else:
                live.append((cfg, src))
        newest = newest_cursors(conn, [(cfg.name, src, None) for cfg, src in live])
        etags = listing.result() if listing is not None else None
    # the cache answers only for a listed ETag: without a LIST it is neither read nor written
    prefix = store.layout.watermark_tables()
    disk = cache.pack(store.bucket, prefix) if cache and etags is not None else None
    # a long record's archive is immutable: kept on disk by its digest, whatever was listed
    arcs = cache.archives(store.bucket, store.layout.watermarks()) if cache else None
    if arcs is not None:
        warm_archives(arcs)
    records = read_records(
        store,
        [cfg.name for cfg, _ in live],
        etags,
        direct=True,
        disk=disk,
        parse=lambda name, body: read_for_status(store, name, body, now_utc),
    )
    if arcs is not None:
        save_archives(arcs, records.values())
    if disk is not None and etags is not None:
        disk.save({store.layout.watermark_primary(t): etag for t, etag in etags.items()})
    for cfg, _ in live:
        record = records[cfg.name]
        if isinstance(record, WatermarkError):
            out.append(
                TableStatus(
                    cfg.name,
                    "failed",
                    newest_mysql=newest[cfg.name],
                    needs=f"record unreadable: {record}"[:300],
                )
            )
            continue
        out.append(table_status(cfg, newest[cfg.name], record, now_utc))
    return sorted(out, key=lambda s: s.sort_key)


def exit_code(statuses: Sequence[TableStatus]) -> int:
    """0 all fine; 1 a table behind, failed or never synced; 2 a table's configuration
    (MySQL catalog) is wrong and none is worse (README, exit codes: 1 wins over 2)."""
    if any(s.state in BAD for s in statuses):
        return 1
    return 2 if any(s.state == "error" for s in statuses) else 0


def human_lag(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"
