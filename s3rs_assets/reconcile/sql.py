"""The SQL reconcile sends, as pure builders: (text, parameters) in, nothing executed.

One `TableSQL` per side ("mysql", "postgres" or "redshift") builds, for a segment
(keys.py): the per-child (count, checksum) query of a split, the leaf fetch of (key text,
key, cursor, row hash), lookups by key, and the warehouse statements of a repair. Tests
assert the Redshift texts exactly, like the load's.

Every name is validated and quoted through `identifiers`; values are `%s` parameters
(both drivers and pymysql use that style). MySQL texts double their literal `%` because
they always run with parameters.

Scope: rows with a cursor below the run's safety bound, or NULL (a NULL or zero-date
cursor is never synced, and reconcile is how such rows arrive). Rows at or above the bound
belong to the next sync and are left out on both sides; in the warehouse, rows
soft-deleted by an earlier reconcile (`_s3rs_deleted_at` set) count as absent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from s3rs_assets.identifiers import mysql_quote, mysql_table, pg_quote, pg_table
from s3rs_assets.int_hash import IntHashSQL, Side, is_integer
from s3rs_assets.load import LoadTarget
from s3rs_assets.load.sql import warehouse_type
from s3rs_assets.reconcile.keys import Segment, Split
from s3rs_assets.types import INTEGER_TYPES, SPATIAL, TEMPORAL, SourceColumn, invalid_date
from s3rs_assets.verify import (
    mysql_field,
    mysql_hash_field,
    mysql_row_hash,
    sha256_hex,
    warehouse_field,
    warehouse_hash_field,
    warehouse_row_hash,
)

Columns = Literal["key", "all"]
#: the warehouse column a soft delete sets (deletes: soft in tables.yaml)
DELETED_AT = "_s3rs_deleted_at"
#: the session temp table holding a repair's keys inside the load transaction
KEYS_TABLE = "s3rs_reconcile_keys"
#: keys per lookup statement
KEY_BATCH = 500

Query = tuple[str, list[Any]]


@dataclass(frozen=True)
class TableSQL:
    """The SQL of one side for one table. `table` is the MySQL `schema.table` on the
    MySQL side and the warehouse `schema.table` otherwise; `soft_deletes` says the
    warehouse table has the DELETED_AT column (its set rows are out of scope)."""

    side: Side
    schema: str
    table: str
    target: LoadTarget
    columns: Columns = "key"
    soft_deletes: bool = False

    # ------------------------------------------------------------------ pieces

    @property
    def mysql(self) -> bool:
        return self.side == "mysql"

    def q(self, name: str) -> str:
        return mysql_quote(name) if self.mysql else pg_quote(name)

    @property
    def qualified(self) -> str:
        if self.mysql:
            return mysql_table(self.schema, self.table)
        return pg_table(self.schema, self.table)

    def _col(self, name: str) -> SourceColumn:
        return next(c for c in self.target.columns if c.name == name)

    def field(self, col: SourceColumn) -> str:
        return mysql_field(col) if self.mysql else warehouse_field(col, self.side)  # type: ignore[arg-type]

    def hash_field(self, col: SourceColumn) -> str:
        """A value as the row hash covers it: `field`, dates and times as integers."""
        if self.mysql:
            return mysql_hash_field(col)
        return warehouse_hash_field(col, self.side)  # type: ignore[arg-type]

    def _concat(self, fields: list[str]) -> str:
        if self.mysql:
            return f"CONCAT({', '.join(fields)})" if len(fields) > 1 else fields[0]
        return " || ".join(fields)

    def key_text(self) -> str:
        """The key's canonical text: its fields joined by '|'."""
        fields = [self.field(self._col(k)) for k in self.target.primary_key]
        sep = "'|'"
        joined: list[str] = []
        for f in fields:
            joined += [f, sep]
        return self._concat(joined[:-1])

    def hashed_columns(self) -> list[SourceColumn]:
        """What the row hash covers: key and cursor, or every carried column."""
        if self.columns == "all":
            keys = [self._col(k) for k in self.target.primary_key]
            rest = [c for c in self.target.columns if c.name not in self.target.primary_key]
            return keys + rest
        return [self._col(k) for k in (*self.target.primary_key, self.target.cursor)]

    def row_hash(self) -> str:
        if self.arithmetic:
            return self.ints.row_hash()
        fields = [self.hash_field(c) for c in self.hashed_columns()]
        if self.mysql:
            return mysql_row_hash(fields, non_null=True)
        return warehouse_row_hash(fields, self.side, non_null=True)  # type: ignore[arg-type]

    @property
    def ints(self) -> IntHashSQL:
        """The integer-arithmetic row hash of this side (int_hash.py)."""
        return IntHashSQL(self.side, self.target)

    @property
    def arithmetic(self) -> bool:
        """Key mode on integer key columns (one or several) and a date/time cursor hashes
        with integer arithmetic instead of SHA-256 over text: no per-row formatting, the same
        numbers on each side. See `s3rs_assets.int_hash` for why it has no blind spot."""
        return self.columns == "key" and self.ints.applies

    def _key_digits(self, start: int, count: int) -> str:
        """Hex digits of the SHA-256 of the key's text, which string-key segments are cut by
        (MariaDB's SHA2 costs ~0.25 s less per 1M keys than its MD5)."""
        return sha256_hex(self.key_text(), self.side, start, count)

    @property
    def first_key(self) -> str:
        return self.q(self.target.primary_key[0])

    def scope(self) -> str:
        """Rows in scope; one parameter, the safety bound."""
        c = self.q(self.target.cursor)
        sql = f"({c} IS NULL OR {c} < %s)"
        if self.soft_deletes and not self.mysql:
            sql += f" AND {self.q(DELETED_AT)} IS NULL"
        return sql

    def segment(self, seg: Segment) -> Query:
        """The segment's predicate."""
        parts: list[str] = []
        params: list[Any] = []
        if seg.lo is not None and not seg.open_lo:
            parts.append(f"{self.first_key} > %s")
            params.append(seg.lo)
        if seg.hi is not None and not seg.open_hi:
            parts.append(f"{self.first_key} <= %s")
            params.append(seg.hi)
        if seg.prefix:
            parts.append(f"{self._key_digits(1, len(seg.prefix))} = %s")
            params.append(seg.prefix)
        return (" AND ".join(parts) or "1 = 1"), params

    def _where(self, seg: Segment, bound: Any) -> Query:
        pred, params = self.segment(seg)
        return f"{pred} AND {self.scope()}", [*params, bound]

    def child_index(self, sp: Split) -> Query:
        """The expression numbering a row's child in `sp`, clamped for open ends.

        `k0 - lo` must stay in BIGINT: a span of 2^62 or more (keys near both ends of
        BIGINT) is computed in DECIMAL, and in MySQL a key below `lo` (a row inserted
        after the bounds were read) is raised to `lo` first, so an UNSIGNED key never goes
        negative (error 1690)."""
        if not sp.by_interval:
            return self._key_digits(len(sp.parent.prefix) + 1, sp.digits), []
        assert sp.parent.lo is not None and sp.parent.hi is not None
        k0 = self.first_key
        integral = is_integer(self._col(self.target.primary_key[0]))
        lo, params = sp.parent.lo + 1, [sp.parent.lo + 1]
        if sp.parent.hi - sp.parent.lo >= 2**62:
            k0 = f"CAST({k0} AS {'NUMERIC' if self.side == 'postgres' else 'DECIMAL(20,0)'})"
            integral = False
        elif integral and not self.mysql:  # an INTEGER column: `k0 - lo` in BIGINT
            k0 = f"CAST({k0} AS BIGINT)"
        if self.side == "mysql":
            idx = f"(GREATEST({k0}, %s) - %s) DIV %s"
            params = [lo, lo]
        elif integral:  # BIGINT division truncates like DIV; DIV would go through NUMERIC
            idx = f"({k0} - %s) / %s"  # per row (+12 % of PostgreSQL's checksum CPU)
        elif self.side == "postgres":
            idx = f"DIV({k0} - %s, %s)"
        else:  # DECIMAL(20,0) (BIGINT UNSIGNED) on Redshift
            idx = f"FLOOR(({k0} - %s) / %s)"
        sql = f"LEAST(GREATEST({idx}, 0), %s)"
        return sql, [*params, sp.width, sp.count - 1]

    # ---------------------------------------------------------------- queries

    def bounds(self) -> str:
        """MIN and MAX of an integer first key column (index ends in MySQL)."""
        return f"SELECT MIN({self.first_key}), MAX({self.first_key}) FROM {self.qualified}"

    def split_checksums(self, sp: Split, bound: Any) -> Query:
        """(child, rows, sum of row hashes) of each non-empty child of `sp.parent`."""
        child, cparams = self.child_index(sp)
        where, wparams = self._where(sp.parent, bound)
        return self._checksums(child, cparams, where, wparams)

    def _prefix_in(self, prefixes: Sequence[str], bound: Any) -> Query:
        """Rows in scope whose key hash starts with one of `prefixes` (all one length)."""
        assert prefixes and len({len(p) for p in prefixes}) == 1
        n = len(prefixes[0])
        marks = ", ".join(["%s"] * len(prefixes))
        return f"{self._key_digits(1, n)} IN ({marks}) AND {self.scope()}", [*prefixes, bound]

    def prefix_split_checksums(self, prefixes: Sequence[str], digits: int, bound: Any) -> Query:
        """`split_checksums` of many hash-prefix segments at once (no interval, prefixes of
        one length, each split by `digits` more digits): one scan instead of one per
        segment, since no index serves a hash prefix. The child column is the whole longer
        prefix (parent prefix + label)."""
        where, wparams = self._prefix_in(prefixes, bound)
        return self._checksums(self._key_digits(1, len(prefixes[0]) + digits), [],
                               where, wparams)

    def _checksums(self, child: str, cparams: list[Any], where: str,
                   wparams: list[Any]) -> Query:
        """(child, rows, sum of row hashes) grouped by the expression `child`."""
        total = "CAST(SUM({h}) AS DECIMAL(38,0))" if self.side == "redshift" else "SUM({h})"
        if self.arithmetic and self.side == "postgres":
            sql = self.ints.postgres_sums(child, self.qualified, where)
            return sql, [*cparams, *wparams]
        if self.side == "postgres":
            # The row hash in a subquery (OFFSET 0: never inlined), so the GROUP BY sees
            # (child, hash) pairs only. Without it PostgreSQL may sort the scanned rows,
            # every column of them, by the child before it hashes them: on 1M rows of 22
            # columns, with a row estimate far below the truth (a freshly loaded table), an
            # external merge sort of ~300 MB through temp files per checksum pass.
            sql = (
                f"SELECT {self.q('s3rs_child')}, COUNT(*), "
                f"COALESCE(SUM({self.q('s3rs_hash')}), 0) "
                f"FROM (SELECT {child} AS {self.q('s3rs_child')}, "
                f"{self.row_hash()} AS {self.q('s3rs_hash')} "
                f"FROM {self.qualified} WHERE {where} OFFSET 0) AS {self.q('s3rs_rows')} "
                "GROUP BY 1"
            )
            return sql, [*cparams, *wparams]
        sql = (
            f"SELECT {child} AS {self.q('s3rs_child')}, COUNT(*), "
            f"COALESCE({total.format(h=self.row_hash())}, 0) "
            f"FROM {self.qualified} WHERE {where} GROUP BY 1"
        )
        return sql, [*cparams, *wparams]

    def leaf_rows(self, seg: Segment, bound: Any) -> Query:
        """(key text, key columns..., cursor, row hash) of every row of `seg` in scope."""
        return self._leaf_rows(*self._where(seg, bound))

    def prefix_leaf_rows(self, prefixes: Sequence[str], bound: Any) -> Query:
        """`leaf_rows` of many hash-prefix segments in one scan (see prefix_split_checksums)."""
        return self._leaf_rows(*self._prefix_in(prefixes, bound))

    def _leaf_rows(self, where: str, params: list[Any]) -> Query:
        keys = ", ".join(self.q(k) for k in self.target.primary_key)
        sql = (
            f"SELECT {self.key_text()}, {keys}, {self.q(self.target.cursor)}, "
            f"{self.row_hash()} FROM {self.qualified} WHERE {where}"
        )
        return sql, params

    def _key_in(self, n: int) -> str:
        keys = self.target.primary_key
        if len(keys) == 1:
            return f"{self.q(keys[0])} IN ({', '.join(['%s'] * n)})"
        row = "(" + ", ".join(["%s"] * len(keys)) + ")"
        cols = "(" + ", ".join(self.q(k) for k in keys) + ")"
        if self.side == "redshift":  # no row-value IN on Redshift
            one = "(" + " AND ".join(f"{self.q(k)} = %s" for k in keys) + ")"
            return "(" + " OR ".join([one] * n) + ")"
        return f"{cols} IN ({', '.join([row] * n)})"

    def lookup(self, keys: Sequence[Sequence[Any]], select: str, bound: Any = None) -> Query:
        """`select` for the rows whose key is one of `keys` (any cursor, any state; with a
        `bound`, only the rows in scope)."""
        params: list[Any] = [v for k in keys for v in k]
        where = self._key_in(len(keys))
        if bound is not None:
            where = f"({where}) AND {self.scope()}"
            params.append(bound)
        return f"SELECT {select} FROM {self.qualified} WHERE {where}", params

    def key_cursor_select(self) -> str:
        """Key text, cursor (and on the warehouse, the soft-delete stamp) for lookups."""
        out = f"{self.key_text()}, {self.q(self.target.cursor)}"
        if not self.mysql:
            out += f", {self.q(DELETED_AT)}" if self.soft_deletes else ", NULL"
        return out


