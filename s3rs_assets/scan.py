"""What a look over the whole fleet costs: batched MySQL probes and concurrent record reads.

A sensor tick and `s3rs status` look at every configured table; with thousands of tables a
query or an S3 GET per table per look is minutes, not seconds (issue 18). So:

* the catalog is read with two queries per schema (`source.describe_many`);
* the newest cursor of every table is one UNION ALL query per schema (`newest_cursors`,
  chunked at CHUNK tables a statement), index-only when the cursor is indexed;
* the sensor's first and newest row of the tables with new rows are one UNION ALL per
  schema and key shape (`rows_at`), not two probes per table;
* which tables have a primary watermark is one LIST (a page per 1,000 tables), so a
  missing record is "never synced" without a recovery search (`primary_etags`);
* records are read by READ_THREADS (8) threads, fewer when the S3 client's connection pool
  holds fewer (`threads`; more threads than connections would open and drop a connection
  per read). Each read is ~1.7 ms of this process's CPU (botocore: signing, hooks, the
  response's headers; the record's parse is ~0.04 ms) held under the GIL, so more threads
  do not read faster: measured over 1,800 GETs from a moto server, 4 to 8 threads cost the
  least CPU per GET in both processes (32: ~10-25% more, the GIL and the server's threads
  contending) for the same wall time. A long-lived process (the
  sensors' code server) keeps each record with its ETag: a record that did not change
  since the last tick is not read again (`RecordCache`); a CLI process (`s3rs status`)
  keeps the bodies on disk instead (`body_cache.BodyCache`), used only when the body's MD5
  is the ETag the LIST returned.

Nothing here imports Dagster: `s3rs status` uses it from the CLI.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime
from typing import Any

import pymysql

from s3rs_assets.body_cache import Pack
from s3rs_assets.cursor import after, below
from s3rs_assets.errors import WatermarkError
from s3rs_assets.identifiers import mysql_quote
from s3rs_assets.source import SourceTable
from s3rs_assets.watermark.record import Position, WatermarkRecord
from s3rs_assets.watermark.store import WatermarkStore

CHUNK = 500  # tables in one UNION ALL statement
#: concurrent record reads (module docstring): enough to keep requests in flight while
#: others are parsed, few enough that the GIL is not handed around 32 threads
READ_THREADS = 8


def _as_datetime(value: Any) -> datetime | None:
    """A MAX(cursor) value; zero dates (returned as text by pymysql) count as no row."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime.combine(value, datetime.min.time())
    return None


def newest_cursors(
    conn: Any, items: Sequence[tuple[str, SourceTable, datetime | None]]
) -> dict[str, datetime | None]:
    """name -> the greatest readable cursor of the table below `upper` (any, when None);
    None for a table with no such row. One UNION ALL statement per schema (per CHUNK
    tables), so the cost does not grow with the number of tables in queries."""
    by_schema: dict[str, list[tuple[str, SourceTable, datetime | None]]] = {}
    for item in items:
        by_schema.setdefault(item[1].schema, []).append(item)
    out: dict[str, datetime | None] = {}
    with conn.cursor() as cur:
        for group in by_schema.values():
            for at in range(0, len(group), CHUNK):
                chunk = group[at : at + CHUNK]
                parts = []
                for i, (_, src, upper) in enumerate(chunk):
                    keys = src.keys
                    where = below(upper, keys) if upper is not None else keys.readable
                    where = where or "1 = 1"
                    parts.append(
                        f"SELECT {i} AS i, (SELECT MAX({mysql_quote(src.cursor)}) "
                        f"FROM {src.qualified} WHERE {where}) AS m"
                    )
                cur.execute(" UNION ALL ".join(parts))
                for i, value in cur.fetchall():
                    out[chunk[int(i)][0]] = _as_datetime(value)
    return out


def primary_etags(store: WatermarkStore) -> dict[str, str]:
    """table -> ETag of every primary watermark: one LIST (a page per 1,000 tables)."""
    found: dict[str, str] = {}
    for obj in store._list(store.layout.watermark_tables()):
        table = store.layout.parse_primary(obj["Key"])
        if table is not None:
            found[table] = obj["ETag"]
    return found


