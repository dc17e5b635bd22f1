"""Target tables from the MySQL schema: creation, schema evolution, `ensure_target`.

Target tables are created from the MySQL columns through `types.column_type` (the one type
mapping). A new source column is added; a change that is a widening (VARCHAR or VARBYTE longer,
DECIMAL precision up with the same scale, SMALLINT -> INTEGER -> BIGINT) alters the column;
any other change raises SourceSchemaError, naming every incompatible column, before any DDL
runs. DDL runs before and outside the load transaction (Redshift cannot ALTER a column
type inside one); concurrent `ensure_target` calls race harmlessly: a lost race re-plans.

`ensure_target` also creates the schema's load ledger (or migrates one written before
entries carried the target's identity) and its target-state table (see ledger.py).

Comparison works on canonical type names (`canonical_type` turns information_schema's
description into the spelling `types.py` uses); planning is pure, so tests assert it.
"""

from __future__ import annotations

import re
import time
from contextlib import nullcontext

import dagster as dg

from s3rs_assets.errors import SourceSchemaError
from s3rs_assets.identifiers import pg_quote, pg_table
from s3rs_assets.load.ledger import ledger_columns, table_exists
from s3rs_assets.load.sql import (
    add_ledger_identity_sql,
    column_list,
    create_ledger_sql,
    create_state_sql,
    warehouse_type,
)
from s3rs_assets.load.target import STATE_TABLE, WIDEN_TMP_COLUMN, LoadTarget
from s3rs_assets.types import SourceColumn
from s3rs_assets.warehouse import (
    Dialect,
    WarehouseConnection,
    WarehouseResource,
    is_driver_error,
    sqlstate,
)

log = dg.get_dagster_logger("s3rs.load")

_VARCHAR = re.compile(r"^VARCHAR\((\d+)\)$")
_VARBYTE = re.compile(r"^VARBYTE\((\d+)\)$")
_DECIMAL = re.compile(r"^DECIMAL\((\d+),(\d+)\)$")
_INT_RANK = {"SMALLINT": 1, "INTEGER": 2, "BIGINT": 3}


def create_schema_sql(schema: str) -> str:
    return f"CREATE SCHEMA IF NOT EXISTS {pg_quote(schema)}"


def create_table_sql(target: LoadTarget, dialect: Dialect) -> str:
    pk = set(target.primary_key)
    lines = [
        f"    {pg_quote(c.name)} {warehouse_type(c, dialect)}{' NOT NULL' if c.name in pk else ''}"
        for c in target.columns
    ]
    lines.append(f"    PRIMARY KEY ({column_list(target.primary_key)})")
    sql = f"CREATE TABLE IF NOT EXISTS {pg_table(target.schema, target.table)} (\n"
    sql += ",\n".join(lines) + "\n)"
    if dialect == "redshift":
        # A single-column key distributes well and staging shares it, so the merge's joins
        # stay node-local; a composite key's first column may be skewed: Redshift picks.
        if len(target.primary_key) == 1:
            sql += f"\nDISTKEY ({pg_quote(target.primary_key[0])})"
        sql += f"\nSORTKEY ({pg_quote(target.cursor)})"
    return sql


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
    if not (mo and mn):
        mo, mn = _VARBYTE.match(old), _VARBYTE.match(new)
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
            f"schema change: {'; '.join(problems)} (only widening is applied: longer VARCHAR "
            "or VARBYTE, more DECIMAL precision with the same scale, SMALLINT -> INTEGER -> "
            "BIGINT). "
            "The target was left unchanged; this table is stopped until it is fixed by hand."
        )
    return groups


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


#: Errors a concurrent ensure_target can cause: duplicate schema/table/column, pg_type race
#: (PostgreSQL reports a `CREATE TABLE IF NOT EXISTS` that lost it either as 23505 on
#: pg_type's index or as 42710 "type ... already exists": both seen in test_load's racing
#: loaders).
_DDL_RACE_STATES = {"42P06", "42P07", "42701", "42710", "23505", "40001", "40P01"}


def ensure_target(
    warehouse: WarehouseResource, target: LoadTarget, given: WarehouseConnection | None = None
) -> list[str]:
    """Create the schema, the ledger and the target table, or bring the table's columns up
    to date; return the DDL statements run (empty when nothing changed). On `given`, an
    autocommit connection the caller keeps open (the load transaction that follows uses
    it: one connection per load step), else on a connection of its own."""
    dialect = warehouse.dialect
    for attempt in range(1, 4):
        opened = (
            nullcontext(given) if given is not None else warehouse.connection(autocommit=True)
        )
        with opened as conn:
            try:
                groups: list[list[str]] = []
                have_schema = conn.query(
                    "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
                    (target.schema,),
                )
                if not have_schema:
                    groups.append([create_schema_sql(target.schema)])
                ledger = ledger_columns(conn, target.schema) if have_schema else set()
                if not ledger:
                    groups.append([create_ledger_sql(target.schema)])
                elif "target_id" not in ledger:
                    groups.append([add_ledger_identity_sql(target.schema)])
                if not (have_schema and table_exists(conn, target.schema, STATE_TABLE)):
                    groups.append([create_state_sql(target.schema)])
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
