"""The load ledger: which file versions are in which incarnation of a target table.

One ledger table per warehouse schema, `s3rs_load_ledger`, one row per loaded file version
(table, file key, md5, partition, rows, bytes, cursor range, load id, time, target_id).
Its primary key is (table_name, file_key, file_md5): a file key that comes back with a
different md5 (a re-extracted chunk overwrites its own key) is new content and is loaded
again; lookups report a key's newest version. Entries are written in the load transaction
that merges the file's rows (transaction.py), so the ledger never claims a file whose rows
are not in the target.

Entries are tied to the target table's identity, `target_id`: its `pg_class.oid`, which on
Redshift is the `table_id` of SVV_TABLE_INFO / STV_TBL_PERM. A dropped and re-created table
(a rebuild, a restore, a second deployment) gets a new one. `settle` runs first in every
load transaction, after a probe of the target that also takes its ACCESS SHARE lock, so no
DROP or TRUNCATE can slip in before the commit:

* entries of another identity describe a table that no longer exists: deleted, and every
  file of their partitions loads again;
* TRUNCATE keeps the identity. s3rs tells it from its own deletes through the target-state
  table (`s3rs_target_state`, one row per table, written in every load transaction: the
  identity it wrote into and whether the target held rows when it committed). A target
  that holds no rows now although s3rs left it holding rows was emptied behind s3rs's back
  (TRUNCATE, DELETE by hand, a restore): the entries of its identity are deleted and every
  file loads again. A target s3rs emptied itself (reconcile deleting every row deleted in
  MySQL) keeps its ledger, so those rows never come back. Without a state row (a ledger
  from before it existed) an empty target whose entries claim rows counts as emptied. The
  emptiness check and the delete are one statement, so rows a racing loader committed in
  between are never undone. A partial delete by hand is not guessed at here: `verify` and
  reconcile find it;
* entries without an identity (a ledger from before; `ensure_target` adds the column) are
  adopted while the target holds rows, and discarded as above while it holds none.

What was discarded and why is logged as a warning and reported in the load's result. OIDs
are reused only after the 32-bit counter wraps around, a risk we accept. The read-only
lookups (`ledger_files`, `ledger_versions`, `loaded_now`) apply the same rules without
changing anything: they are what the planner, `s3clean` and the sensors ask.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from s3rs_assets.connections import WarehouseConnection
from s3rs_assets.errors import ConfigError
from s3rs_assets.identifiers import check_identifier
from s3rs_assets.load.sql import (
    LedgerScope,
    ledger_adopt_sql,
    ledger_clear_sql,
    ledger_discard_claims_sql,
    ledger_discard_stale_sql,
    ledger_files_sql,
    ledger_insert_sql,
    ledger_loaded_since_sql,
    ledger_lookup_sql,
    ledger_partitions_sql,
    ledger_summary_sql,
    state_read_sql,
    state_write_sql,
    target_identity_sql,
    target_probe_sql,
)
from s3rs_assets.load.target import LEDGER_TABLE, STATE_TABLE, LoadTarget
from s3rs_assets.watermark import FileEntry

if TYPE_CHECKING:  # the resource or a plain connector (connections.py): both connect()
    from s3rs_assets.warehouse import WarehouseResource

#: file keys per lookup or insert statement
LEDGER_BATCH = 200

#: dg.get_dagster_logger("s3rs.load") by name, so that reading the ledger (s3clean,
#: watermark reset) does not import Dagster; inside a run Dagster captures it as before
log = logging.getLogger("dagster.builtin.s3rs.load")


def ledger_columns(conn: WarehouseConnection, schema: str) -> set[str]:
    """The ledger's column names in `schema` (empty: there is no ledger)."""
    return _columns(conn, schema, LEDGER_TABLE)


def _columns(conn: WarehouseConnection, schema: str, table: str) -> set[str]:
    rows = conn.query(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s",
        (schema, table),
    )
    return {str(r[0]) for r in rows}


def table_exists(conn: WarehouseConnection, schema: str, table: str) -> bool:
    return bool(_columns(conn, schema, table))


@dataclass(frozen=True)
class TargetState:
    """What s3rs left in a target when it last committed a load into it."""

    target_id: int
    has_rows: bool


def read_state(
    conn: WarehouseConnection, schema: str, table: str, *, check: bool = True
) -> TargetState | None:
    """The table's state row; None before the first load that wrote one. `check=False`
    inside a load, where `ensure_target` has made the state table."""
    if check and not table_exists(conn, schema, STATE_TABLE):
        return None
    rows = conn.query(state_read_sql(schema), (table,))
    return TargetState(int(rows[0][0]), bool(rows[0][1])) if rows else None


def write_state(
    conn: WarehouseConnection, target: LoadTarget, ident: int, load_id: str, now: datetime
) -> bool:
    """Record, inside the load transaction, what this load leaves in the target."""
    rows_there = has_rows(conn, target.schema, target.table)
    delete, insert = state_write_sql(target.schema)
    conn.execute(delete, (target.table,))
    conn.execute(insert, (target.table, ident, rows_there, load_id, now))
    return rows_there


