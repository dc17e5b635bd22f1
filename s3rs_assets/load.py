"""S3 parquet -> warehouse: staging, merge by primary key, and the load ledger, exactly once.

One load is one transaction, whatever the dialect:

1. the files already in the ledger (same key and md5) are dropped from the list;
2. a ledger row is inserted for each remaining file. The ledger's primary key is
   (table_name, file_key, file_md5): on PostgreSQL a second loader racing on the same files
   blocks on these rows and fails with a unique violation once the first commits; on
   Redshift (whose keys are not enforced) the racing transaction fails with serializable
   isolation error 1023. Either way it rolls back, retries, and finds the files loaded;
3. `CREATE TEMP TABLE s3rs_stage` with the source columns in file order (no TRUNCATE:
   Redshift would commit there), then COPY: Redshift's `COPY ... FORMAT AS PARQUET MANIFEST`
   from a manifest listing exactly these files, or on PostgreSQL `COPY ... FROM STDIN`
   streamed from the same parquet files (Arrow writes CSV in C: 1.7x the rows/s of a
   binary COPY fed row by row from Python, measured). The staged row count must equal the
   files' manifest counts;
4. merge, the same SQL for both dialects: delete target rows whose key is staged with a
   cursor older or equal to a staged one, then insert per key the newest staged row unless
   the target still holds the key (it can only be newer after the delete). Loading a file
   twice, or an older window after a newer one, therefore never moves a row backwards;
5. drop the staging table, commit. Serialization failures (40001, 40P01, Redshift 1023)
   and racing-loader unique violations (23505) rerun the whole transaction, with backoff,
   a bounded number of times.

A file key that comes back with a different md5 (a re-extracted chunk overwrites its own
key) is new content and is loaded again; `ledger_files` reports its newest version.

Ledger entries are tied to the target table's identity (`target_id`: its `pg_class.oid`,
which on Redshift is the `table_id` of SVV_TABLE_INFO), read inside the load transaction
after a probe of the target that also locks out DROP and TRUNCATE until the commit. The
ledger is the truth for "was this file loaded" into *this* table, so before step 1:

* entries of another identity describe a table that was dropped (and re-created, restored,
  deployed again): they are deleted, and every file loads again;
* TRUNCATE keeps the identity: when the target holds no rows while entries of its identity
  claim some, they are deleted (the check and the delete are one statement, so rows a
  racing loader just committed are never undone) and every file loads again. A partial
  delete by hand is not guessed at here: `verify` and reconcile find it;
* entries without an identity (a ledger from before; `ensure_target` adds the column) are
  adopted while the target holds rows, and discarded like the above when it holds none.

What was discarded and why is logged as a warning and returned in
`LoadResult.reloaded_reason`. OIDs are only reused after the 32-bit counter wraps around,
a risk we accept. Read-only lookups (`ledger_files`, `ledger_versions`) apply the same rules
without changing anything.

Target tables are created from the MySQL columns through `types.column_type` (the one type
mapping). A new source column is added; a change that is a widening (VARCHAR longer,
DECIMAL precision up with the same scale, SMALLINT -> INTEGER -> BIGINT) alters the column;
any other change raises SourceSchemaError before any DDL runs. DDL runs before and outside
the load transaction (Redshift cannot ALTER a column type inside one).

A value longer than its VARCHAR (bytes, as Redshift counts) fails the load naming table,
column and primary key. Redshift's COPY fails on its own (no TRUNCATECOLUMNS); the
PostgreSQL path checks byte lengths in Arrow, since PostgreSQL counts characters.

The SQL builders below are pure (dialect in, text out) so tests assert them exactly.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError, IntegrityError, S3rsError, SourceSchemaError
from s3rs_assets.identifiers import check_identifier, pg_quote, pg_table
from s3rs_assets.types import SourceColumn, arrow_schema, column_type
from s3rs_assets.warehouse import (
    Dialect,
    WarehouseConnection,
    WarehouseResource,
    is_driver_error,
    is_retryable,
    sqlstate,
)
from s3rs_assets.watermark import FileEntry, utcnow

LEDGER_TABLE = "s3rs_load_ledger"
LedgerScope = Literal["identity", "identity_or_none", "all"]
STAGE_TABLE = "s3rs_stage"
WIDEN_TMP_COLUMN = "s3rs_widen_tmp"
ROW_NUMBER_COLUMN = "s3rs_rn"
#: Checkpoints a load passes, in order; `checkpoint=` callbacks receive these names.
CHECKPOINTS = ("after_ledger", "after_copy", "after_merge", "before_commit")
LEDGER_BATCH = 200
CSV_BATCH_ROWS = 65_536

log = dg.get_dagster_logger("s3rs.load")


class LoadError(S3rsError):
    """The load transaction failed and was rolled back: nothing of it is in the warehouse."""


class ValueTooLongError(SourceSchemaError):
    """A value does not fit its target column; the message names table, column and key."""


class InjectedFailure(RuntimeError):
    """Raised by the `fail_after_copy` test hook."""


@dataclass(frozen=True)
class LoadTarget:
    """Where one MySQL table lands: warehouse schema/table, its columns, key and cursor."""

    schema: str
    table: str
    columns: list[SourceColumn]
    primary_key: tuple[str, ...]
    cursor: str
    source_name: str  # "schema.table" in MySQL

    def __post_init__(self) -> None:
        where = f"load target {self.schema!r}.{self.table!r}"
        check_identifier(self.schema, f"{where}: schema")
        check_identifier(self.table, f"{where}: table")
        if self.table == LEDGER_TABLE:
            raise ConfigError(f"{where}: {LEDGER_TABLE} is the load ledger's name")
        if not self.columns:
            raise ConfigError(f"{where}: no columns")
        seen: set[str] = set()
        for c in self.columns:
            check_identifier(c.name, f"{where}: column")
            if c.name.lower() in seen:  # Redshift folds names to lower case
                raise ConfigError(f"{where}: column {c.name!r} appears twice (case-insensitive)")
            if c.name.lower() in (ROW_NUMBER_COLUMN, WIDEN_TMP_COLUMN):
                raise ConfigError(f"{where}: column name {c.name!r} is reserved by s3rs")
            seen.add(c.name.lower())
        names = {c.name for c in self.columns}
        if not self.primary_key:
            raise ConfigError(f"{where}: a primary key is required to merge")
        for k in self.primary_key:
            if k not in names:
                raise ConfigError(f"{where}: primary key column {k!r} is not a column")
        if self.cursor not in names:
            raise ConfigError(f"{where}: cursor column {self.cursor!r} is not a column")

    @classmethod
    def from_table_config(
        cls,
        cfg: TableConfig,
        columns: list[SourceColumn],
        primary_key: Sequence[str] | None = None,
    ) -> LoadTarget:
        pk = tuple(primary_key or cfg.primary_key or ())
        return cls(cfg.target_schema, cfg.target_table, list(columns), pk, cfg.cursor, cfg.name)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


@dataclass
class LoadResult:
    """What one `load_files` call did; every count comes from the warehouse."""

    table: str
    partition_key: str
    files_loaded: list[str] = field(default_factory=list)
    files_skipped: list[str] = field(default_factory=list)
    rows_staged: int = 0
    rows_inserted: int = 0
    rows_deleted: int = 0
    seconds: float = 0.0
    #: rows of this table and partition the ledger holds after the load (newest version
    #: of each file key): what the watermark's redshift side mirrors.
    ledger_rows: int = 0
    bytes_loaded: int = 0
    attempts: int = 0
    ddl: list[str] = field(default_factory=list)
    dialect: str = ""
    load_id: str = ""
    copy_seconds: float = 0.0
    merge_seconds: float = 0.0
    #: the target table's identity (pg_class oid / Redshift table_id) the ledger rows name
    target_id: int | None = None
    #: why ledger entries were discarded so that files load again (target re-created or
    #: found empty); "" when the ledger was trusted as it was
    reloaded_reason: str = ""
    ledger_discarded: int = 0
    #: partitions whose ledger entries were discarded: none of their files is in the target
    #: now, whatever the watermark's mirror of the ledger still says
    reload_partitions: list[str] = field(default_factory=list)

    @property
    def rows_not_inserted(self) -> int:
        """Staged rows that lost to a newer version (staged or already in the target)."""
        return self.rows_staged - self.rows_inserted

    def metadata(self) -> dict[str, Any]:
        """Flat values for `dg.MaterializeResult(metadata=...)`."""
        return {
            "files_loaded": len(self.files_loaded),
            "files_skipped": len(self.files_skipped),
            "rows_staged": self.rows_staged,
            "rows_inserted": self.rows_inserted,
            "rows_deleted": self.rows_deleted,
            "rows_not_inserted": self.rows_not_inserted,
            "ledger_rows": self.ledger_rows,
            "bytes_loaded": self.bytes_loaded,
            "attempts": self.attempts,
            "seconds": round(self.seconds, 3),
            "copy_seconds": round(self.copy_seconds, 3),
            "merge_seconds": round(self.merge_seconds, 3),
            "dialect": self.dialect,
            "load_id": self.load_id,
            "target_id": self.target_id,
            **(
                {
                    "reloaded_reason": self.reloaded_reason,
                    "ledger_entries_discarded": self.ledger_discarded,
                    "partitions_to_reload": len(self.reload_partitions),
                }
                if self.reloaded_reason
                else {}
            ),
        }


# --------------------------------------------------------------------------- SQL (pure)


def warehouse_type(col: SourceColumn, dialect: Dialect) -> str:
    ct = column_type(col)
    return ct.warehouse if dialect == "redshift" else ct.postgres


def sql_literal(value: str, what: str = "value") -> str:
    """A single-quoted SQL string literal; refuses characters no S3 key or ARN needs."""
    if any(ch in value for ch in "\\\x00\n\r") or not value.isprintable():
        raise ConfigError(f"{what} {value!r} contains characters s3rs will not put in SQL")
    return "'" + value.replace("'", "''") + "'"


def _cols(names: Sequence[str], prefix: str = "") -> str:
    return ", ".join(prefix + pg_quote(n) for n in names)


def create_schema_sql(schema: str) -> str:
    return f"CREATE SCHEMA IF NOT EXISTS {pg_quote(schema)}"


def create_table_sql(target: LoadTarget, dialect: Dialect) -> str:
    pk = set(target.primary_key)
    lines = [
        f"    {pg_quote(c.name)} {warehouse_type(c, dialect)}{' NOT NULL' if c.name in pk else ''}"
        for c in target.columns
    ]
    lines.append(f"    PRIMARY KEY ({_cols(target.primary_key)})")
    sql = f"CREATE TABLE IF NOT EXISTS {pg_table(target.schema, target.table)} (\n"
    sql += ",\n".join(lines) + "\n)"
    if dialect == "redshift":
        # A single-column key distributes well and staging shares it, so the merge's joins
        # stay node-local; a composite key's first column may be skewed: Redshift picks.
        if len(target.primary_key) == 1:
            sql += f"\nDISTKEY ({pg_quote(target.primary_key[0])})"
        sql += f"\nSORTKEY ({pg_quote(target.cursor)})"
    return sql


def create_ledger_sql(schema: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {pg_table(schema, LEDGER_TABLE)} (\n"
        '    "table_name" VARCHAR(128) NOT NULL,\n'
        '    "file_key" VARCHAR(1024) NOT NULL,\n'
        '    "file_md5" VARCHAR(64) NOT NULL,\n'
        '    "partition_key" VARCHAR(64) NOT NULL,\n'
        '    "source_name" VARCHAR(256) NOT NULL,\n'
        '    "row_count" BIGINT NOT NULL,\n'
        '    "byte_count" BIGINT NOT NULL,\n'
        '    "cursor_min" TIMESTAMP,\n'
        '    "cursor_max" TIMESTAMP,\n'
        '    "load_id" VARCHAR(64) NOT NULL,\n'
        '    "loaded_at" TIMESTAMP NOT NULL,\n'
        '    "target_id" BIGINT,\n'
        '    PRIMARY KEY ("table_name", "file_key", "file_md5")\n'
        ")"
    )


def add_ledger_identity_sql(schema: str) -> str:
    """Migrates a ledger written before entries were tied to the target's identity."""
    return f'ALTER TABLE {pg_table(schema, LEDGER_TABLE)} ADD COLUMN "target_id" BIGINT'


