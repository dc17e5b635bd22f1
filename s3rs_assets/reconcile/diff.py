"""Find the rows that differ between MySQL and the warehouse, by bisection of key segments.

1. The root split: the key space (keys.py) is cut into about `rows / threshold` children
   and each side returns (rows, sum of row hashes) per child in one scan per connection
   (GROUP BY the child's number; an integer key range is cut into `workers` sub-ranges
   first, so both databases use every connection from the start). Identical tables cost
   exactly this: one checksum pass over each side, the two sides at the same time.
2. Each child whose count or checksum differ is split again (about `rows / threshold`
   children, one range scan of the child per side), until a child holds at most
   `threshold` rows on both sides (or cannot be split: a single key). Segments selected
   by a hash prefix alone (keys without an integer first column) have no index to scan:
   those of one level are split, and fetched, up to PREFIX_BATCH in one scan per side.
3. Such a leaf is fetched from both sides as (key text, key, cursor, row hash) and
   compared key by key: a key only in MySQL is *missing* in the warehouse, a key only in
   the warehouse is *extra* (deleted in MySQL), a key on both sides with another hash
   *differs*.

Only counts and sums cross the network until step 3, which moves at most `threshold` rows
per leaf and side; at most `2 * workers` leaf queries are in flight (one a batch of up to
PREFIX_BATCH prefix leaves), so memory follows the threshold and the number of
differences, not the table. Each side has its own pool of
`workers` connections (threads: the databases do the work).

Every query only reads, so a transient error (a killed connection, a failover: retry.py)
closes that connection and runs the same query again on a new one, a bounded number of
times, counted in `Differ.retries`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from s3rs_assets.reconcile.keys import Segment, Split, split
from s3rs_assets.reconcile.sql import Query, TableSQL
from s3rs_assets.retry import MYSQL_BACKOFF, Retries, call, is_transient

if TYPE_CHECKING:  # any object with their connect(): connections.py's connectors too
    from s3rs_assets.resources import MySQLResource
    from s3rs_assets.warehouse import WarehouseResource

Kind = Literal["missing", "extra", "differs"]
KINDS: tuple[Kind, ...] = ("missing", "extra", "differs")
#: children of one split at most (one GROUP BY group each)
MAX_PARTS = 4096
#: hash-prefix segments checksummed or fetched together in one scan per side
PREFIX_BATCH = 256
#: one split's children: label -> (rows, sum of row hashes)
Children = dict[int | str, tuple[int, int]]


@dataclass(frozen=True)
class Difference:
    """One key that differs; `*_key` are the key's values as each side returned them."""

    kind: Kind
    key_text: str
    mysql_key: tuple | None = None
    warehouse_key: tuple | None = None
    mysql_cursor: datetime | None = None
    warehouse_cursor: datetime | None = None

    @property
    def key(self) -> tuple:
        return self.mysql_key if self.mysql_key is not None else self.warehouse_key  # type: ignore[return-value]

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": [_plain(v) for v in self.key],
            "mysql_cursor": _plain(self.mysql_cursor),
            "warehouse_cursor": _plain(self.warehouse_cursor),
        }


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, datetime):
        return v.isoformat(timespec="microseconds")
    return str(v)


@dataclass
class DiffResult:
    differences: list[Difference] = field(default_factory=list)
    mysql_rows: int = 0
    warehouse_rows: int = 0
    segments_compared: int = 0
    leaves_fetched: int = 0
    rows_fetched: int = 0
    levels: int = 0
    queries: int = 0
    seconds: float = 0.0

    def count(self, kind: Kind) -> int:
        return sum(1 for d in self.differences if d.kind == kind)


class _Pool:
    """`size` connections of one side, handed to one thread at a time."""

    def __init__(self, connect: Callable[[], Any], size: int):
        self._connect = connect
        self._free: list[Any] = []
        self._all: list[Any] = []
        self._lock = threading.Lock()
        self.size = size

    @contextmanager
    def conn(self) -> Iterator[Any]:
        """A connection for one query; one a transient error broke is closed, not reused."""
        with self._lock:
            c = self._free.pop() if self._free else None
        if c is None:
            c = self._connect()
            with self._lock:
                self._all.append(c)
        try:
            yield c
        except BaseException as e:
            if not (isinstance(e, Exception) and is_transient(e)):
                with self._lock:
                    self._free.append(c)
                raise
            with self._lock:
                self._all.remove(c)
            with suppress(Exception):
                c.close()
            raise
        with self._lock:
            self._free.append(c)

    def close(self) -> None:
        for c in self._all:
            with suppress(Exception):
                c.close()


