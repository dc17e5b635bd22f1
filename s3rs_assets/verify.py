"""Compare a table in MySQL and in the warehouse, partition by partition.

For each partition window [start, end) of the cursor column, both sides report the row
count and an order-independent checksum: the sum over rows of a hash of (primary key,
cursor). On integer key columns and a date/time cursor it is `int_hash`'s integer
arithmetic (62 bits, no per-row text: about half the CPU of MD5 in both databases, and no
blind shift); otherwise a 60-bit hash of `pk1|pk2|...|cursor`, the first 15 hex digits of
the SHA-256 of that text, every value printed the same way on both sides (timestamps always
with six fractional digits, booleans as 0/1, decimals with their scale, bytes as
lower-case hex). A deleted row changes the count; a row whose key or cursor differs
changes the checksum. Values other than key and cursor are not compared.

Sums are exact: MySQL sums the hashes as DECIMAL (SUM of an integer returns DECIMAL),
PostgreSQL as NUMERIC, Redshift as DECIMAL(38,0) (2^62 times any realistic row count
fits).

`mysql_field` / `warehouse_field` extend the same per-type text to any column, for
reconcile's row hashes: NULL (and a MySQL zero or zero-in-date value, which s3rs carries as
NULL) prints as
`N`, text values carry their length in bytes (`5:hello`) so a separator inside a value
cannot shift the next one, and floating-point values print in the shortest exact form on
both sides (PostgreSQL's `1e+300` is written `1e300`, as MySQL writes it; FLOAT is
printed as the exact DOUBLE it widens to, since MySQL prints FLOAT with six digits).
Reconcile's row hashes take dates and times from `mysql_hash_field` / `warehouse_hash_field`
instead: the same value as an integer (days, or microseconds, since 1970), cheaper to make.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from s3rs_assets.config import TableConfig
from s3rs_assets.connections import Dialect, WarehouseConnection
from s3rs_assets.errors import ConfigError
from s3rs_assets.identifiers import mysql_quote, mysql_table, pg_quote, pg_table, split_qualified
from s3rs_assets.int_hash import IntHashSQL, Side
from s3rs_assets.load import LoadTarget
from s3rs_assets.types import (
    INTEGER_TYPES,
    TEMPORAL,
    SourceColumn,
    column_type,
    invalid_date,
)

if TYPE_CHECKING:
    from s3rs_assets.warehouse import WarehouseResource

#: partitions per query (one CASE branch each)
BATCH = 100


@dataclass(frozen=True)
class PartitionCheck:
    partition: str
    mysql_rows: int
    warehouse_rows: int
    mysql_checksum: int
    warehouse_checksum: int
    ok: bool
    start: datetime | None = None
    end: datetime | None = None

    def describe(self) -> str:
        if self.ok:
            return f"{self.partition}: ok ({self.mysql_rows} rows)"
        what = []
        if self.mysql_rows != self.warehouse_rows:
            what.append(f"{self.mysql_rows} rows in MySQL, {self.warehouse_rows} in the warehouse")
        if self.mysql_checksum != self.warehouse_checksum:
            what.append("checksums of (primary key, cursor) differ")
        return f"{self.partition}: MISMATCH: {'; '.join(what)}"


def _mysql_text(col: SourceColumn) -> str:
    q = mysql_quote(col.name)
    t = column_type(col).warehouse
    if t == "GEOMETRY":  # the WKB the readers carry
        return f"LOWER(HEX(ST_AsBinary({q})))"
    if t == "TIMESTAMP":
        return f"DATE_FORMAT({q}, '%%Y-%%m-%%d %%H:%%i:%%s.%%f')"
    if t == "DATE":
        return f"DATE_FORMAT({q}, '%%Y-%%m-%%d')"
    if t == "BOOLEAN":
        return f"IF({q} <> 0, '1', '0')"
    if t.startswith("VARBYTE"):
        return f"LOWER(HEX({q}))"
    if t.startswith("VARCHAR") and column_type(col).select_cast is None:
        return f"CONVERT({q} USING utf8mb4)"
    if column_type(col).select_cast == "UNSIGNED":  # BIT(n), YEAR: as the reader reads them
        return f"CAST(CAST({q} AS UNSIGNED) AS CHAR)"
    if "zerofill" in col.column_type:  # CAST prints 000042; + 0 is the value (42, 1.500)
        return f"CAST({q} + 0 AS CHAR)"
    return f"CAST({q} AS CHAR)"


def _warehouse_text(col: SourceColumn, dialect: Dialect) -> str:
    q = pg_quote(col.name)
    t = column_type(col).warehouse
    if t == "GEOMETRY":  # BYTEA of WKB on PostgreSQL, GEOMETRY on Redshift
        return f"ENCODE({q}, 'hex')" if dialect == "postgres" else f"TO_HEX(ST_AsBinary({q}))"
    if t == "TIMESTAMP":
        return f"TO_CHAR({q}, 'YYYY-MM-DD HH24:MI:SS.US')"
    if t == "DATE":
        return f"TO_CHAR({q}, 'YYYY-MM-DD')"
    if t == "BOOLEAN":
        return f"CASE WHEN {q} THEN '1' ELSE '0' END"
    if t.startswith("VARBYTE"):
        return f"ENCODE({q}, 'hex')" if dialect == "postgres" else f"TO_HEX({q})"
    if t.startswith("VARCHAR"):
        return q
    if t in ("REAL", "DOUBLE PRECISION"):
        return f"REPLACE(CAST({q} AS VARCHAR), 'e+', 'e')"
    return f"CAST({q} AS VARCHAR)"


def _is_text(col: SourceColumn) -> bool:
    return column_type(col).warehouse.startswith("VARCHAR")


#: character sets whose bytes are already UTF-8: reconcile's text needs no CONVERT
UTF8_CHARSETS = ("utf8mb4", "utf8mb3", "utf8")


def _mysql_field_text(col: SourceColumn) -> str:
    """`_mysql_text`, minus the work that cannot change the bytes (CPU per row is most of
    an all-columns reconcile): no CONVERT of a column already in UTF-8 (JSON in MariaDB
    too), and CAST instead of DATE_FORMAT where MySQL prints the same text (DATE, and
    DATETIME/TIMESTAMP with six fractional digits)."""
    q = mysql_quote(col.name)
    text = _mysql_text(col)
    if text == f"CONVERT({q} USING utf8mb4)" and col.charset in UTF8_CHARSETS:
        return q
    wtype = column_type(col).warehouse
    if (wtype == "DATE" and col.data_type == "date") or (
        wtype == "TIMESTAMP" and col.column_type.endswith("(6)")
    ):
        return f"CAST({q} AS CHAR)"
    return text


def mysql_field(col: SourceColumn) -> str:
    """One value as reconcile hashes it in MySQL (see the module docstring)."""
    q = mysql_quote(col.name)
    text = _mysql_field_text(col)
    wtype = column_type(col).warehouse
    if wtype == "BOOLEAN":  # IF(NULL <> 0, ...) would print '0'
        text = f"IF({q} IS NULL, NULL, {text})"
    elif wtype == "REAL":  # MySQL prints FLOAT with 6 digits: print the exact value
        text = f"CAST(CAST({q} AS DOUBLE) AS CHAR)"
    if _is_text(col):
        text = f"CONCAT(LENGTH({text}), ':', {text})"
    if col.data_type in TEMPORAL:  # zero dates travel as NULL
        text = f"IF({invalid_date(q)}, NULL, {text})"
    return f"COALESCE({text}, 'N')"


def warehouse_field(col: SourceColumn, dialect: Dialect) -> str:
    """The same value as `mysql_field` prints it, in the warehouse."""
    q = pg_quote(col.name)
    text = _warehouse_text(col, dialect)
    wtype = column_type(col).warehouse
    if wtype == "BOOLEAN":
        text = f"CASE WHEN {q} IS NULL THEN NULL ELSE {text} END"
    elif wtype == "REAL":
        text = f"REPLACE(CAST(CAST({q} AS DOUBLE PRECISION) AS VARCHAR), 'e+', 'e')"
    if _is_text(col):
        text = f"CAST(OCTET_LENGTH({text}) AS VARCHAR) || ':' || {text}"
    return f"COALESCE({text}, 'N')"


#: MySQL types whose CAST(... AS CHAR) is the text CONCAT gives them (not FLOAT/DOUBLE,
#: nor BIT/YEAR or a TINYINT(1) boolean: `mysql_field` prints those otherwise)
PLAIN_NUMBERS = frozenset({*INTEGER_TYPES, "decimal"})

#: seconds from MySQL's day 0 (TO_SECONDS) to 1970-01-01, and days (TO_DAYS)
_TO_SECONDS_1970 = 62167219200
_TO_DAYS_1970 = 719528


def mysql_hash_field(col: SourceColumn) -> str:
    """`mysql_field`, but a DATE, DATETIME or TIMESTAMP as an integer: its days, or its
    microseconds, since 1970 (floor, so negative before 1970), or 'N'. The row hashes use
    this form, the key's text keeps `mysql_field`'s. It holds the same information as the
    text (every digit of the value, down to the microsecond) and costs less on both sides:
    TO_SECONDS and TO_DAYS are NULL for exactly the zero and zero-in-date values (which
    s3rs carries as NULL), so no MONTH/DAYOFMONTH test and no formatting per row; in
    PostgreSQL, integer date arithmetic instead of TO_CHAR (-0.45 s of CPU per 1M values
    of a TIMESTAMP column, -0.35 s for a DATE; 2026-11-27)."""
    q = mysql_quote(col.name)
    if col.data_type not in TEMPORAL:
        field = mysql_field(col)
        if field == f"COALESCE(CAST({q} AS CHAR), 'N')" and col.data_type in PLAIN_NUMBERS:
            # CONCAT(_WS) prints an integer or a DECIMAL as CAST(... AS CHAR) does: the
            # same text without a CAST per value, and without the COALESCE where MySQL
            # holds no NULL (-0.05 to -0.1 s of MariaDB's CPU on the 1M-row reconcile table)
            return f"COALESCE({q}, 'N')" if col.nullable else q
        return field
    if col.data_type == "date":
        return f"COALESCE(TO_DAYS({q}) - {_TO_DAYS_1970}, 'N')"
    return f"COALESCE((TO_SECONDS({q}) - {_TO_SECONDS_1970}) * 1000000 + MICROSECOND({q}), 'N')"


def warehouse_hash_field(col: SourceColumn, dialect: Dialect) -> str:
    """The same integer as `mysql_hash_field`, in the warehouse. PostgreSQL: whole days
    (date minus date, an integer) times 86,400,000,000, plus the time of day in
    microseconds: `date_part('epoch', TIME)` is a double below 86,400 with six decimals,
    and times 10^6 it rounds back to the exact integer (it is below 2^37, far inside the
    53 bits of a double: the two roundings move it by less than 10^-5). Redshift: whole
    seconds (DATEDIFF counts second boundaries: a floor) and the microseconds past them."""
    if col.data_type not in TEMPORAL:
        return warehouse_field(col, dialect)
    q = pg_quote(col.name)
    if dialect == "postgres":
        if col.data_type == "date":
            text = f"({q} - DATE '1970-01-01')"
        else:
            text = (
                f"(CAST({q} AS DATE) - DATE '1970-01-01') * CAST(86400000000 AS BIGINT) + "
                f"CAST(ROUND(date_part('epoch', CAST({q} AS TIME)) * 1000000) AS BIGINT)"
            )
    elif col.data_type == "date":
        text = f"DATEDIFF(day, CAST('1970-01-01' AS DATE), {q})"
    else:
        text = (
            f"CAST(DATEDIFF(second, CAST('1970-01-01' AS TIMESTAMP), {q}) AS BIGINT) * 1000000"
            f" + DATEDIFF(microsecond, DATE_TRUNC('second', {q}), {q})"
        )
    return f"COALESCE(CAST({text} AS VARCHAR), 'N')"


#: the row hash keeps the first 60 bits of a SHA-256 (15 hex digits: BIGINT on every side)
HASH_HEX_DIGITS = 15


def mysql_row_hash(fields: list[str], *, non_null: bool = False) -> str:
    """60-bit hash of the `|`-joined texts, as an exact integer (SUM returns DECIMAL).

    SHA-256, not MD5: MariaDB's SHA2 costs less than its MD5 (on the 22-column, 1M-row
    reconcile table 3.0-3.2 s of its CPU against 3.8 s; PostgreSQL's sha256 of the same
    bytes 2.9-3.0 s against MD5's 3.1; 2026-11-29), and a digest's first 60 bits are as
    good a row hash either way. With `non_null` (every field COALESCEd) one CONCAT_WS joins
    them (-0.15 s of MariaDB's CPU against CONCAT's 43 arguments on that table)."""
    if non_null and len(fields) > 1:
        text = f"CONCAT_WS('|', {', '.join(fields)})"
    else:
        text = "CONCAT(" + ", '|', ".join(fields) + ")"
    return f"CAST(CONV({sha256_hex(text, 'mysql', 1, HASH_HEX_DIGITS)}, 16, 10) AS UNSIGNED)"


def warehouse_row_hash(fields: list[str], dialect: Dialect, *, non_null: bool = False) -> str:
    """The warehouse twin of `mysql_row_hash`. With `non_null` (every field COALESCEd, as
    `warehouse_field` makes them), PostgreSQL joins them with one CONCAT_WS instead of a
    chain of `||` that copies the growing text at each step (-4 % of its CPU on a 22-column
    row); CONCAT_WS would skip a NULL, so a field that may be NULL keeps `||`. PostgreSQL
    hashes the text's UTF-8 bytes (`convert_to`, as MariaDB's SHA2 and Redshift's do) and
    hex-encodes only the digest's first 8 bytes."""
    text = " || '|' || ".join(fields)
    if non_null and dialect == "postgres" and len(fields) > 1:
        text = f"CONCAT_WS('|', {', '.join(fields)})"
    n = HASH_HEX_DIGITS
    if dialect == "redshift":  # STRTOL reads either case
        return f"CAST(STRTOL(SUBSTRING(SHA2({text}, 256), 1, {n}), 16) AS DECIMAL(38,0))"
    return f"('x' || {sha256_hex(text, dialect, 1, n)})::BIT({4 * n})::BIGINT"