def emptied_behind_our_back(
    rows_there: bool, claimed_rows: int, state: TargetState | None, ident: int
) -> bool:
    """The target holds no rows, the ledger says files with rows were loaded into it, and
    s3rs did not empty it itself (its last load left rows there, or it never said)."""
    if rows_there or claimed_rows <= 0:
        return False
    left_empty = state is not None and state.target_id == ident and not state.has_rows
    return not left_empty


def clear(warehouse: WarehouseResource, schema: str, table: str) -> int:
    """Delete every ledger entry (and the state row) of `table`: each file of its
    manifests loads again at the next load. Returns the entries deleted."""
    check_identifier(schema, "warehouse schema")
    check_identifier(table, "warehouse table")
    with warehouse.connection() as conn:
        if not ledger_columns(conn, schema):
            return 0
        ledger_sql, state_sql = ledger_clear_sql(schema)
        n = conn.execute(ledger_sql, (table,))
        if table_exists(conn, schema, STATE_TABLE):
            conn.execute(state_sql, (table,))
        conn.commit()
    return max(n, 0)


def identity(conn: WarehouseConnection, schema: str, table: str) -> int | None:
    """The table's pg_class oid (Redshift: table_id), or None when there is no such table."""
    if conn.dialect == "redshift":  # Redshift folds identifiers to lower case
        schema, table = schema.lower(), table.lower()
    rows = conn.query(target_identity_sql(), (schema, table))
    return int(rows[0][0]) if rows else None


def has_rows(conn: WarehouseConnection, schema: str, table: str) -> bool:
    return bool(conn.query(target_probe_sql(schema, table)))


# ------------------------------------------------------------ inside the load transaction


@dataclass(frozen=True)
class Settled:
    """What `settle` found and did."""

    target_id: int
    changed: bool  # the ledger was written to: commit even if no file loads
    reason: str = ""  # why entries were discarded ("" when none were)
    discarded: int = 0
    partitions: tuple[str, ...] = ()  # partitions of the discarded entries


def settle(conn: WarehouseConnection, target: LoadTarget) -> Settled:
    """Bring the table's ledger entries in line with the table as it is now (the rules are
    in the module docstring); the caller commits or rolls back."""
    rows_there = has_rows(conn, target.schema, target.table)  # locks out DROP and TRUNCATE
    ident = identity(conn, target.schema, target.table)
    if ident is None:
        raise ConfigError(
            f"{target.qualified} is not in pg_class under that name (on Redshift, is "
            "enable_case_sensitive_identifier on?); nothing was loaded"
        )
    summary = conn.query(ledger_summary_sql(target.schema), (target.table,))
    stale = [(int(n), int(r)) for i, n, r in summary if i is not None and int(i) != ident]
    claims = [(int(n), int(r)) for i, n, r in summary if i is None or int(i) == ident]
    legacy = any(i is None for i, _, _ in summary)
    claimed_rows = sum(r for _, r in claims)
    state = read_state(conn, target.schema, target.table, check=False)
    doubt_claims = emptied_behind_our_back(rows_there, claimed_rows, state, ident)
    parts: dict[str, set[bool]] = {}  # partition -> {is stale} of its entries
    if stale or doubt_claims:
        for p, i in conn.query(ledger_partitions_sql(target.schema), (target.table,)):
            parts.setdefault(str(p), set()).add(i is not None and int(i) != ident)
    reload = {p for p, kinds in parts.items() if True in kinds}
    reasons: list[str] = []
    discarded = 0
    if stale:
        discarded += max(
            conn.execute(ledger_discard_stale_sql(target.schema), (target.table, ident)), 0
        )
        reasons.append(
            f"the load ledger held {sum(e for e, _ in stale)} file(s) ({sum(r for _, r in stale)} "
            f"rows) loaded into an earlier table {target.qualified}, dropped and re-created "
            f"since (table id now {ident})"
        )
    if doubt_claims:
        sql = ledger_discard_claims_sql(target.schema, target.table)
        n = conn.execute(sql, (target.table, ident))
        if n:
            discarded += max(n, 0)
            reload |= {p for p, kinds in parts.items() if False in kinds}
            reasons.append(
                f"{target.qualified} holds 0 rows but the load ledger says "
                f"{sum(e for e, _ in claims)} file(s) with {claimed_rows} rows were loaded "
                "into it and s3rs's last load left rows there (truncated or emptied by hand?)"
            )
            legacy = False
    if legacy:
        conn.execute(ledger_adopt_sql(target.schema), (ident, target.table))
    reason = "; ".join(reasons)
    if reason:
        log.warning(
            f"{reason}: {discarded} ledger entries discarded; the files of {len(reload)} "
            "partition(s) load again (this load's now, the others when their partitions are "
            "next loaded)"
        )
    return Settled(ident, bool(reasons) or legacy, reason, discarded, tuple(sorted(reload)))