LEDGER_COLUMNS = (
    "table_name",
    "file_key",
    "file_md5",
    "partition_key",
    "source_name",
    "row_count",
    "byte_count",
    "cursor_min",
    "cursor_max",
    "load_id",
    "loaded_at",
    "target_id",
)


def target_identity_sql() -> str:
    """The target's identity: `pg_class.oid` on PostgreSQL, which on Redshift is the
    `table_id` of SVV_TABLE_INFO / STV_TBL_PERM. A dropped and re-created table gets a new
    one. (A catalog query of its own: Redshift refuses to mix leader-node catalog tables
    with user tables in one statement.)"""
    return (
        "SELECT c.oid FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n "
        "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relname = %s"
    )


def target_probe_sql(schema: str, table: str) -> str:
    """One row if the target holds any. Inside the load transaction it also takes the
    table's ACCESS SHARE lock, so no DROP or TRUNCATE can slip in before the commit."""
    return f"SELECT 1 FROM {pg_table(schema, table)} LIMIT 1"


def ledger_summary_sql(schema: str) -> str:
    """(target_id, entries, rows) per identity the ledger holds for one table."""
    return (
        f'SELECT "target_id", COUNT(*), COALESCE(SUM("row_count"), 0) '
        f'FROM {pg_table(schema, LEDGER_TABLE)} WHERE "table_name" = %s GROUP BY "target_id"'
    )


