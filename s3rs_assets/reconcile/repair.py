"""Repairing what the diff found, through the load stage, exactly once.

After the diff, MySQL is read again by key (a read *after* the diff decides):

* a key missing or differing in the warehouse whose MySQL row is still below the safety
  bound (or has a NULL cursor) is an **upsert**: the row as read now goes into the repair
  file. A row that moved to or above the bound meanwhile, or vanished, is left for the
  next sync or the next pass;
* a key only in the warehouse that MySQL does not hold now (byte-exact key text: MySQL's
  case-insensitive `=` would find 'ABC' for 'abc') is a **delete**. One MySQL holds again
  is left alone.

The repair file is one parquet object, `Layout.repair_object(schema, table, token)` with
`token` = the pass id (the UTC time the pass started and a random part) and a digest of
the file's content, written like the backup's files (the table's Arrow schema, snappy).
Every pass writes a new object: the ledger knows a file by (key, md5), so a name derived
from the keys alone (or from a safety bound that does not move: a DATE cursor's day, a
bound held by an open transaction) would make the second repair of a row deleted again
look "already loaded" and be skipped. A crashed pass's pending file keeps its own name in
the record and is finished under it, exactly once.

The file carries, in its schema metadata, the keys to delete and to replace with the
warehouse cursor the diff saw for each. Its manifest entry is recorded
in the watermark's reconcile section as *pending*, then `load_files` loads it under
partition `_repair` with `before_merge`: in the one load transaction that records the file
in the ledger, the target rows of those keys are deleted (or soft-deleted: stamped
`_s3rs_deleted_at`) **only if their cursor is still the one the diff saw**, and the merge
then inserts the re-read rows. So:

* a crash before the file is recorded leaves an unloaded object and changes nothing; a
  crash after it (before, inside or after the load transaction) is finished by the next
  `--apply`, which loads the pending file first; the ledger skips it if it was committed;
* after the load, `confirm` looks every repaired key up again on both sides: a key still
  different is either explained (MySQL changed it during the pass) or reported as not
  repaired, and the command exits 1 naming it;
* a row a sync loaded after the diff (another cursor) is neither deleted nor overwritten,
  and the merge never moves a row to an older cursor except the ones replaced above,
  which is how a cursor that moved backwards in MySQL is repaired.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from s3rs_assets.connections import WarehouseConnection
from s3rs_assets.errors import IntegrityError
from s3rs_assets.layout import REPAIR_DIR
from s3rs_assets.load import LoadTarget
from s3rs_assets.reconcile.diff import Difference, DiffResult
from s3rs_assets.reconcile.sql import (
    KEY_BATCH,
    TableSQL,
    create_keys_sql,
    delete_keys_sql,
    drop_keys_sql,
    insert_keys_sql,
    mysql_select_list,
    soft_delete_sql,
)
from s3rs_assets.types import arrow_schema
from s3rs_assets.watermark import FileEntry, ReconcileRepair, utcnow

if TYPE_CHECKING:
    import pyarrow as pa

    from s3rs_assets.resources import S3Resource
    from s3rs_assets.warehouse import WarehouseResource

#: the ledger partition repair files are loaded under
REPAIR_PARTITION = REPAIR_DIR
#: schema metadata key of a repair file holding its keys (Arrow IPC, base64)
KEYS_METADATA = b"s3rs.reconcile.keys"
SEEN, ACTION = "s3rs_seen", "s3rs_action"


#: reasons a difference is left alone that mean "not yet": MySQL changed the row during
#: the pass (the next sync or pass sees the new state); never a failure
NOT_YET = (
    "changed_in_mysql_during_run",
    "deleted_in_mysql_during_run",
    "present_in_mysql_after_diff",
)
#: differences beyond `max_repairs`: stated, but the data is still wrong (exit 1)
OVER_CAP = "over_max_repairs"


def as_datetime(value: Any) -> datetime | None:
    """A cursor value as the safety bound's type: DATE cursors arrive as `date`."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime.combine(value, time.min)
    return None