def sha256_hex(text: str, side: Side, start: int, count: int) -> str:
    """Hex digits `start`..`start + count - 1` (1-based, lower case) of the SHA-256 of
    `text`'s UTF-8 bytes, the same on every side: the row hash keeps the first 15,
    reconcile cuts string keys into segments by a prefix. PostgreSQL has no hex SHA-256
    function: it hex-encodes only the digest bytes the digits need (encoding all 32 costs
    ~0.05 s more per 1M rows). Redshift's documentation does not state the case of SHA2's
    digits, so they are lowered there (the segment labels compared with them are)."""
    if side == "mysql":
        return f"SUBSTRING(SHA2({text}, 256), {start}, {count})"
    if side == "redshift":
        return f"LOWER(SUBSTRING(SHA2({text}, 256), {start}, {count}))"
    digest = f"substring(sha256(convert_to({text}, 'UTF8')) from 1 for {(start + count) // 2})"
    return f"SUBSTR(encode({digest}, 'hex'), {start}, {count})"


def _key_columns(target: LoadTarget) -> list[SourceColumn]:
    by_name = {c.name: c for c in target.columns}
    return [by_name[k] for k in (*target.primary_key, target.cursor)]


def mysql_hash_expr(target: LoadTarget) -> str:
    return mysql_row_hash([_mysql_text(c) for c in _key_columns(target)])