def first_key_is_integer(target: LoadTarget) -> bool:
    """True when the first key column is an integer on both sides (BIGINT UNSIGNED, a
    DECIMAL(20,0) in the warehouse, included; TINYINT(1), a boolean, not)."""
    col = next(c for c in target.columns if c.name == target.primary_key[0])
    return col.data_type in INTEGER_TYPES and not col.column_type.startswith("tinyint(1)")


def mysql_select_list(target: LoadTarget) -> str:
    """The columns as a repair file needs them from pymysql: zero dates as NULL, booleans
    as 0/1, BIT(n), YEAR, TIME and spatial values (WKB) as the backup's readers see them."""
    out = []
    for c in target.columns:
        q = mysql_quote(c.name)
        if c.data_type in TEMPORAL:
            out.append(f"IF({invalid_date(q)}, NULL, {q}) AS {q}")
        elif c.data_type in SPATIAL:
            out.append(f"ST_AsBinary({q}) AS {q}")
        elif c.data_type in ("bit", "year") or c.column_type.startswith("tinyint(1)"):
            out.append(f"CAST({q} AS UNSIGNED) AS {q}")
        elif c.data_type == "float":  # the text protocol would round it to 6 digits
            out.append(f"CAST({q} AS DOUBLE) AS {q}")
        elif c.data_type == "time":
            out.append(f"CAST({q} AS CHAR) AS {q}")
        else:
            out.append(q)
    return ", ".join(out)


