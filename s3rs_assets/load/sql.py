"""The SQL a load sends, as pure builders (names and dialect in, text out), and the COPY
manifest's JSON: tests assert them exactly, Redshift's included.

Every name is quoted through `identifiers.pg_quote` (which validates it); values go as
`%s` parameters, except the two Redshift COPY needs as literals (manifest URL, IAM role),
which `sql_literal` refuses to build from anything unusual.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal

from s3rs_assets.connections import Dialect
from s3rs_assets.errors import ConfigError
from s3rs_assets.identifiers import pg_quote, pg_table
from s3rs_assets.load.target import (
    LEDGER_TABLE,
    ROW_NUMBER_COLUMN,
    STAGE_TABLE,
    STATE_TABLE,
    LoadTarget,
)
from s3rs_assets.types import VARBYTE_MAX, SourceColumn, column_type
from s3rs_assets.watermark import FileEntry

#: which ledger entries a lookup reads (see `ledger_files_sql`)
LedgerScope = Literal["identity", "identity_or_none", "all"]


def warehouse_type(col: SourceColumn, dialect: Dialect) -> str:
    ct = column_type(col)
    return ct.warehouse if dialect == "redshift" else ct.postgres


def stage_type(col: SourceColumn, dialect: Dialect) -> str:
    """The staging table's type: the warehouse type, except that Redshift's COPY fills a
    GEOMETRY column's staging twin as VARBYTE (the parquet holds WKB), converted by
    `stage_value` in the merge."""
    if dialect == "redshift" and column_type(col).spatial:
        return f"VARBYTE({VARBYTE_MAX})"
    return warehouse_type(col, dialect)


def stage_value(col: SourceColumn, dialect: Dialect) -> str:
    """How the merge's INSERT reads a staged column into the target."""
    q = pg_quote(col.name)
    if dialect == "redshift" and column_type(col).spatial:
        return f"ST_GeomFromWKB(FROM_VARBYTE({q}, 'hex'))"
    return q


def sql_literal(value: str, what: str = "value") -> str:
    """A single-quoted SQL string literal; refuses characters no S3 key or ARN needs."""
    if any(ch in value for ch in "\\\x00\n\r") or not value.isprintable():
        raise ConfigError(f"{what} {value!r} contains characters s3rs will not put in SQL")
    return "'" + value.replace("'", "''") + "'"


def column_list(names: Sequence[str], prefix: str = "") -> str:
    return ", ".join(prefix + pg_quote(n) for n in names)


# ------------------------------------------------------------------------------ ledger


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