def warehouse_hash_expr(target: LoadTarget, dialect: Dialect) -> str:
    return warehouse_row_hash([_warehouse_text(c, dialect) for c in _key_columns(target)], dialect)


def _bucket(quoted_cursor: str, n: int) -> str:
    """Which window a row is in; one window needs no test (nor grouping: `_grouped`)."""
    if n == 1:
        return "0"
    whens = " ".join(
        f"WHEN {quoted_cursor} >= %s AND {quoted_cursor} < %s THEN {i}" for i in range(n)
    )
    return f"CASE {whens} END"


def _grouped(n: int, by: str) -> str:
    """One window is one aggregate row: no GROUP BY, whose temporary table MariaDB fills row
    by row (-0.3 s of its CPU per 1M rows; a sync's check is mostly one partition)."""
    return "" if n == 1 else f" GROUP BY {by}"


def mysql_checksum_sql(source: str, target: LoadTarget, n: int) -> str:
    """Per-partition (index, rows, checksum) for `n` windows; params (`_params`): start, end
    per window, then the overall start and end (one window: its start and end)."""
    schema, table = split_qualified(source, "table")
    c = mysql_quote(target.cursor)
    ints = IntHashSQL("mysql", target)
    h = ints.row_hash() if ints.applies else mysql_hash_expr(target)
    return (
        f"SELECT {_bucket(c, n)} AS `p`, COUNT(*), COALESCE(SUM({h}), 0) "
        f"FROM {mysql_table(schema, table)} WHERE {c} >= %s AND {c} < %s{_grouped(n, '`p`')}"
    )