def loaded_versions(
    conn: WarehouseConnection, target: LoadTarget, ident: int, files: Sequence[FileEntry]
) -> set[tuple[str, str]]:
    """(key, md5) of those of `files` the ledger holds for identity `ident`."""
    loaded: set[tuple[str, str]] = set()
    keys = [f.key for f in files]
    for i in range(0, len(keys), LEDGER_BATCH):
        chunk = keys[i : i + LEDGER_BATCH]
        sql = ledger_lookup_sql(target.schema, len(chunk))
        loaded.update((str(k), str(m)) for k, m in conn.query(sql, (target.table, ident, *chunk)))
    return loaded


def record(
    conn: WarehouseConnection,
    target: LoadTarget,
    ident: int,
    partition_key: str,
    files: Sequence[FileEntry],
    load_id: str,
    now: datetime,
) -> None:
    """Insert the ledger rows of `files`, in key order: two loaders with overlapping lists
    then wait for each other (PostgreSQL) instead of deadlocking."""
    by_key = sorted(files, key=lambda f: f.key)
    for i in range(0, len(by_key), LEDGER_BATCH):
        chunk = by_key[i : i + LEDGER_BATCH]
        params: list[Any] = []
        for f in chunk:
            params += [
                target.table,
                f.key,
                f.md5,
                partition_key,
                target.source_name,
                f.rows,
                f.bytes,
                f.cursor_min,
                f.cursor_max,
                load_id,
                now,
                ident,
            ]
        conn.execute(ledger_insert_sql(target.schema, len(chunk)), params)


def partition_ledger(
    conn: WarehouseConnection, target: LoadTarget, ident: int, partition_key: str
) -> dict[str, int]:
    """File key -> rows of one partition, after `settle` (every entry carries `ident`)."""
    rows = conn.query(
        ledger_files_sql(target.schema, by_partition=True, scope="identity"),
        (target.table, ident, partition_key),
    )
    return {key: int(n) for key, _, n in rows}  # oldest first: the newest version wins


# ---------------------------------------------------------------------- read-only lookups


def current_ledger(
    conn: WarehouseConnection, schema: str, table: str, partition_key: str | None = None
) -> list[tuple[str, str, int]]:
    """(file key, md5, rows) of the entries that describe the table as it is now, oldest
    first: entries of its current identity, plus entries that predate identities (a load
    would adopt them); none when the table does not exist; and when it was emptied behind
    s3rs's back, only entries of empty files (a load would discard the rest and reload
    them)."""
    columns = ledger_columns(conn, schema)
    ident = identity(conn, schema, table) if columns else None
    if ident is None:
        return []
    scope: LedgerScope = "identity_or_none" if "target_id" in columns else "all"
    params: tuple = (table,) if scope == "all" else (table, ident)
    if partition_key is not None:
        params += (partition_key,)
    rows = conn.query(ledger_files_sql(schema, partition_key is not None, scope), params)
    entries = [(str(k), str(m), int(n)) for k, m, n in rows]
    claimed = sum(e[2] for e in entries)
    if entries and emptied_behind_our_back(
        has_rows(conn, schema, table), claimed, read_state(conn, schema, table), ident
    ):
        entries = [e for e in entries if e[2] == 0]
    return entries


def ledger_files(
    warehouse: WarehouseResource, target: LoadTarget, partition_key: str | None = None
) -> dict[str, int]:
    """File key -> rows for every file the warehouse's ledger holds for `target` as it is
    now (optionally one partition): the truth for the redshift side of the watermark.
    A key loaded in several versions reports its newest."""
    with warehouse.connection(autocommit=True) as conn:
        entries = current_ledger(conn, target.schema, target.table, partition_key)
    return {key: rows for key, _, rows in entries}


def ledger_versions(warehouse: WarehouseResource, schema: str, table: str) -> set[tuple[str, str]]:
    """(file key, md5) of every file version loaded into warehouse table `schema.table` as it
    is now: what `s3rs s3clean` may treat as safely loaded."""
    check_identifier(schema, "warehouse schema")
    check_identifier(table, "warehouse table")
    with warehouse.connection(autocommit=True) as conn:
        return {(key, md5) for key, md5, _ in current_ledger(conn, schema, table)}


def loaded_since(
    warehouse: WarehouseResource,
    target: LoadTarget,
    since: datetime,
    conn: WarehouseConnection | None = None,
) -> set[str]:
    """The partitions of `target` with files loaded at or after `since` (naive UTC, like
    `loaded_at`): what a run that started then moved rows into, from the ledger. On `conn`
    (autocommit) when given, else on a connection of its own."""
    if conn is None:
        with warehouse.connection(autocommit=True) as own:
            return loaded_since(warehouse, target, since, own)
    rows = conn.query(ledger_loaded_since_sql(target.schema), (target.table, since))
    return {key for (key,) in rows}