def ledger_discard_stale_sql(schema: str) -> str:
    """Entries of an earlier table of this name (dropped since): they describe nothing."""
    return (
        f"DELETE FROM {pg_table(schema, LEDGER_TABLE)} "
        'WHERE "table_name" = %s AND "target_id" <> %s'
    )


def ledger_discard_claims_sql(schema: str, table: str) -> str:
    """Every entry of the current (or no recorded) identity, but only while the target is
    empty: the check and the delete share one statement, so a loader that committed rows
    in between is never undone."""
    return (
        f"DELETE FROM {pg_table(schema, LEDGER_TABLE)} "
        'WHERE "table_name" = %s AND ("target_id" = %s OR "target_id" IS NULL) '
        f"AND NOT EXISTS (SELECT 1 FROM {pg_table(schema, table)})"
    )


def ledger_partitions_sql(schema: str) -> str:
    """(partition, target_id) pairs of one table's entries: which partitions a discard hits."""
    return (
        f'SELECT DISTINCT "partition_key", "target_id" FROM {pg_table(schema, LEDGER_TABLE)} '
        'WHERE "table_name" = %s'
    )


def ledger_adopt_sql(schema: str) -> str:
    """Ties entries written before identities were recorded to the current table."""
    return (
        f'UPDATE {pg_table(schema, LEDGER_TABLE)} SET "target_id" = %s '
        'WHERE "table_name" = %s AND "target_id" IS NULL'
    )


def ledger_lookup_sql(schema: str, n_keys: int) -> str:
    marks = ", ".join(["%s"] * n_keys)
    return (
        f'SELECT "file_key", "file_md5" FROM {pg_table(schema, LEDGER_TABLE)} '
        f'WHERE "table_name" = %s AND "target_id" = %s AND "file_key" IN ({marks})'
    )


def ledger_insert_sql(schema: str, n_rows: int) -> str:
    row = "(" + ", ".join(["%s"] * len(LEDGER_COLUMNS)) + ")"
    return (
        f"INSERT INTO {pg_table(schema, LEDGER_TABLE)} ({_cols(LEDGER_COLUMNS)}) VALUES "
        + ", ".join([row] * n_rows)
    )


def ledger_files_sql(schema: str, by_partition: bool, scope: LedgerScope = "identity") -> str:
    """(file key, md5, rows) of one table's entries, oldest first. `scope`: entries of one
    identity (the load transaction, where every entry carries it), of one identity or none
    (read-only lookups: entries that predate identities count until a load adopts them), or
    all (a ledger not migrated yet, which has no identities)."""
    sql = (
        f'SELECT "file_key", "file_md5", "row_count" FROM {pg_table(schema, LEDGER_TABLE)} '
        'WHERE "table_name" = %s'
    )
    if scope == "identity":
        sql += ' AND "target_id" = %s'
    elif scope == "identity_or_none":
        sql += ' AND ("target_id" = %s OR "target_id" IS NULL)'
    if by_partition:
        sql += ' AND "partition_key" = %s'
    return sql + ' ORDER BY "loaded_at", "file_key"'


def create_stage_sql(
    target: LoadTarget,
    dialect: Dialect,
    columns: Sequence[str] | None = None,
    name: str = STAGE_TABLE,
) -> str:
    """A session temp table with `columns` (default: all) in that order, the file order."""
    by_name = {c.name: c for c in target.columns}
    cols = list(columns) if columns is not None else target.column_names
    body = ",\n".join(f"    {pg_quote(n)} {warehouse_type(by_name[n], dialect)}" for n in cols)
    sql = f"CREATE TEMP TABLE {pg_quote(name)} (\n{body}\n)"
    if dialect == "redshift" and len(target.primary_key) == 1 and target.primary_key[0] in cols:
        sql += f"\nDISTKEY ({pg_quote(target.primary_key[0])})"
    return sql


def redshift_copy_sql(manifest_url: str, iam_role: str, table: str = STAGE_TABLE) -> str:
    role = "default" if iam_role == "default" else sql_literal(iam_role, "IAM role")
    return (
        f"COPY {pg_quote(table)} FROM {sql_literal(manifest_url, 'manifest URL')} "
        f"IAM_ROLE {role} FORMAT AS PARQUET MANIFEST"
    )


def postgres_copy_sql(target: LoadTarget) -> str:
    return f"COPY {pg_quote(STAGE_TABLE)} ({_cols(target.column_names)}) FROM STDIN (FORMAT csv)"


def stage_fill_sql(columns: Sequence[str], source: str) -> str:
    """Move a per-schema staging table (files written before a column was added) into the
    main one; the columns the files lack stay NULL."""
    return (
        f"INSERT INTO {pg_quote(STAGE_TABLE)} ({_cols(columns)}) "
        f"SELECT {_cols(columns)} FROM {pg_quote(source)}"
    )


def staged_stats_sql(target: LoadTarget) -> str:
    """(staged rows, distinct staged keys): the first must match the manifests, the second
    tells whether any key needs de-duplicating."""
    return (
        'SELECT COALESCE(SUM("n"), 0), COUNT(*) FROM '
        f'(SELECT COUNT(*) AS "n" FROM {pg_quote(STAGE_TABLE)} '
        f'GROUP BY {_cols(target.primary_key)}) AS "keys"'
    )


def drop_stage_sql(name: str = STAGE_TABLE) -> str:
    return f"DROP TABLE {pg_quote(name)}"