def warehouse_checksum_sql(target: LoadTarget, dialect: Dialect, n: int) -> str:
    """`mysql_checksum_sql`'s twin, the same parameters."""
    c = pg_quote(target.cursor)
    where = f"{c} >= %s AND {c} < %s"
    ints = IntHashSQL(dialect, target)
    if ints.applies and dialect == "postgres":
        return ints.postgres_sums(_bucket(c, n), pg_table(target.schema, target.table), where,
                                  grouped=n > 1)
    h = ints.row_hash() if ints.applies else warehouse_hash_expr(target, dialect)
    return (
        f'SELECT {_bucket(c, n)} AS "p", COUNT(*), COALESCE(SUM({h}), 0) '
        f"FROM {pg_table(target.schema, target.table)} WHERE {where}{_grouped(n, '1')}"
    )


def _params(windows: Sequence[tuple[str, datetime, datetime]]) -> list[Any]:
    if len(windows) == 1:
        return [windows[0][1], windows[0][2]]
    params: list[Any] = []
    for _, start, end in windows:
        params += [start, end]
    params += [min(w[1] for w in windows), max(w[2] for w in windows)]
    return params


def _collect(rows: Sequence[Sequence[Any]]) -> dict[int, tuple[int, int]]:
    return {int(p): (int(n), int(s)) for p, n, s in rows if p is not None}


