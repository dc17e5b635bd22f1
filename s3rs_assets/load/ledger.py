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
* TRUNCATE keeps the identity: when the target holds no rows while entries of its identity
  claim some, they are deleted and every file loads again. The emptiness check and the
  delete are one statement, so rows a racing loader committed in between are never
  undone. A partial delete by hand is not guessed at here: `verify` and reconcile find it;
* entries without an identity (a ledger from before; `ensure_target` adds the column) are
  adopted while the target holds rows, and discarded as above while it holds none.

What was discarded and why is logged as a warning and reported in the load's result. OIDs
are reused only after the 32-bit counter wraps around, a risk we accept. The read-only
lookups (`ledger_files`, `ledger_versions`) apply the same rules without changing anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import dagster as dg

from s3rs_assets.errors import ConfigError
from s3rs_assets.identifiers import check_identifier
from s3rs_assets.load.sql import (
    LedgerScope,
    ledger_adopt_sql,
    ledger_discard_claims_sql,
    ledger_discard_stale_sql,
    ledger_files_sql,
    ledger_insert_sql,
    ledger_lookup_sql,
    ledger_partitions_sql,
    ledger_summary_sql,
    target_identity_sql,
    target_probe_sql,
)
from s3rs_assets.load.target import LEDGER_TABLE, LoadTarget
from s3rs_assets.warehouse import WarehouseConnection, WarehouseResource
from s3rs_assets.watermark import FileEntry

#: file keys per lookup or insert statement
LEDGER_BATCH = 200

log = dg.get_dagster_logger("s3rs.load")


def ledger_columns(conn: WarehouseConnection, schema: str) -> set[str]:
    """The ledger's column names in `schema` (empty: there is no ledger)."""
    rows = conn.query(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s",
        (schema, LEDGER_TABLE),
    )
    return {str(r[0]) for r in rows}


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
    doubt_claims = not rows_there and claimed_rows > 0
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
                "into it (truncated or emptied by hand?)"
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
    would adopt them); none when the table does not exist; and while it holds no rows, only
    entries of empty files (a load would discard the rest and reload them)."""
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
    if entries and not has_rows(conn, schema, table):
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