# ------------------------------------------------------------------ warehouse repairs


def add_deleted_at_sql(target: LoadTarget) -> str:
    return (
        f"ALTER TABLE {pg_table(target.schema, target.table)} "
        f"ADD COLUMN {pg_quote(DELETED_AT)} TIMESTAMP"
    )


def create_keys_sql(target: LoadTarget, dialect: str) -> str:
    """The temp table of a repair's keys: key columns, the cursor the diff saw in the
    warehouse (`s3rs_seen`) and the action ('delete' or 'replace')."""
    by_name = {c.name: c for c in target.columns}
    cols = [
        f"    {pg_quote(k)} {warehouse_type(by_name[k], dialect)}"  # type: ignore[arg-type]
        for k in target.primary_key
    ]
    cols.append(f"    {pg_quote('s3rs_seen')} TIMESTAMP")
    cols.append(f"    {pg_quote('s3rs_action')} VARCHAR(8)")
    return f"CREATE TEMP TABLE {pg_quote(KEYS_TABLE)} (\n" + ",\n".join(cols) + "\n)"


def insert_keys_sql(target: LoadTarget, n_rows: int) -> str:
    names = [*target.primary_key, "s3rs_seen", "s3rs_action"]
    row = "(" + ", ".join(["%s"] * len(names)) + ")"
    cols = ", ".join(pg_quote(n) for n in names)
    return f"INSERT INTO {pg_quote(KEYS_TABLE)} ({cols}) VALUES " + ", ".join([row] * n_rows)