#: one partition's window: (partition key, start, end)
Window = tuple[str, datetime, datetime]


def _mysql_batch(
    mysql_conn: Any, source: str, target: LoadTarget, windows: Sequence[Window],
    params: list[Any],
) -> dict[int, tuple[int, int]]:
    with mysql_conn.cursor() as cur:
        cur.execute(mysql_checksum_sql(source, target, len(windows)), params)
        return _collect(cur.fetchall())


def mysql_sides(
    mysql_conn: Any, source: str, target: LoadTarget, partitions: Sequence[Window]
) -> dict[Window, tuple[int, int]]:
    """MySQL's (rows, checksum) of each window, one query per BATCH windows, as
    `verify_table` asks them."""
    out: dict[Window, tuple[int, int]] = {}
    for i in range(0, len(partitions), BATCH):
        windows = list(partitions[i : i + BATCH])
        got = _mysql_batch(mysql_conn, source, target, windows, _params(windows))
        out.update({w: got.get(j, (0, 0)) for j, w in enumerate(windows)})
    return out


def verify_table(
    mysql_conn: Any,
    warehouse: WarehouseResource,
    target: LoadTarget,
    table_cfg: TableConfig,
    partitions: list[Window],
    wconn: WarehouseConnection | None = None,
    known: Mapping[Window, tuple[int, int]] | None = None,
) -> list[PartitionCheck]:
    """Row count and (primary key, cursor) checksum per partition window, on both sides;
    on the warehouse connection `wconn` (autocommit) when given, else on one of its own.
    `known` holds MySQL's side of some windows already (`mysql_sides`, computed earlier
    by a sync run's load step: check_ahead.py); a batch of windows it all holds is not
    asked of MySQL again.

    Each batch's two queries run at the same time (MySQL's in a thread): each is a scan
    by its own server, so the comparison takes the slower side's time, not the sum."""
    if target.cursor != table_cfg.cursor:
        raise ConfigError(
            f"table {table_cfg.name}: cursor {table_cfg.cursor!r} in tables.yaml but "
            f"{target.cursor!r} in the load target"
        )
    for name, start, end in partitions:
        if not start < end:
            raise ConfigError(f"table {table_cfg.name}: partition {name} has start >= end")
    checks: list[PartitionCheck] = []
    dialect = warehouse.dialect
    opened = nullcontext(wconn) if wconn is not None else warehouse.connection(autocommit=True)

    def mysql_side(windows: list[Window], params: list[Any]) -> dict[int, tuple[int, int]]:
        if known is not None and all(w in known for w in windows):
            return {j: known[w] for j, w in enumerate(windows)}
        return _mysql_batch(mysql_conn, table_cfg.name, target, windows, params)

    # leaving the pool waits for MySQL's query: the caller's connection is never left
    # busy in a thread after a failure on the warehouse side
    with opened as wconn, ThreadPoolExecutor(1, thread_name_prefix="s3rs-verify") as pool:
        exists = wconn.query(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
            (target.schema, target.table),
        )
        for i in range(0, len(partitions), BATCH):
            windows = partitions[i : i + BATCH]
            params = _params(windows)
            mine_later = pool.submit(mysql_side, windows, params)
            theirs = (
                _collect(wconn.query(warehouse_checksum_sql(target, dialect, len(windows)), params))
                if exists
                else {}  # not created yet: every MySQL row is missing there
            )
            mine = mine_later.result()
            for j, (name, start, end) in enumerate(windows):
                m_rows, m_sum = mine.get(j, (0, 0))
                w_rows, w_sum = theirs.get(j, (0, 0))
                checks.append(
                    PartitionCheck(
                        partition=name,
                        mysql_rows=m_rows,
                        warehouse_rows=w_rows,
                        mysql_checksum=m_sum,
                        warehouse_checksum=w_sum,
                        ok=m_rows == w_rows and m_sum == w_sum,
                        start=start,
                        end=end,
                    )
                )
    return checks