@dataclass
class RepairPlan:
    """What a pass will change: rows to upsert, keys to delete or replace."""

    rows: list[tuple] = field(default_factory=list)
    keys: list[tuple[tuple, datetime | None, str]] = field(default_factory=list)
    upserts: int = 0
    deletes: int = 0
    #: "<action>:<key text>" of every upsert and key
    texts: list[str] = field(default_factory=list)
    #: differences left alone, by reason (changed in MySQL during the run, over the cap)
    skipped: dict[str, int] = field(default_factory=dict)
    #: key text -> reason, for every difference left alone
    skipped_keys: dict[str, str] = field(default_factory=dict)
    #: key text -> the MySQL row hash the plan read (None: absent in MySQL), per planned key
    expected: dict[str, int | None] = field(default_factory=dict)
    #: key text -> the key's values, per planned key (for `confirm`)
    key_values: dict[str, tuple] = field(default_factory=dict)

    def skip(self, why: str, n: int = 1, keys: Sequence[str] = ()) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + n
        for k in keys:
            self.skipped_keys[k] = why

    @property
    def empty(self) -> bool:
        return not self.rows and not self.keys

    def not_yet(self) -> dict[str, int]:
        return {k: n for k, n in self.skipped.items() if k in NOT_YET}

    def over_cap(self) -> int:
        return self.skipped.get(OVER_CAP, 0)


def _batches(items: Sequence[Any], n: int = KEY_BATCH) -> list[Sequence[Any]]:
    return [items[i : i + n] for i in range(0, len(items), n)]


def plan_repair(
    mysql_conn: Any,
    wconn: WarehouseConnection,
    msql: TableSQL,
    wsql: TableSQL,
    diff: DiffResult,
    bound: datetime,
    limit: int,
) -> RepairPlan:
    """Read MySQL (and the warehouse) by key after the diff; see the module docstring.
    Long on purpose: each kind of difference is confirmed against a fresh read of both sides in
    one place, so no rule is split from its exception."""
    plan = RepairPlan()
    target = msql.target
    todo = diff.differences[:limit]
    if len(diff.differences) > limit:
        rest = diff.differences[limit:]
        plan.skip(OVER_CAP, len(rest), [d.key_text for d in rest])
    upsert = [d for d in todo if d.kind != "extra"]
    extra = [d for d in todo if d.kind == "extra"]
    cursor_at = 1 + target.column_names.index(target.cursor)

    # Warehouse rows of missing keys outside the comparison (soft-deleted, cursor moved
    # back in MySQL from at/above the bound): replaced, as the diff's own rows are.
    seen: dict[str, tuple[tuple, datetime | None]] = {
        d.key_text: (d.warehouse_key, d.warehouse_cursor)  # type: ignore[misc]
        for d in upsert
        if d.warehouse_key is not None
    }
    missing = [d for d in upsert if d.warehouse_key is None]
    nk = len(target.primary_key)
    for batch in _batches(missing):
        sql, params = wsql.lookup(
            [d.mysql_key for d in batch],  # type: ignore[misc]
            f"{wsql.key_text()}, {', '.join(wsql.q(k) for k in target.primary_key)}, "
            f"{wsql.q(target.cursor)}",
        )
        for r in wconn.query(sql, params):
            seen[str(r[0])] = (tuple(r[1 : 1 + nk]), r[1 + nk])

    for batch in _batches(upsert):
        sql, params = msql.lookup(
            [d.mysql_key for d in batch],  # type: ignore[misc]
            f"{msql.key_text()}, {mysql_select_list(target)}, {msql.row_hash()}",
        )
        with mysql_conn.cursor() as cur:
            cur.execute(sql, tuple(params))
            found = {str(r[0]): r for r in cur.fetchall()}
        for d in batch:
            row = found.get(d.key_text)
            if row is None:
                plan.skip("deleted_in_mysql_during_run", keys=[d.key_text])
                continue
            c = as_datetime(row[cursor_at])
            if c is not None and c >= bound:
                plan.skip("changed_in_mysql_during_run", keys=[d.key_text])
                continue
            plan.rows.append(tuple(row[1:-1]))
            plan.upserts += 1
            plan.texts.append(f"upsert:{d.key_text}")
            plan.expected[d.key_text] = int(row[-1])
            plan.key_values[d.key_text] = d.mysql_key  # type: ignore[assignment]
            if d.key_text in seen:
                key, cursor = seen[d.key_text]
                plan.keys.append((key, cursor, "replace"))

    for batch in _batches(extra):
        sql, params = msql.lookup(
            [d.warehouse_key for d in batch],  # type: ignore[misc]
            msql.key_cursor_select(),
        )
        with mysql_conn.cursor() as cur:
            cur.execute(sql, tuple(params))
            present = {str(r[0]) for r in cur.fetchall()}
        for d in batch:
            if d.key_text in present:
                plan.skip("present_in_mysql_after_diff", keys=[d.key_text])
                continue
            plan.keys.append((d.warehouse_key, d.warehouse_cursor, "delete"))  # type: ignore[arg-type]
            plan.deletes += 1
            plan.texts.append(f"delete:{d.key_text}")
            plan.expected[d.key_text] = None
            plan.key_values[d.key_text] = d.warehouse_key  # type: ignore[assignment]
    return plan