def delete_sql(target: LoadTarget) -> str:
    """Delete target rows whose key is staged with a newer-or-equal cursor.

    No aliases on the DELETE's tables: Redshift accepts none there. A NULL cursor in the
    target sorts first (it is replaced by any staged version).
    """
    t = pg_table(target.schema, target.table)
    s = pg_quote(STAGE_TABLE)
    keys = " AND ".join(f"{t}.{pg_quote(k)} = {s}.{pg_quote(k)}" for k in target.primary_key)
    c = pg_quote(target.cursor)
    return (
        f"DELETE FROM {t}\nUSING {s}\nWHERE {keys}\n  AND ({t}.{c} IS NULL OR {t}.{c} <= {s}.{c})"
    )


def insert_sql(target: LoadTarget, dedupe: bool = True) -> str:
    """Insert, per key, the newest staged row, unless the target still holds the key.

    After `delete_sql` a remaining target row for a staged key is newer than every staged
    version of it, so "still holds the key" means "holds a newer version". `dedupe=False`
    (every staged key distinct, see `staged_stats_sql`) skips the window's sort.
    """
    t = pg_table(target.schema, target.table)
    cols = _cols(target.column_names)
    pk = _cols(target.primary_key)
    keys = " AND ".join(f'"cur".{pg_quote(k)} = "newest".{pg_quote(k)}' for k in target.primary_key)
    absent = f'NOT EXISTS (SELECT 1 FROM {t} AS "cur" WHERE {keys})'
    if not dedupe:
        return (
            f"INSERT INTO {t} ({cols})\n"
            f"SELECT {cols}\n"
            f'FROM {pg_quote(STAGE_TABLE)} AS "newest"\n'
            f"WHERE {absent}"
        )
    rn = pg_quote(ROW_NUMBER_COLUMN)
    return (
        f"INSERT INTO {t} ({cols})\n"
        f"SELECT {cols}\n"
        "FROM (\n"
        f"    SELECT {cols},\n"
        f"        ROW_NUMBER() OVER (PARTITION BY {pk} "
        f"ORDER BY {pg_quote(target.cursor)} DESC NULLS LAST) AS {rn}\n"
        f"    FROM {pg_quote(STAGE_TABLE)}\n"
        ') AS "newest"\n'
        f'WHERE "newest".{rn} = 1\n'
        f"  AND {absent}"
    )


def merge_sql(target: LoadTarget, dedupe: bool = True) -> list[str]:
    """The statements run after the COPY, identical for Redshift and PostgreSQL."""
    return [delete_sql(target), insert_sql(target, dedupe), drop_stage_sql()]


def manifest(bucket: str, files: Sequence[FileEntry]) -> dict[str, Any]:
    """A Redshift COPY manifest listing exactly `files` (content_length: parquet needs it)."""
    return {
        "entries": [
            {
                "url": f"s3://{bucket}/{f.key}",
                "mandatory": True,
                "meta": {"content_length": f.bytes},
            }
            for f in files
        ]
    }


def manifest_key(
    s3: Any, target: LoadTarget, partition_key: str, files: Sequence[FileEntry]
) -> str:
    """Deterministic in the file list, so a retried load rewrites its own manifest."""
    digest = hashlib.sha256("\n".join(f"{f.key} {f.md5}" for f in files).encode()).hexdigest()[:20]
    return s3.key("manifests", target.schema, target.table, partition_key, f"{digest}.json")


# ----------------------------------------------------------------- schema evolution (pure)

_VARCHAR = re.compile(r"^VARCHAR\((\d+)\)$")
_DECIMAL = re.compile(r"^DECIMAL\((\d+),(\d+)\)$")
_INT_RANK = {"SMALLINT": 1, "INTEGER": 2, "BIGINT": 3}


def canonical_type(
    data_type: str, char_len: int | None, precision: int | None, scale: int | None
) -> str:
    """information_schema.columns' description, spelled like `types.py` spells types."""
    t = data_type.lower()
    if t in ("character varying", "varchar"):
        return f"VARCHAR({char_len})" if char_len else "VARCHAR"
    if t in ("numeric", "decimal"):
        return f"DECIMAL({precision},{scale})" if precision is not None else "DECIMAL"
    if t in ("timestamp without time zone", "timestamp"):
        return "TIMESTAMP"
    if t in ("binary varying", "varbyte"):
        return f"VARBYTE({char_len})" if char_len else "VARBYTE"
    if t in ("int", "int4"):
        return "INTEGER"
    return data_type.upper()


def type_change(old: str, new: str) -> str:
    """'same', 'widen' (alter the target), 'narrower' (the target already holds every new
    value: keep it) or 'incompatible'."""
    if old == new:
        return "same"
    mo, mn = _VARCHAR.match(old), _VARCHAR.match(new)
    if mo and mn:
        return "widen" if int(mn[1]) > int(mo[1]) else "narrower"
    mo, mn = _DECIMAL.match(old), _DECIMAL.match(new)
    if mo and mn and mo[2] == mn[2]:
        return "widen" if int(mn[1]) > int(mo[1]) else "narrower"
    if old in _INT_RANK and new in _INT_RANK:
        return "widen" if _INT_RANK[new] > _INT_RANK[old] else "narrower"
    return "incompatible"


def add_column_sql(target: LoadTarget, col: SourceColumn, dialect: Dialect) -> str:
    return (
        f"ALTER TABLE {pg_table(target.schema, target.table)} "
        f"ADD COLUMN {pg_quote(col.name)} {warehouse_type(col, dialect)}"
    )


def widen_column_sql(target: LoadTarget, column: str, new_type: str, dialect: Dialect) -> list[str]:
    """Statements (one transaction) that widen `column` in place.

    Redshift alters only VARCHAR lengths in place; other widenings go through a new
    column (the column moves to the end: s3rs always names columns, never positions).
    """
    t = pg_table(target.schema, target.table)
    c = pg_quote(column)
    if dialect == "postgres" or new_type.startswith("VARCHAR("):
        return [f"ALTER TABLE {t} ALTER COLUMN {c} TYPE {new_type}"]
    if column in target.primary_key or column == target.cursor:
        raise SourceSchemaError(
            f"table {target.qualified} (source {target.source_name}): column {column!r} must "
            f"become {new_type}, but it is a Redshift DISTKEY/SORTKEY column that cannot be "
            "rebuilt in place; rebuild the table by hand. The target was left unchanged."
        )
    tmp = pg_quote(WIDEN_TMP_COLUMN)
    return [
        f"ALTER TABLE {t} ADD COLUMN {tmp} {new_type}",
        f"UPDATE {t} SET {tmp} = {c}",
        f"ALTER TABLE {t} DROP COLUMN {c}",
        f"ALTER TABLE {t} RENAME COLUMN {tmp} TO {c}",
    ]