@dataclass(frozen=True)
class Unpartitioned:
    """MySQL rows no partition window holds, so no partition comparison can see them."""

    null_cursor: int
    zero_date_cursor: int
    before_start: int
    after_last: int  # dated at or after the end of the current partition: the future

    @property
    def total(self) -> int:
        return self.null_cursor + self.zero_date_cursor + self.before_start + self.after_last

    def describe(self) -> str:
        parts = [
            (self.after_last, "dated after the current partition (the future)"),
            (self.null_cursor, "with a NULL cursor"),
            (self.zero_date_cursor, "with a zero-date cursor"),
            (self.before_start, "dated before the first partition"),
        ]
        return ", ".join(f"{n:,} {what}" for n, what in parts if n) or "none"


def unpartitioned_rows(
    mysql_conn: Any, table_cfg: TableConfig, start: datetime, end: datetime
) -> Unpartitioned:
    """Count the rows outside [start, end), the span of every partition of the table."""
    schema, table = split_qualified(table_cfg.name, "table")
    c = mysql_quote(table_cfg.cursor)
    with mysql_conn.cursor() as cur:
        cur.execute(
            f"SELECT SUM({c} IS NULL), SUM({c} = 0), SUM({c} <> 0 AND {c} < %s), "
            f"SUM({c} >= %s) FROM {mysql_table(schema, table)} "
            f"WHERE {c} IS NULL OR {c} < %s OR {c} >= %s",
            (start, end, start, end),
        )
        row = cur.fetchone()
    return Unpartitioned(*(int(v or 0) for v in row))