# ------------------------------------------------------------------------ the repair file


def keys_schema(target: LoadTarget) -> pa.Schema:
    import pyarrow as pa  # on use: a reconcile that repairs nothing needs no Arrow

    cols = {f.name: f for f in arrow_schema(target.columns)}
    return pa.schema(
        [cols[k] for k in target.primary_key]
        + [pa.field(SEEN, pa.timestamp("us")), pa.field(ACTION, pa.string())]
    )


def _arrow_value(value: Any, typ: pa.DataType) -> Any:
    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_boolean(typ):
        return bool(int(value)) if not isinstance(value, bytes) else any(value)
    if pa.types.is_decimal(typ) and isinstance(value, int):
        return Decimal(value)
    if isinstance(value, str) and (pa.types.is_timestamp(typ) or pa.types.is_date(typ)):
        return None  # a MySQL zero date s3rs carries as NULL
    return value


def rows_table(target: LoadTarget, rows: Sequence[tuple]) -> pa.Table:
    import pyarrow as pa

    schema = arrow_schema(target.columns)
    arrays = [
        pa.array([_arrow_value(r[i], f.type) for r in rows], type=f.type)
        for i, f in enumerate(schema)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def keys_table(target: LoadTarget, keys: Sequence[tuple[tuple, datetime | None, str]]) -> pa.Table:
    import pyarrow as pa

    schema = keys_schema(target)
    nk = len(target.primary_key)
    arrays = [
        pa.array([_arrow_value(k[0][i], schema.field(i).type) for k in keys], schema.field(i).type)
        for i in range(nk)
    ]
    arrays.append(pa.array([as_datetime(k[1]) for k in keys], pa.timestamp("us")))
    arrays.append(pa.array([k[2] for k in keys], pa.string()))
    return pa.Table.from_arrays(arrays, schema=schema)


def new_pass_id() -> str:
    """A reconcile pass's id: when it started (UTC) and 8 random hex digits."""
    return f"{utcnow():%Y%m%dT%H%M%S%f}-{secrets.token_hex(4)}"


def repair_token(pass_id: str, bound: datetime, plan: RepairPlan) -> str:
    """The pass id and a digest of what the file holds (bound, keys and actions, rows): a
    new name for every pass (module docstring), the same one for the same pass."""
    h = hashlib.sha256()
    h.update(bound.isoformat().encode())
    for text in sorted(plan.texts):
        h.update(json.dumps(text).encode())
    for row in plan.rows:
        h.update(repr(row).encode())
    return f"{pass_id}-{h.hexdigest()[:16]}"


def write_repair_file(
    s3: S3Resource, source: tuple[str, str], target: LoadTarget, plan: RepairPlan,
    bound: datetime, pass_id: str,
) -> FileEntry:
    """Write the plan's rows (and, in the metadata, its keys) as one parquet object."""
    import pyarrow as pa

    from s3rs_assets.backup.extract import upload_parquet
    table = rows_table(target, plan.rows)
    keys = keys_table(target, plan.keys)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, keys.schema) as w:
        w.write_table(keys)
    table = table.replace_schema_metadata({KEYS_METADATA: base64.b64encode(sink.getvalue())})
    key = s3.layout.repair_object(source[0], source[1], repair_token(pass_id, bound, plan))
    size, md5 = upload_parquet(s3.client(), s3.bucket, key, table)
    cursor = [as_datetime(c) for c in table.column(target.cursor).to_pylist() if c is not None]
    return FileEntry(
        key=key,
        rows=table.num_rows,
        bytes=size,
        md5=md5,
        cursor_min=min(cursor, default=None),
        cursor_max=max(cursor, default=None),
    )