def ledger_partitions_sql(schema: str) -> str:
    """(partition, target_id) pairs of one table's entries: which partitions a discard hits."""
    return (
        f'SELECT DISTINCT "partition_key", "target_id" FROM {pg_table(schema, LEDGER_TABLE)} '
        'WHERE "table_name" = %s'
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


def ledger_adopt_sql(schema: str) -> str:
    """Ties entries written before identities were recorded to the current table."""
    return (
        f'UPDATE {pg_table(schema, LEDGER_TABLE)} SET "target_id" = %s '
        'WHERE "table_name" = %s AND "target_id" IS NULL'
    )


def create_state_sql(schema: str) -> str:
    """One row per table: the identity s3rs last wrote into and whether it left rows there.
    An empty target that s3rs left holding rows was emptied behind its back (TRUNCATE, a
    DELETE by hand); one s3rs emptied itself (reconcile deleting every row) was not."""
    return (
        f"CREATE TABLE IF NOT EXISTS {pg_table(schema, STATE_TABLE)} (\n"
        '    "table_name" VARCHAR(128) NOT NULL,\n'
        '    "target_id" BIGINT NOT NULL,\n'
        '    "has_rows" BOOLEAN NOT NULL,\n'
        '    "load_id" VARCHAR(64) NOT NULL,\n'
        '    "updated_at" TIMESTAMP NOT NULL,\n'
        '    PRIMARY KEY ("table_name")\n'
        ")"
    )


def state_read_sql(schema: str) -> str:
    return (
        f'SELECT "target_id", "has_rows" FROM {pg_table(schema, STATE_TABLE)} '
        'WHERE "table_name" = %s'
    )


def state_write_sql(schema: str) -> list[str]:
    """Replace a table's state row (DELETE + INSERT: Redshift has no upsert), inside the
    load transaction that changed the target."""
    table = pg_table(schema, STATE_TABLE)
    return [
        f'DELETE FROM {table} WHERE "table_name" = %s',
        f'INSERT INTO {table} ("table_name", "target_id", "has_rows", "load_id", "updated_at") '
        "VALUES (%s, %s, %s, %s, %s)",
    ]


def ledger_clear_sql(schema: str) -> list[str]:
    """Forget every file loaded into a table (`watermark reset --redshift-only`): the next
    load merges them all again, which never moves a row back."""
    return [
        f'DELETE FROM {pg_table(schema, LEDGER_TABLE)} WHERE "table_name" = %s',
        f'DELETE FROM {pg_table(schema, STATE_TABLE)} WHERE "table_name" = %s',
    ]


def ledger_lookup_sql(schema: str, n_keys: int) -> str:
    marks = ", ".join(["%s"] * n_keys)
    return (
        f'SELECT "file_key", "file_md5" FROM {pg_table(schema, LEDGER_TABLE)} '
        f'WHERE "table_name" = %s AND "target_id" = %s AND "file_key" IN ({marks})'
    )


def ledger_insert_sql(schema: str, n_rows: int) -> str:
    row = "(" + ", ".join(["%s"] * len(LEDGER_COLUMNS)) + ")"
    return (
        f"INSERT INTO {pg_table(schema, LEDGER_TABLE)} ({column_list(LEDGER_COLUMNS)}) VALUES "
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


def ledger_loaded_since_sql(schema: str) -> str:
    """The partition keys of one table's files loaded at or after a time: the partitions a
    run moved rows into (checks.matches_mysql)."""
    return (
        f'SELECT DISTINCT "partition_key" FROM {pg_table(schema, LEDGER_TABLE)} '
        'WHERE "table_name" = %s AND "loaded_at" >= %s'
    )


# ------------------------------------------------------------------------ stage, COPY


def create_stage_sql(
    target: LoadTarget,
    dialect: Dialect,
    columns: Sequence[str] | None = None,
    name: str = STAGE_TABLE,
) -> str:
    """A session temp table with `columns` (default: all) in that order, the file order."""
    by_name = {c.name: c for c in target.columns}
    cols = list(columns) if columns is not None else target.column_names
    body = ",\n".join(f"    {pg_quote(n)} {stage_type(by_name[n], dialect)}" for n in cols)
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


def postgres_copy_sql(target: LoadTarget, direct: bool = False) -> str:
    """COPY into the staging table, or with `direct` into the target itself (a partition
    never loaded: transaction.py)."""
    cols = column_list(target.column_names)
    into = pg_table(target.schema, target.table) if direct else pg_quote(STAGE_TABLE)
    return f"COPY {into} ({cols}) FROM STDIN (FORMAT binary)"


def stage_fill_sql(columns: Sequence[str], source: str) -> str:
    """Move a per-schema staging table (files written before a column was added) into the
    main one; the columns the files lack stay NULL."""
    return (
        f"INSERT INTO {pg_quote(STAGE_TABLE)} ({column_list(columns)}) "
        f"SELECT {column_list(columns)} FROM {pg_quote(source)}"
    )


def staged_stats_sql(target: LoadTarget) -> str:
    """(staged rows, distinct staged keys): the first must match the manifests, the second
    tells whether any key needs de-duplicating."""
    return (
        'SELECT COALESCE(SUM("n"), 0), COUNT(*) FROM '
        f'(SELECT COUNT(*) AS "n" FROM {pg_quote(STAGE_TABLE)} '
        f'GROUP BY {column_list(target.primary_key)}) AS "keys"'
    )


def drop_stage_sql(name: str = STAGE_TABLE) -> str:
    return f"DROP TABLE {pg_quote(name)}"


# ------------------------------------------------------------------------------ merge


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


def insert_sql(target: LoadTarget, dedupe: bool = True, dialect: Dialect = "postgres") -> str:
    """Insert, per key, the newest staged row, unless the target still holds the key.

    After `delete_sql` a remaining target row for a staged key is newer than every staged
    version of it, so "still holds the key" means "holds a newer version". `dedupe=False`
    (every staged key distinct, see `staged_stats_sql`) skips the window's sort. On
    Redshift, staged WKB becomes GEOMETRY here (`stage_value`).
    """
    t = pg_table(target.schema, target.table)
    cols = column_list(target.column_names)
    values = ", ".join(stage_value(c, dialect) for c in target.columns)
    pk = column_list(target.primary_key)
    keys = " AND ".join(f'"cur".{pg_quote(k)} = "newest".{pg_quote(k)}' for k in target.primary_key)
    absent = f'NOT EXISTS (SELECT 1 FROM {t} AS "cur" WHERE {keys})'
    if not dedupe:
        return (
            f"INSERT INTO {t} ({cols})\n"
            f"SELECT {values}\n"
            f'FROM {pg_quote(STAGE_TABLE)} AS "newest"\n'
            f"WHERE {absent}"
        )
    rn = pg_quote(ROW_NUMBER_COLUMN)
    return (
        f"INSERT INTO {t} ({cols})\n"
        f"SELECT {values}\n"
        "FROM (\n"
        f"    SELECT {cols},\n"
        f"        ROW_NUMBER() OVER (PARTITION BY {pk} "
        f"ORDER BY {pg_quote(target.cursor)} DESC NULLS LAST) AS {rn}\n"
        f"    FROM {pg_quote(STAGE_TABLE)}\n"
        ') AS "newest"\n'
        f'WHERE "newest".{rn} = 1\n'
        f"  AND {absent}"
    )


def merge_sql(
    target: LoadTarget, dedupe: bool = True, dialect: Dialect = "postgres"
) -> list[str]:
    """The statements run after the COPY: the same for Redshift and PostgreSQL, but for
    Redshift's GEOMETRY columns (`stage_value`)."""
    return [delete_sql(target), insert_sql(target, dedupe, dialect), drop_stage_sql()]


# ------------------------------------------------------------------- COPY manifest JSON


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


def manifest_digest(files: Sequence[FileEntry]) -> str:
    """Deterministic in the file list, so a retried load rewrites its own manifest."""
    return hashlib.sha256("\n".join(f"{f.key} {f.md5}" for f in files).encode()).hexdigest()[:20]