def plan_target_ddl(
    target: LoadTarget, existing: dict[str, str] | None, dialect: Dialect
) -> list[list[str]]:
    """Groups of DDL statements (each group one transaction) that bring the target table
    in line with `target.columns`; `existing` maps the target's columns to canonical types
    (None: no table). Raises SourceSchemaError, naming every incompatible column, before
    anything runs."""
    if existing is None:
        return [[create_table_sql(target, dialect)]]
    # Redshift folds unquoted and (by default) quoted names to lower case.
    fold = (lambda n: n.lower()) if dialect == "redshift" else (lambda n: n)
    have = {fold(k): v for k, v in existing.items()}
    groups: list[list[str]] = []
    problems: list[str] = []
    for col in target.columns:
        new = warehouse_type(col, dialect)
        old = have.get(fold(col.name))
        if old is None:
            groups.append([add_column_sql(target, col, dialect)])
            continue
        change = type_change(old, new)
        if change == "widen":
            groups.append(widen_column_sql(target, col.name, new, dialect))
        elif change == "incompatible":
            problems.append(f"column {col.name!r} is {old} in the warehouse but now maps to {new}")
    if problems:
        raise SourceSchemaError(
            f"table {target.qualified} (source {target.source_name}): incompatible source "
            f"schema change: {'; '.join(problems)} (only widening is applied: longer VARCHAR, "
            "more DECIMAL precision with the same scale, SMALLINT -> INTEGER -> BIGINT). "
            "The target was left unchanged; this table is stopped until it is fixed by hand."
        )
    return groups


# ------------------------------------------------------------------------- execution


def _ledger_columns(conn: WarehouseConnection, schema: str) -> set[str]:
    rows = conn.query(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s",
        (schema, LEDGER_TABLE),
    )
    return {str(r[0]) for r in rows}


def _existing_columns(conn: WarehouseConnection, target: LoadTarget) -> dict[str, str] | None:
    rows = conn.query(
        "SELECT column_name, data_type, character_maximum_length, numeric_precision, "
        "numeric_scale FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (target.schema, target.table),
    )
    if not rows:
        return None
    return {r[0]: canonical_type(r[1], r[2], r[3], r[4]) for r in rows}


def _run_groups(conn: WarehouseConnection, groups: list[list[str]]) -> list[str]:
    ran: list[str] = []
    for group in groups:
        if len(group) == 1:
            conn.execute(group[0])  # autocommit: Redshift ALTER COLUMN TYPE refuses a block
        else:
            conn.execute("BEGIN")
            try:
                for stmt in group:
                    conn.execute(stmt)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        ran.extend(group)
        for stmt in group:
            log.info(f"warehouse DDL: {stmt}")
    return ran


# Errors a concurrent ensure_target can cause: duplicate schema/table/column, pg_type race.
_DDL_RACE_STATES = {"42P06", "42P07", "42701", "23505", "40001", "40P01"}


def ensure_target(warehouse: WarehouseResource, target: LoadTarget) -> list[str]:
    """Create the schema, the ledger and the target table, or bring the table's columns up
    to date; return the DDL statements run (empty when nothing changed)."""
    dialect = warehouse.dialect
    for attempt in range(1, 4):
        with warehouse.connection(autocommit=True) as conn:
            try:
                groups: list[list[str]] = []
                have_schema = conn.query(
                    "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
                    (target.schema,),
                )
                if not have_schema:
                    groups.append([create_schema_sql(target.schema)])
                ledger = _ledger_columns(conn, target.schema) if have_schema else set()
                if not ledger:
                    groups.append([create_ledger_sql(target.schema)])
                elif "target_id" not in ledger:
                    groups.append([add_ledger_identity_sql(target.schema)])
                existing = _existing_columns(conn, target) if have_schema else None
                groups.extend(plan_target_ddl(target, existing, dialect))
                return _run_groups(conn, groups)
            except Exception as e:
                if is_driver_error(e) and sqlstate(e) in _DDL_RACE_STATES and attempt < 3:
                    log.info(f"{target.qualified}: concurrent DDL ({sqlstate(e)}), re-planning")
                    time.sleep(0.1 * attempt)
                    continue
                raise
    raise AssertionError("unreachable")


def _identity(conn: WarehouseConnection, schema: str, table: str) -> int | None:
    """The table's pg_class oid, or None when there is no such table."""
    if conn.dialect == "redshift":  # Redshift folds identifiers to lower case
        schema, table = schema.lower(), table.lower()
    rows = conn.query(target_identity_sql(), (schema, table))
    return int(rows[0][0]) if rows else None


def _has_rows(conn: WarehouseConnection, schema: str, table: str) -> bool:
    return bool(conn.query(target_probe_sql(schema, table)))


def current_ledger(
    conn: WarehouseConnection, schema: str, table: str, partition_key: str | None = None
) -> list[tuple[str, str, int]]:
    """(file key, md5, rows) of the entries that describe the table as it is now, oldest
    first, read outside a load: entries of its current identity, plus entries that predate
    identities (trusted as a load would adopt them); none when the table does not exist;
    and while it holds no rows, only entries of empty files (a load would discard the
    rest and reload them)."""
    columns = _ledger_columns(conn, schema)
    ident = _identity(conn, schema, table) if columns else None
    if ident is None:
        return []
    scope: LedgerScope = "identity_or_none" if "target_id" in columns else "all"
    params: tuple = (table,) if scope == "all" else (table, ident)
    if partition_key is not None:
        params += (partition_key,)
    rows = conn.query(ledger_files_sql(schema, partition_key is not None, scope), params)
    entries = [(str(k), str(m), int(n)) for k, m, n in rows]
    if entries and not _has_rows(conn, schema, table):
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


def _partition_ledger(
    conn: WarehouseConnection, target: LoadTarget, ident: int, partition_key: str
) -> dict[str, int]:
    """Inside the load transaction, where every entry of the table carries `ident`."""
    rows = conn.query(
        ledger_files_sql(target.schema, by_partition=True, scope="identity"),
        (target.table, ident, partition_key),
    )
    return {key: int(n) for key, _, n in rows}  # oldest first: the newest version wins