def read_keys(s3: S3Resource, entry: FileEntry) -> pa.Table:
    """The keys a repair file carries (checked against its manifest entry)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    body = s3.client().get_object(Bucket=s3.bucket, Key=entry.key)["Body"].read()
    if len(body) != entry.bytes or hashlib.md5(body).hexdigest() != entry.md5:  # noqa: S324
        raise IntegrityError(
            f"s3://{s3.bucket}/{entry.key} does not match its reconcile record (bytes, md5); "
            "nothing was repaired"
        )
    meta = pq.read_schema(pa.BufferReader(body)).metadata or {}
    if KEYS_METADATA not in meta:
        raise IntegrityError(f"s3://{s3.bucket}/{entry.key} is not a reconcile repair file")
    return pa.ipc.open_stream(base64.b64decode(meta[KEYS_METADATA])).read_all()


# ------------------------------------------------------------------------------- loading


@dataclass
class RepairResult:
    file: str
    loaded: bool  # False: the ledger already held it (an earlier run committed it)
    upserts: int
    deletes: int
    soft: bool
    rows_inserted: int = 0
    rows_removed: int = 0  # target rows deleted (replaced or hard-deleted)
    rows_soft_deleted: int = 0
    seconds: float = 0.0


def apply_keys(
    conn: WarehouseConnection, target: LoadTarget, keys: pa.Table, soft: bool, out: RepairResult
) -> None:
    """Inside the load transaction: delete/replace/soft-delete the file's keys."""
    if keys.num_rows == 0:
        return
    conn.execute(create_keys_sql(target, conn.dialect))
    names = [*target.primary_key, SEEN, ACTION]
    rows = [tuple(r[n] for n in names) for r in keys.to_pylist()]
    for batch in _batches(rows):
        conn.execute(insert_keys_sql(target, len(batch)), [v for r in batch for v in r])
    out.rows_removed = max(conn.execute(delete_keys_sql(target, soft)), 0)
    if soft:
        out.rows_soft_deleted = max(conn.execute(soft_delete_sql(target), (utcnow(),)), 0)
    conn.execute(drop_keys_sql())


def load_repair(
    warehouse: WarehouseResource,
    s3: S3Resource,
    target: LoadTarget,
    repair: ReconcileRepair,
    keys: pa.Table,
    *,
    checkpoint: Callable[[str], None] | None = None,
) -> RepairResult:
    """Load one repair file through the ledger (exactly once) with its keys applied in
    the same transaction."""
    from s3rs_assets.load.transaction import load_files  # the load (and Dagster) on use

    out = RepairResult(
        file=repair.file.key, loaded=False, upserts=repair.upserts, deletes=repair.deletes,
        soft=repair.soft,
    )
    result = load_files(
        warehouse,
        s3,
        target,
        REPAIR_PARTITION,
        [repair.file],
        checkpoint=checkpoint,
        before_merge=lambda conn: apply_keys(conn, target, keys, repair.soft, out),
    )
    out.loaded = bool(result.files_loaded)
    out.rows_inserted = result.rows_inserted
    out.seconds = result.seconds
    return out


def confirm(
    mysql_conn: Any,
    wconn: WarehouseConnection,
    msql: TableSQL,
    wsql: TableSQL,
    plan: RepairPlan,
    bound: datetime,
) -> dict[str, str]:
    """After the load: the planned keys that still differ, key text -> why.

    Each planned key is looked up on both sides (rows in scope: below the bound or NULL,
    not soft-deleted) and compared by row hash, as the diff compares leaves. A key still
    different whose MySQL row is no longer the one the plan read (another hash, gone, back,
    moved to or above the bound) is "changed_in_mysql_during_run": the next sync or pass
    sees the new state. Any other is "not_repaired": the warehouse does not hold what the
    repair should have left there."""
    out: dict[str, str] = {}
    texts = list(plan.expected)
    for batch in _batches(texts):
        keys = [plan.key_values[t] for t in batch]
        mine = _hashes(mysql_conn, msql, keys, bound)
        theirs = _hashes(wconn, wsql, keys, bound)
        for t in batch:
            if mine.get(t) == theirs.get(t):
                continue
            out[t] = (
                "not_repaired" if mine.get(t) == plan.expected[t]
                else "changed_in_mysql_during_run"
            )
    return out


def _hashes(conn: Any, side: TableSQL, keys: Sequence[tuple], bound: datetime) -> dict[str, int]:
    sql, params = side.lookup(keys, f"{side.key_text()}, {side.row_hash()}", bound=bound)
    if side.mysql:
        with conn.cursor() as cur:
            cur.execute(sql, tuple(params))
            rows = cur.fetchall()
    else:
        rows = conn.query(sql, params)
    return {str(r[0]): int(r[1]) for r in rows}


def describe_examples(diffs: Sequence[Difference], n: int) -> dict[str, list[list[Any]]]:
    """Up to `n` example keys per kind."""
    out: dict[str, list[list[Any]]] = {}
    for d in diffs:
        lst = out.setdefault(d.kind, [])
        if len(lst) < n:
            lst.append(d.as_json()["key"])
    return out