class Differ:
    """The bisection of one table (module docstring); `run()` returns every difference."""

    def __init__(
        self,
        mysql: MySQLResource,
        warehouse: WarehouseResource,
        msql: TableSQL,
        wsql: TableSQL,
        bound: datetime,
        *,
        threshold: int = 256,
        workers: int = 2,
        retries: Retries | None = None,
        log: Callable[[str], None] | None = None,
    ):
        self.msql, self.wsql, self.bound = msql, wsql, bound
        self.retries = retries if retries is not None else Retries()
        self._log = log
        self.threshold = max(1, threshold)
        self.workers = max(1, workers)
        self._mysql = _Pool(mysql.connect, self.workers)
        self._warehouse = _Pool(lambda: warehouse.connect(autocommit=True), self.workers)
        self._result = DiffResult()
        self._count_lock = threading.Lock()

    # ---------------------------------------------------------------- execution

    def _mysql_query(self, q: Query) -> list[tuple]:
        def attempt() -> list[tuple]:
            with self._mysql.conn() as conn, conn.cursor() as cur:
                cur.execute(q[0], tuple(q[1]))
                return list(cur.fetchall())

        return self._retried("reconcile: a MySQL checksum", attempt)

    def _warehouse_query(self, q: Query) -> list[tuple]:
        def attempt() -> list[tuple]:
            with self._warehouse.conn() as conn:
                return conn.query(q[0], q[1])

        return self._retried("reconcile: a warehouse checksum", attempt)

    def _retried(self, what: str, attempt: Callable[[], list[tuple]]) -> list[tuple]:
        rows = call(attempt, what=what, retries=self.retries, backoff=MYSQL_BACKOFF,
                    log=self._log)
        self._tick()
        return rows

    def _tick(self) -> None:
        with self._count_lock:
            self._result.queries += 1

    def bounds(self) -> tuple[int, int] | None:
        """MIN and MAX of the integer first key column over both sides (None: both empty)."""
        lo_hi = [*self._mysql_query((self.msql.bounds(), [])), *self._warehouse_query(
            (self.wsql.bounds(), [])
        )]
        lows = [int(r[0]) for r in lo_hi if r[0] is not None]
        highs = [int(r[1]) for r in lo_hi if r[1] is not None]
        return (min(lows), max(highs)) if lows else None

    # ---------------------------------------------------------------- bisection

    def run(self, root: Segment, estimated_rows: int) -> DiffResult:
        t0 = time.monotonic()
        res = self._result
        try:
            with (
                ThreadPoolExecutor(self.workers, thread_name_prefix="s3rs-rc-mysql") as mpool,
                ThreadPoolExecutor(self.workers, thread_name_prefix="s3rs-rc-wh") as wpool,
            ):
                self._mpool, self._wpool = mpool, wpool
                frontier = self._first_level(root, estimated_rows)
                while frontier:
                    res.levels += 1
                    leaves, to_split = self._level(frontier)
                    self._fetch_leaves(leaves)
                    frontier = [
                        (split(seg, min(MAX_PARTS, math.ceil(n / self.threshold))), False)
                        for seg, n in to_split
                    ]
        finally:
            self._mysql.close()
            self._warehouse.close()
        res.differences.sort(key=lambda d: (d.kind, d.key_text))
        res.seconds = time.monotonic() - t0
        return res

    def _first_level(self, root: Segment, estimated_rows: int) -> list[tuple[Split, bool]]:
        """The root's children, about `rows / threshold` of them. An integer key range is
        cut first into `workers` sub-ranges, one checksum query each, so every connection
        of both sides works from the start (MySQL and the warehouse each use one core per
        query); hash prefixes are never cut there (each query would scan the whole table)."""
        parts = math.ceil(max(estimated_rows, 1) / self.threshold)
        if self.workers == 1 or not root.can_split_interval() or parts < 2 * self.workers:
            return [(split(root, min(MAX_PARTS, parts)), True)]
        top = split(root, self.workers)
        each = min(MAX_PARTS, math.ceil(parts / top.count))
        return [(split(top.child(label), each), True) for label in top.labels()]

    def _level(
        self, splits: list[tuple[Split, bool]]
    ) -> tuple[list[Segment], list[tuple[Segment, int]]]:
        """Checksums of every child of `splits`: the unequal ones, as leaves to fetch or
        segments to split further (with their larger row count). Splits of hash-prefix
        segments (no interval) share one scan per side and batch (`_by_prefix`)."""
        res = self._result
        singles: list[tuple[Split, bool, Future, Future]] = []
        grouped: dict[tuple[int, int], list[Split]] = {}
        for sp, is_root in splits:
            if _prefix_only(sp.parent):
                grouped.setdefault((len(sp.parent.prefix), sp.digits), []).append(sp)
                continue
            mf = self._mpool.submit(self._mysql_query, self.msql.split_checksums(sp, self.bound))
            wf = self._wpool.submit(
                self._warehouse_query, self.wsql.split_checksums(sp, self.bound)
            )
            singles.append((sp, is_root, mf, wf))
        batches: list[tuple[list[Split], Future, Future]] = []
        for (_, digits), group in grouped.items():
            for i in range(0, len(group), PREFIX_BATCH):
                batch = group[i : i + PREFIX_BATCH]
                prefixes = [sp.parent.prefix for sp in batch]
                mq = self.msql.prefix_split_checksums(prefixes, digits, self.bound)
                wq = self.wsql.prefix_split_checksums(prefixes, digits, self.bound)
                batches.append((batch, self._mpool.submit(self._mysql_query, mq),
                                self._wpool.submit(self._warehouse_query, wq)))
        # every query is submitted; now their results, split by split
        pending = [(sp, r, _by_child(mf.result()), _by_child(wf.result()))
                   for sp, r, mf, wf in singles]
        for batch, mf, wf in batches:
            n = len(batch[0].parent.prefix)
            mine, theirs = _by_prefix(mf.result(), n), _by_prefix(wf.result(), n)
            pending += [(sp, False, mine.get(sp.parent.prefix, {}),
                         theirs.get(sp.parent.prefix, {})) for sp in batch]
        leaves: list[Segment] = []
        deeper: list[tuple[Segment, int]] = []
        for sp, is_root, mine, theirs in pending:
            if is_root:
                res.mysql_rows += sum(n for n, _ in mine.values())
                res.warehouse_rows += sum(n for n, _ in theirs.values())
            for label in set(mine) | set(theirs):
                res.segments_compared += 1
                m, w = mine.get(label, (0, 0)), theirs.get(label, (0, 0))
                if m == w:
                    continue
                child = sp.child(label)
                n = max(m[0], w[0])
                if n <= self.threshold or not child.can_split():
                    leaves.append(child)
                else:
                    deeper.append((child, n))
        return leaves, deeper

    def _fetch_leaves(self, leaves: list[Segment]) -> None:
        """Fetch and compare leaves, at most 2 * workers queries in flight. Hash-prefix
        leaves (no interval) of one prefix length are fetched PREFIX_BATCH at a time in one
        scan per side: no index serves their predicate, so one query per leaf would scan
        the whole table per leaf. Each key belongs to one leaf on both sides (its hash is
        the same), so comparing a batch's rows together finds what leaf by leaf would."""
        by_length: dict[int, list[Segment]] = {}
        queries: list[tuple[int, Query, Query]] = []
        for s in leaves:
            if _prefix_only(s):
                by_length.setdefault(len(s.prefix), []).append(s)
            else:
                queries.append((1, self.msql.leaf_rows(s, self.bound),
                                self.wsql.leaf_rows(s, self.bound)))
        for group in by_length.values():
            for i in range(0, len(group), PREFIX_BATCH):
                prefixes = [s.prefix for s in group[i : i + PREFIX_BATCH]]
                queries.append((len(prefixes), self.msql.prefix_leaf_rows(prefixes, self.bound),
                                self.wsql.prefix_leaf_rows(prefixes, self.bound)))
        window = 2 * self.workers
        for i in range(0, len(queries), window):
            batch = [
                (n, self._mpool.submit(self._mysql_query, mq),
                 self._wpool.submit(self._warehouse_query, wq))
                for n, mq, wq in queries[i : i + window]
            ]
            for n, mf, wf in batch:
                self._compare(mf.result(), wf.result(), leaves=n)

    def _compare(self, mine: list[tuple], theirs: list[tuple], leaves: int = 1) -> None:
        res = self._result
        res.leaves_fetched += leaves
        res.rows_fetched += len(mine) + len(theirs)
        nk = len(self.msql.target.primary_key)
        m = {str(r[0]): r for r in mine}
        w = {str(r[0]): r for r in theirs}
        for text in m.keys() | w.keys():
            a, b = m.get(text), w.get(text)
            if a is not None and b is not None and int(a[-1]) == int(b[-1]):
                continue
            kind: Kind = "missing" if b is None else "extra" if a is None else "differs"
            res.differences.append(
                Difference(
                    kind=kind,
                    key_text=text,
                    mysql_key=tuple(a[1 : 1 + nk]) if a is not None else None,
                    warehouse_key=tuple(b[1 : 1 + nk]) if b is not None else None,
                    mysql_cursor=a[1 + nk] if a is not None else None,
                    warehouse_cursor=b[1 + nk] if b is not None else None,
                )
            )


def _prefix_only(seg: Segment) -> bool:
    """A segment selected by a hash prefix alone (a key without an integer first column)."""
    return seg.lo is None and seg.hi is None and bool(seg.prefix)


def _by_prefix(rows: list[tuple], length: int) -> dict[str, Children]:
    """A prefix batch's rows (whole child prefix, rows, sum) per parent prefix (its first
    `length` digits) and label (the rest)."""
    out: dict[str, Children] = {}
    for child, n, total in rows:
        text = str(child)
        out.setdefault(text[:length], {})[text[length:]] = (int(n), int(total))
    return out


def _by_child(rows: list[tuple]) -> Children:
    out: Children = {}
    for label, n, total in rows:
        key: int | str = label if isinstance(label, str) else int(label)
        out[key] = (int(n), int(total))
    return out