def _check_files(target: LoadTarget, partition_key: str, files: Sequence[FileEntry]) -> None:
    if not isinstance(partition_key, str) or not partition_key or len(partition_key) > 64:
        raise ConfigError(f"{target.qualified}: invalid partition key {partition_key!r}")
    seen: set[str] = set()
    for f in files:
        if f.key in seen:
            raise ConfigError(f"{target.qualified}: file {f.key} is listed twice")
        seen.add(f.key)


def load_files(
    warehouse: WarehouseResource,
    s3: Any,
    target: LoadTarget,
    partition_key: str,
    files: list[FileEntry],
    *,
    fail_after_copy: bool = False,
    checkpoint: Callable[[str], None] | None = None,
    max_attempts: int = 5,
    backoff_seconds: float = 0.5,
) -> LoadResult:
    """Load `files` (one partition's parquet objects in `s3.bucket`) into `target`.

    Exactly once: files already in the ledger are skipped, the rest are merged and recorded
    in the ledger in one transaction. `checkpoint(name)` is called at each of CHECKPOINTS
    inside the transaction (raise from it to simulate a crash there); `fail_after_copy`
    raises InjectedFailure at "after_copy".
    """
    started = time.monotonic()
    _check_files(target, partition_key, files)
    result = LoadResult(
        table=target.qualified, partition_key=partition_key, dialect=warehouse.dialect
    )
    result.ddl = ensure_target(warehouse, target)

    def hook(name: str) -> None:
        if checkpoint is not None:
            checkpoint(name)
        if fail_after_copy and name == "after_copy":
            raise InjectedFailure(f"injected failure after COPY into {target.qualified}")

    for attempt in range(1, max_attempts + 1):
        result.attempts = attempt
        result.load_id = uuid.uuid4().hex
        conn = warehouse.connect()
        try:
            _load_once(conn, warehouse, s3, target, partition_key, files, result, hook)
            break
        except Exception as e:
            conn.rollback()
            if is_driver_error(e) and is_retryable(e) and attempt < max_attempts:
                delay = backoff_seconds * 2 ** (attempt - 1) * (0.5 + random.random())
                log.warning(
                    f"{target.qualified} partition {partition_key}: attempt {attempt} lost a "
                    f"race ({type(e).__name__} {sqlstate(e) or ''}); retrying in {delay:.2f}s"
                )
                time.sleep(delay)
                continue
            if is_driver_error(e):
                raise LoadError(
                    f"loading {len(files)} file(s) into {target.qualified} (partition "
                    f"{partition_key}) failed after {attempt} attempt(s); nothing was "
                    f"committed: {type(e).__name__}: {e}"
                ) from e
            raise
        finally:
            conn.close()
    result.seconds = time.monotonic() - started
    log.info(
        f"{target.qualified} partition {partition_key}: {len(result.files_loaded)} file(s) "
        f"loaded, {len(result.files_skipped)} skipped, {result.rows_staged} rows staged, "
        f"{result.rows_inserted} inserted, {result.rows_deleted} replaced, "
        f"{result.seconds:.2f}s ({result.dialect}, {result.attempts} attempt(s))"
    )
    return result


def _load_once(
    conn: WarehouseConnection,
    warehouse: WarehouseResource,
    s3: Any,
    target: LoadTarget,
    partition_key: str,
    files: Sequence[FileEntry],
    result: LoadResult,
    hook: Callable[[str], None],
) -> None:
    result.files_loaded, result.bytes_loaded = [], 0
    result.rows_staged = result.rows_inserted = result.rows_deleted = 0
    ident, changed = _settle_identity(conn, target, result)
    loaded: set[tuple[str, str]] = set()
    keys = [f.key for f in files]
    for i in range(0, len(keys), LEDGER_BATCH):
        chunk = keys[i : i + LEDGER_BATCH]
        rows = conn.query(
            ledger_lookup_sql(target.schema, len(chunk)), (target.table, ident, *chunk)
        )
        loaded.update((k, m) for k, m in rows)
    todo = [f for f in files if (f.key, f.md5) not in loaded]
    result.files_skipped = [f.key for f in files if (f.key, f.md5) in loaded]
    if not todo:
        result.ledger_rows = sum(_partition_ledger(conn, target, ident, partition_key).values())
        if changed:
            conn.commit()
        else:
            conn.rollback()
        return

    # Ledger rows first: a racing loader blocks here (PostgreSQL), not after its COPY.
    # Key order, so two loaders with overlapping lists wait for each other, never deadlock.
    now = utcnow()
    by_key = sorted(todo, key=lambda f: f.key)
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
                result.load_id,
                now,
                ident,
            ]
        conn.execute(ledger_insert_sql(target.schema, len(chunk)), params)
    hook("after_ledger")

    t0 = time.monotonic()
    conn.execute(create_stage_sql(target, conn.dialect))
    if conn.dialect == "postgres":
        _copy_postgres(conn, s3, target, todo)
    else:
        _copy_redshift(conn, warehouse, s3, target, partition_key, todo)
    staged, distinct_keys = (int(v) for v in conn.query(staged_stats_sql(target))[0])
    expected = sum(f.rows for f in todo)
    if staged != expected:
        raise IntegrityError(
            f"{target.qualified} partition {partition_key}: COPY staged {staged} rows but the "
            f"file manifests list {expected}; nothing was loaded"
        )
    result.copy_seconds = time.monotonic() - t0
    hook("after_copy")

    t1 = time.monotonic()
    delete, insert, drop = merge_sql(target, dedupe=distinct_keys != staged)
    result.rows_deleted = conn.execute(delete)
    result.rows_inserted = conn.execute(insert)
    conn.execute(drop)
    result.merge_seconds = time.monotonic() - t1
    hook("after_merge")

    result.ledger_rows = sum(_partition_ledger(conn, target, ident, partition_key).values())
    hook("before_commit")
    conn.commit()
    result.rows_staged = staged
    result.files_loaded = [f.key for f in todo]
    result.bytes_loaded = sum(f.bytes for f in todo)