class RecordCache:
    """Records by (bucket, key, ETag): a record whose ETag did not change is not read again.
    One per process; a tick builds a new store, the cache outlives it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str], tuple[str, WatermarkRecord]] = {}

    def get(self, store: WatermarkStore, table: str, etag: str) -> WatermarkRecord | None:
        with self._lock:
            hit = self._records.get((store.bucket, store.layout.watermark_primary(table)))
        return hit[1] if hit is not None and hit[0] == etag else None

    def put(self, store: WatermarkStore, table: str, etag: str, record: WatermarkRecord) -> None:
        with self._lock:
            self._records[(store.bucket, store.layout.watermark_primary(table))] = (etag, record)


def threads(client: Any) -> int:
    """Threads for concurrent reads through `client`: READ_THREADS, fewer when its
    connection pool holds fewer (more threads than connections would open and drop one per
    read)."""
    return max(1, min(READ_THREADS, client.meta.config.max_pool_connections))


def read_records(
    store: WatermarkStore,
    names: Iterable[str],
    etags: dict[str, str] | None,
    *,
    now: datetime | None = None,
    cache: RecordCache | None = None,
    search_missing: bool = False,
    direct: bool = False,
    disk: Pack | None = None,
    copies: set[str] | None = None,
    logged: set[str] | None = None,
    parse: Callable[[str, bytes], WatermarkRecord] | None = None,
) -> dict[str, WatermarkRecord | None | WatermarkError]:
    """name -> its record, None (never synced) or the WatermarkError reading it raised.

    Read by `threads(store.client)` threads. A table with no primary in `etags` is None
    without a read, unless `search_missing` (then the store's read-only recovery answers,
    as a run would start from it; with `copies`, the tables with a daily or session copy
    listed once for the fleet (`store.tables_with_copies`), a table with neither a listed
    primary nor a copy searches only the event log, the last recovery source, and is None
    when that holds nothing: no S3 request of its own; with `logged` too, the tables the
    event log may hold (`watermark_eventlog.tables_with_events`, one query for the fleet),
    one outside it is None without a search). With `direct` (a one-off look:
    `s3rs status`) the primary itself is read, no recovery search: a missing one is None,
    an invalid one its error (restoring is the guard's job); `etags` None means no LIST was
    made and every primary is fetched. `disk` (a `body_cache.Pack`) answers a direct read
    whose listed ETag is the MD5 of the body it holds, and keeps every body fetched; `parse`
    (name, body) replaces the store's whole read of a direct read's body."""

    def fetch(name: str, etag: str | None) -> WatermarkRecord | None | WatermarkError:
        key = store.layout.watermark_primary(name)
        body = disk.get(key, etag) if disk is not None else None
        if body is None:
            got = store._get(key)
            if got is None:
                return None
            body = got.body
            if disk is not None:
                disk.put(key, got.etag, body)
        try:
            return parse(name, body) if parse is not None else store._parse(name, body, now)
        except WatermarkError as e:
            return e

    def one(name: str) -> WatermarkRecord | None | WatermarkError:
        if etags is None:
            return fetch(name, None)
        etag = etags.get(name)
        if etag is None and not search_missing:
            return None
        if (
            etag is None
            and copies is not None
            and name not in copies
            and ((logged is not None and name not in logged) or not _in_event_log(store, name))
        ):
            return None
        if direct:
            return fetch(name, etag)
        if etag is not None and cache is not None:
            hit = cache.get(store, name, etag)
            if hit is not None:
                return hit
        try:
            record, got = store.read_versioned(name, now=now, fresh=True)
        except WatermarkError as e:
            return e
        if record is not None and got is not None and cache is not None:
            cache.put(store, name, got, record)
        return record

    todo = list(names)
    if not todo:
        return {}
    with ThreadPoolExecutor(max_workers=min(threads(store.client), len(todo))) as pool:
        return dict(zip(todo, pool.map(one, todo), strict=True))


def _in_event_log(store: WatermarkStore, table: str) -> bool:
    """Whether the store's event-log fallback may hold `table`'s record (an error: maybe)."""
    fallback = store.event_log_fallback
    if fallback is None:
        return False
    try:
        return fallback(table) is not None
    except Exception:  # noqa: BLE001 - the store's own search then says what fails
        return True


def rows_after(
    conn: Any, items: Sequence[tuple[str, SourceTable, Sequence[tuple[Position, datetime]]]]
) -> set[str]:
    """The names whose table holds a readable row after `start` and below `end` in any of
    their (start, end) regions: the sensor's exact index probes as EXISTS, one UNION ALL
    statement per schema (per CHUNK regions). Only the tables named here get the probes
    that find the first and the newest row."""
    by_schema: dict[str, list[tuple[str, SourceTable, Position, datetime]]] = {}
    for name, src, regions in items:
        for start, end in regions:
            by_schema.setdefault(src.schema, []).append((name, src, start, end))
    found: set[str] = set()
    with conn.cursor() as cur:
        for group in by_schema.values():
            for at in range(0, len(group), CHUNK):
                chunk = group[at : at + CHUNK]
                parts = [
                    f"SELECT {i} AS i, EXISTS(SELECT 1 FROM {src.qualified} WHERE "
                    f"{after(start, src.keys)} AND {below(end, src.keys)}) AS e"
                    for i, (_, src, start, end) in enumerate(chunk)
                ]
                cur.execute(" UNION ALL ".join(parts))
                found |= {chunk[int(i)][0] for i, e in cur.fetchall() if e}
    return found


#: MySQL's "illegal mix of collations" errors: a UNION of text keys of other collations
_COLLATION_MIX = (1267, 1270, 1271)


def _shape(src: SourceTable) -> tuple[tuple[str, str | None], ...]:
    """The exact types of the keyset's columns: statements of one shape UNION into columns
    of those very types, so every value comes back as its own probe would return it."""
    by_name = {c.name: c for c in src.columns}
    return tuple(
        (by_name[n].column_type, by_name[n].charset) if n in by_name else (n, None)
        for n in src.keys.names
    )


def rows_at(
    conn: Any, items: Sequence[tuple[Hashable, SourceTable, str]]
) -> dict[Any, Position | None]:
    """key -> the (cursor, pk) row its single-row keyset statement (`source.first_row_sql`,
    `source.last_row_sql`) returns, None for none: the statements of one schema and key
    shape (`_shape`) as one UNION ALL (per CHUNK), each a derived table keeping its own
    ORDER BY ... LIMIT 1 (the same index probe). A UNION MySQL refuses for mixed collations
    of text keys runs its statements one by one."""
    groups: dict[tuple[str, Any], list[tuple[Hashable, SourceTable, str]]] = {}
    for item in items:
        groups.setdefault((item[1].schema, _shape(item[1])), []).append(item)
    out: dict[Any, Position | None] = {key: None for key, _, _ in items}
    with conn.cursor() as cur:
        for group in groups.values():
            for at in range(0, len(group), CHUNK):
                chunk = group[at : at + CHUNK]
                union = " UNION ALL ".join(
                    f"SELECT {i} AS i, d.* FROM ({sql}) AS d" for i, (_, _, sql) in enumerate(chunk)
                )
                try:
                    cur.execute(union)
                    rows = [(chunk[int(r[0])][0], r[1:]) for r in cur.fetchall()]
                except (pymysql.err.OperationalError, pymysql.err.InternalError) as e:
                    if not e.args or e.args[0] not in _COLLATION_MIX:
                        raise
                    rows = []
                    for key, _, sql in chunk:
                        cur.execute(sql)
                        row = cur.fetchone()
                        if row is not None:
                            rows.append((key, row))
                for key, row in rows:
                    out[key] = Position(c=row[0], pk=list(row[1:]))
    return out