def _matches(target: LoadTarget, actions: str) -> str:
    t = pg_table(target.schema, target.table)
    k = pg_quote(KEYS_TABLE)
    c = pg_quote(target.cursor)
    seen = pg_quote("s3rs_seen")
    keys = " AND ".join(f"{t}.{pg_quote(n)} = {k}.{pg_quote(n)}" for n in target.primary_key)
    return (
        f"{keys}\n  AND ({t}.{c} = {k}.{seen} OR ({t}.{c} IS NULL AND {k}.{seen} IS NULL))\n"
        f"  AND {k}.{pg_quote('s3rs_action')} IN ({actions})"
    )


def delete_keys_sql(target: LoadTarget, soft: bool) -> str:
    """Delete the target rows still exactly as the diff saw them (same key, same cursor):
    rows to replace, and (hard deletes) rows deleted in MySQL. A row a sync changed since
    the diff has another cursor and is left alone. No aliases: Redshift takes none here."""
    t = pg_table(target.schema, target.table)
    actions = "'replace'" if soft else "'replace', 'delete'"
    return f"DELETE FROM {t}\nUSING {pg_quote(KEYS_TABLE)}\nWHERE {_matches(target, actions)}"


def soft_delete_sql(target: LoadTarget) -> str:
    """Stamp `_s3rs_deleted_at` (parameter: the time) on rows deleted in MySQL, still as
    the diff saw them."""
    t = pg_table(target.schema, target.table)
    return (
        f"UPDATE {t} SET {pg_quote(DELETED_AT)} = %s\n"
        f"FROM {pg_quote(KEYS_TABLE)}\n"
        f"WHERE {_matches(target, chr(39) + 'delete' + chr(39))}\n"
        f"  AND {t}.{pg_quote(DELETED_AT)} IS NULL"
    )


def drop_keys_sql() -> str:
    return f"DROP TABLE {pg_quote(KEYS_TABLE)}"