def _settle_identity(
    conn: WarehouseConnection, target: LoadTarget, result: LoadResult
) -> tuple[int, bool]:
    """Bring the table's ledger entries in line with the table as it is now, inside the
    load transaction; return (identity, whether the ledger changed).

    Entries of another identity describe a dropped table: discarded. Entries of this
    identity (or of none, written before identities were recorded) that claim rows while
    the table holds none (TRUNCATE keeps the identity): discarded too, so every file loads
    again. Otherwise entries without an identity are adopted.
    """
    has_rows = _has_rows(conn, target.schema, target.table)  # locks out DROP / TRUNCATE
    ident = _identity(conn, target.schema, target.table)
    if ident is None:
        raise LoadError(f"{target.qualified} vanished while loading (dropped concurrently?)")
    result.target_id = ident
    result.reloaded_reason, result.ledger_discarded, result.reload_partitions = "", 0, []
    summary = conn.query(ledger_summary_sql(target.schema), (target.table,))
    stale = [(int(n), int(r)) for i, n, r in summary if i is not None and int(i) != ident]
    claims = [(int(n), int(r)) for i, n, r in summary if i is None or int(i) == ident]
    legacy = any(i is None for i, _, _ in summary)
    claimed_rows = sum(r for _, r in claims)
    doubt_claims = not has_rows and claimed_rows > 0
    parts: dict[str, set[bool]] = {}  # partition -> {is stale} of its entries
    if stale or doubt_claims:
        for p, i in conn.query(ledger_partitions_sql(target.schema), (target.table,)):
            parts.setdefault(str(p), set()).add(i is not None and int(i) != ident)
    reload = {p for p, kinds in parts.items() if True in kinds}
    reasons: list[str] = []
    if stale:
        n = conn.execute(ledger_discard_stale_sql(target.schema), (target.table, ident))
        result.ledger_discarded += max(n, 0)
        reasons.append(
            f"the load ledger held {sum(e for e, _ in stale)} file(s) ({sum(r for _, r in stale)} "
            f"rows) loaded into an earlier table {target.qualified}, dropped and re-created "
            f"since (table id now {ident})"
        )
    if doubt_claims:
        sql = ledger_discard_claims_sql(target.schema, target.table)
        n = conn.execute(sql, (target.table, ident))
        if n:
            result.ledger_discarded += max(n, 0)
            reload |= {p for p, kinds in parts.items() if False in kinds}
            reasons.append(
                f"{target.qualified} holds 0 rows but the load ledger says "
                f"{sum(e for e, _ in claims)} file(s) with {claimed_rows} rows were loaded "
                "into it (truncated or emptied by hand?)"
            )
            legacy = False
    if legacy:
        conn.execute(ledger_adopt_sql(target.schema), (ident, target.table))
    if reasons:
        result.reloaded_reason = "; ".join(reasons)
        result.reload_partitions = sorted(reload)
        log.warning(
            f"{result.reloaded_reason}: {result.ledger_discarded} ledger entries discarded; "
            f"the files of {len(reload)} partition(s) load again (this load's now, the others "
            "when their partitions are next loaded)"
        )
    return ident, bool(reasons) or legacy


# ---------------------------------------------------------------- COPY, PostgreSQL side


def _fetch(client: Any, bucket: str, f: FileEntry) -> bytes:
    body = client.get_object(Bucket=bucket, Key=f.key)["Body"].read()
    if len(body) != f.bytes or hashlib.md5(body).hexdigest() != f.md5:  # noqa: S324
        raise IntegrityError(
            f"s3://{bucket}/{f.key}: {len(body)} bytes, md5 {hashlib.md5(body).hexdigest()}, "  # noqa: S324
            f"but its manifest says {f.bytes} bytes, md5 {f.md5}; nothing was loaded"
        )
    return body


def conform(table: pa.Table, target: LoadTarget, where: str) -> pa.Table:
    """`table` with exactly the target's columns, types and order (missing columns, from
    files written before a column was added, become NULL). Raises IntegrityError for a
    column the target lacks or a type that does not cast exactly."""
    expected = arrow_schema(target.columns)
    names = table.column_names
    if len(set(names)) != len(names):
        raise IntegrityError(f"{where}: duplicate column names {names}")
    extra = [n for n in names if n not in expected.names]
    if extra:
        raise IntegrityError(
            f"{where}: column(s) {extra} are not among {target.qualified}'s source columns"
        )
    arrays = []
    for fld in expected:
        if fld.name not in names:
            arrays.append(pa.nulls(table.num_rows, fld.type))
            continue
        arr = table.column(fld.name)
        if arr.type != fld.type:
            try:
                arr = arr.cast(fld.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise IntegrityError(
                    f"{where}: column {fld.name!r} is {arr.type} in the file, expected {fld.type}"
                ) from None
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=expected)


def check_lengths(table: pa.Table, target: LoadTarget, where: str) -> None:
    """Raise ValueTooLongError for the first value longer (in UTF-8 bytes, as Redshift
    counts) than its VARCHAR/VARBYTE, naming table, column and primary key."""
    for col in target.columns:
        m = re.match(r"^(?:VARCHAR|VARBYTE)\((\d+)\)$", column_type(col).warehouse)
        if not m:
            continue
        limit = int(m[1])
        arr = table.column(col.name)
        if arr.null_count == len(arr):
            continue
        lengths = pc.binary_length(arr)
        too_long = pc.greater(lengths, limit)
        if not pc.any(too_long).as_py():
            continue
        i = pc.index(too_long, True).as_py()
        key = ", ".join(f"{k}={table.column(k)[i].as_py()!r}" for k in target.primary_key)
        raise ValueTooLongError(
            f"table {target.qualified} (source {target.source_name}): column {col.name!r} "
            f"holds a value of {lengths[i].as_py()} bytes, longer than its warehouse type "
            f"{column_type(col).warehouse} allows, in the row with primary key ({key}) "
            f"[{where}]; nothing was loaded (values are never truncated)"
        )


_HEX = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), dtype=np.uint8).reshape(256, 2)


def bytea_text(arr: pa.ChunkedArray) -> pa.ChunkedArray:
    """Binary values as PostgreSQL's hex bytea input (`\\x0aff`), vectorized."""
    chunks = []
    for chunk in arr.chunks:
        chunk = chunk.cast(pa.binary())
        bufs = chunk.buffers()
        offsets = np.frombuffer(bufs[1], dtype=np.int32)[
            chunk.offset : chunk.offset + len(chunk) + 1
        ]
        data = (
            np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
        )
        hexed = _HEX[data[offsets[0] : offsets[-1]]].reshape(-1)
        new_offsets = ((offsets - offsets[0]) * 2).astype(np.int32)
        validity = chunk.is_valid().buffers()[1] if chunk.null_count else None
        text = pa.StringArray.from_buffers(
            len(chunk),
            pa.py_buffer(new_offsets.tobytes()),
            pa.py_buffer(hexed.tobytes()),
            validity,
            chunk.null_count,
        )
        chunks.append(pc.binary_join_element_wise(pa.scalar("\\x"), text, ""))
    return pa.chunked_array(chunks, pa.string())


def _prepare(client: Any, bucket: str, f: FileEntry, target: LoadTarget) -> pa.Table:
    where = f"s3://{bucket}/{f.key}"
    body = _fetch(client, bucket, f)
    table = pq.read_table(pa.BufferReader(body))
    if table.num_rows != f.rows:
        raise IntegrityError(
            f"{where}: {table.num_rows} rows, but its manifest says {f.rows}; nothing was loaded"
        )
    table = conform(table, target, where)
    check_lengths(table, target, where)
    for i, fld in enumerate(table.schema):
        if pa.types.is_binary(fld.type):  # CSV has no bytes: PostgreSQL's hex bytea text
            table = table.set_column(i, fld.name, bytea_text(table.column(i)))
    return table


_CSV_OPTIONS = pacsv.WriteOptions(include_header=False, quoting_style="needed")


def csv_chunks(table: pa.Table, batch_rows: int = CSV_BATCH_ROWS) -> Iterator[memoryview]:
    """CSV for `COPY ... (FORMAT csv)`: Arrow quotes every string, so "" is an empty string
    and an unquoted empty field is NULL; timestamps print microseconds."""
    for batch in table.to_batches(max_chunksize=batch_rows):
        out = io.BytesIO()
        pacsv.write_csv(batch, out, _CSV_OPTIONS)
        yield out.getbuffer()


def _copy_postgres(
    conn: WarehouseConnection, s3: Any, target: LoadTarget, files: Sequence[FileEntry]
) -> None:
    """Stream the files into the staging table; the next file downloads and decodes while
    the current one is being copied."""
    client = s3.client()
    pending: deque[Future[pa.Table]] = deque()
    queue = iter(files)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="s3rs-load") as pool:

        def submit() -> None:
            f = next(queue, None)
            if f is not None:
                pending.append(pool.submit(_prepare, client, s3.bucket, f, target))

        def chunks() -> Iterator[memoryview]:
            submit()
            submit()
            while pending:
                table = pending.popleft().result()
                submit()
                yield from csv_chunks(table)

        try:
            conn.copy_from_stdin(postgres_copy_sql(target), chunks())
        finally:
            for fut in pending:
                fut.cancel()


# ------------------------------------------------------------------ COPY, Redshift side


class _RangeFile(io.RawIOBase):
    """A seekable read-only view of an S3 object through ranged GETs (parquet footers)."""

    def __init__(self, client: Any, bucket: str, key: str, size: int, tail: bytes):
        self.client, self.bucket, self.key, self.size = client, bucket, key, size
        self.tail = tail  # the object's last len(tail) bytes, already fetched
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        tail_start = self.size - len(self.tail)
        if self.pos >= tail_start:
            data = self.tail[self.pos - tail_start : end - tail_start]
        else:
            rng = f"bytes={self.pos}-{end - 1}"
            data = self.client.get_object(Bucket=self.bucket, Key=self.key, Range=rng)[
                "Body"
            ].read()
        self.pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def file_columns(client: Any, bucket: str, f: FileEntry) -> list[str]:
    """The column names of a parquet object, from its footer; checks size, md5 (ETag of a
    single-part upload) and row count against the manifest entry."""
    where = f"s3://{bucket}/{f.key}"
    resp = client.get_object(Bucket=bucket, Key=f.key, Range="bytes=-65536")
    tail = resp["Body"].read()
    total = int(resp["ContentRange"].rsplit("/", 1)[1]) if "ContentRange" in resp else len(tail)
    etag = resp.get("ETag", "").strip('"')
    if total != f.bytes or ("-" not in etag and etag and etag != f.md5):
        raise IntegrityError(
            f"{where}: {total} bytes, ETag {etag}, but its manifest says {f.bytes} bytes, md5 "
            f"{f.md5}; nothing was loaded"
        )
    meta = pq.ParquetFile(_RangeFile(client, bucket, f.key, total, tail)).metadata
    if meta.num_rows != f.rows:
        raise IntegrityError(
            f"{where}: {meta.num_rows} rows, but its manifest says {f.rows}; nothing was loaded"
        )
    return list(meta.schema.to_arrow_schema().names)


def _copy_redshift(
    conn: WarehouseConnection,
    warehouse: WarehouseResource,
    s3: Any,
    target: LoadTarget,
    partition_key: str,
    files: Sequence[FileEntry],
) -> None:
    """COPY maps parquet columns by position, so files are grouped by their column list;
    files written before a source column was added go through their own staging table."""
    if not warehouse.iam_role:
        raise ConfigError(
            "the warehouse is Redshift but no IAM role is configured (S3RS_REDSHIFT_IAM_ROLE): "
            "COPY needs one to read s3://" + s3.bucket
        )
    client = s3.client()
    known = {c.name for c in target.columns}
    groups: dict[tuple[str, ...], list[FileEntry]] = {}
    for f in files:
        cols = tuple(file_columns(client, s3.bucket, f))
        unknown = [c for c in cols if c not in known]
        if unknown or len(set(cols)) != len(cols):
            raise IntegrityError(
                f"s3://{s3.bucket}/{f.key}: columns {list(cols)} do not fit "
                f"{target.qualified}'s source columns"
            )
        groups.setdefault(cols, []).append(f)
    for n, (cols, group) in enumerate(groups.items()):
        key = manifest_key(s3, target, partition_key, group)
        client.put_object(
            Bucket=s3.bucket,
            Key=key,
            Body=json.dumps(manifest(s3.bucket, group), indent=1).encode(),
            ContentType="application/json",
        )
        url = f"s3://{s3.bucket}/{key}"
        if list(cols) == target.column_names:
            conn.execute(redshift_copy_sql(url, warehouse.iam_role))
        else:
            side = f"{STAGE_TABLE}_{n}"
            conn.execute(create_stage_sql(target, "redshift", cols, name=side))
            conn.execute(redshift_copy_sql(url, warehouse.iam_role, table=side))
            conn.execute(stage_fill_sql(cols, side))
            conn.execute(drop_stage_sql(side))
