"""The integer-arithmetic row hash of (primary key, cursor), and why it has no blind spot.

On integer key columns and a DATE/DATETIME/TIMESTAMP cursor, reconcile's key mode and
verify's per-partition checksum (so `matches_mysql` and `s3rs verify`) hash each row with
integer arithmetic that MySQL, PostgreSQL and Redshift compute identically in BIGINT
(`IntHashSQL` writes it for each; `row_hash` below is the same function in Python, the
reference the tests compare all sides with). It replaces MD5 over the row's text there: no
per-row formatting, no string functions (on 1M rows about half the CPU in both databases).

The construction
----------------
1. **Digits.** The row becomes a vector of integers `a_1 .. a_n`, each with |a_i| < 2^29:
   every key column in base R = 2^29 (truncated division, so a negative value gives
   non-positive digits; 1 digit for TINYINT..MEDIUMINT, 2 for INT, 3 for BIGINT, signed or
   unsigned), then the cursor: a DATE as its days since 1970; a DATETIME/TIMESTAMP as
   `(s MOD 512) * 10^6 + us` and `s DIV 512`, with `s` its whole seconds since 1970 (floor)
   and `us` its microseconds (both below 2^29 in magnitude for years 1..9999). A NULL (or
   zero-date) cursor has the high digit -2^28, below year 1. Digits of fixed count from
   truncated division are **injective**: two different rows (other key or other cursor)
   differ in at least one digit. (Seconds and microseconds come from each database's
   cheapest exact functions: MySQL's TO_SECONDS and MICROSECOND cost a fraction of
   TIMESTAMPDIFF; PostgreSQL's float8 `date_part` less than its numeric EXTRACT.)
2. **Factors.** Each digit gets an offset `t_ji` in [2^29, p - 2^29], p = 2^31 - 1 (a
   prime), so `f_ji = a_i + t_ji` lies in [1, p - 1]: never 0 modulo p, and computed
   without any reduction.
3. **Products.** `h_j = f_j1 * f_j2 * ... * f_jn mod p` (each product of two numbers
   below 2^31 fits BIGINT, reduced after every step), for two offset sets j = 1, 2; the
   row hash is `h_1 + 2^31 * h_2` (62 bits), summed exactly per range (DECIMAL).

Why no shift is blind (the algebra)
-----------------------------------
Work in the field GF(p). Two digit values differ by less than 2^30 < p, so a digit that
changes changes by a **non-zero** element; every factor is non-zero too.

* Rows that differ in **one digit** i never collide, in either h_j:
  `h' - h = (a'_i - a_i) * prod_{k != i} f_jk`, a product of non-zero elements of a
  field, hence non-zero. This covers a cursor moved by any multiple of 512 s (only
  the high digit moves) or within its 512-second block, a DATE moved by any number of
  days, and a key changed in one digit (two BIGINT keys less than 2^29 apart in the same
  block, any two TINYINT..MEDIUMINT keys). The old hash reduced the cursor and the key
  modulo p first, so a shift by exactly p = 2^31 - 1 us (or a key
  +p) gave the same input: every such row collided. Here no reduction happens before the
  digits are taken, and the digits determine the row.
* Rows that differ in **several digits** (a shift that crosses a block boundary, e.g.
  by 2^31 - 1 us or by a round number of seconds) collide in h_j only where
  `D(a) = prod_k (a_k + d_k + t_jk) - prod_k (a_k + t_jk)` vanishes. D is not the zero
  polynomial (the coefficient of `prod_{k != i} a_k` is d_i != 0 for any changed digit
  i) and it is affine in each single digit: for fixed other digits, at most ONE value of
  the low cursor digit (of 512 * 10^6 consecutive ones) is a root, unless D vanishes in it
  identically, which needs the other factors to collide (the argument recurses). So for
  any fixed shift at most one cursor in 5 * 10^8 collides per component, and both
  components must collide at once: two independent roots coincide about once in p. A shift is never
  blind "systematically"; the rate is of the order of 2^-60, like the MD5 prefix it
  replaces.
* **Sums** hide a set of changes only if their effects cancel modulo p in both
  components and in the exact sum. Two rows swapping cursors change `h_j` by
  `(K_1 - K_2) * (C_2 - C_1)`, K and C the key and cursor sub-products: zero only when
  K_1 = K_2 or C_1 = C_2, which the first point rules out for keys (cursors) differing in
  one digit and makes a 1-in-p coincidence otherwise. (A hash linear in the digits would
  have a kernel: fixed shifts invisible for every row. The product is the least costly
  form without one.)

The cost: per row n - 1 multiplications and MODs per component; digits are a MOD or a
DIV each. String key columns have no exact integer digits in SQL (MySQL can only read
bytes as integers through CONV(HEX(...)) of fixed-length slices, PostgreSQL has no
common function for it), so tables with string or decimal keys, and the `all` mode
(every column, of every type), hash the row's canonical text with SHA-256 (verify.py;
MD5 until 2026-11-29, the figures below).
The one common way to integer digits of a string is slices of its MD5: 3 digits of 28 bits
from MD5(key text) times the cursor's digits cost 6.2-6.6 s of MySQL CPU and 6.9-7.4 s of
PostgreSQL CPU on 1M rows (a VARCHAR(32) key), against 1.6-1.7 s and 1.8 s for today's one
MD5 over (key, cursor) text (2026-11-27): neither database shares the MD5 between the
digits and the two products, and even computed once it is the same MD5 the text hash
needs, so the product would only add work and trade exactness for an 84-bit digest.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal

from s3rs_assets.identifiers import mysql_quote, pg_quote
from s3rs_assets.load import LoadTarget
from s3rs_assets.types import INTEGER_TYPES, TEMPORAL, SourceColumn

Side = Literal["mysql", "postgres", "redshift"]

#: the prime modulus
P = 2**31 - 1
#: the digit base: |digit| < RADIX, so two digits differ by less than 2 * RADIX < P
RADIX = 2**29
#: seconds per block of the cursor's low digit: |511 * 10^6 + 999999| < RADIX
SECONDS_BLOCK = 512
#: the cursor's high digit (days, or seconds // 512) of a NULL or zero-date cursor: below
#: year 1 (-719,162 days; -121,358,588 blocks), inside the digit range
NULL_DAYS = -(2**28)
#: digits one row may have (key digits + 2 cursor digits): offsets exist for these
MAX_DIGITS = 16
_DIGITS = {"tinyint": 1, "smallint": 1, "mediumint": 1, "int": 2, "integer": 2, "bigint": 3}
_EPOCH = datetime(1970, 1, 1)


def digits_for(data_type: str) -> int:
    """Digits of an integer column of MySQL `data_type` (signed or unsigned)."""
    return _DIGITS[data_type]


def offset(component: int, position: int) -> int:
    """t_ji: a fixed odd-looking constant in [2^29, P - 2^29] per component and digit."""
    spread = (2654435769 * (2 * position + component + 1) + 40503 * component) % (2**30 - 1)
    return RADIX + spread


def _trunc_divmod(v: int, by: int) -> tuple[int, int]:
    """SQL's DIV and MOD: truncated toward zero, the remainder has the dividend's sign."""
    q = abs(v) // by * (1 if v >= 0 else -1)
    return q, v - q * by


def int_digits(value: int, n: int) -> list[int]:
    """The `n` digits of an integer key value, as the SQL computes them."""
    out = [_trunc_divmod(value, RADIX)[1]]
    for i in range(1, n):
        q = _trunc_divmod(value, RADIX**i)[0]
        out.append(q if i == n - 1 else _trunc_divmod(q, RADIX)[1])
    return out


def cursor_digits(cursor: date | datetime | None, is_date: bool) -> list[int]:
    """The cursor's digits, as the SQL computes them: a DATE as [days since 1970], a
    DATETIME/TIMESTAMP as [(s MOD 512) * 10^6 + microseconds, s DIV 512] with s its whole
    seconds since 1970 (floor); NULL as [NULL_DAYS] or [0, NULL_DAYS]."""
    if is_date:
        if cursor is None:
            return [NULL_DAYS]
        day = cursor.date() if isinstance(cursor, datetime) else cursor
        return [(day - _EPOCH.date()).days]
    if cursor is None:
        return [0, NULL_DAYS]
    if not isinstance(cursor, datetime):
        cursor = datetime(cursor.year, cursor.month, cursor.day)
    d = cursor - _EPOCH
    s = d.days * 86400 + d.seconds
    q, r = _trunc_divmod(s, SECONDS_BLOCK)
    return [r * 1_000_000 + d.microseconds, q]


def row_digits(key: list[tuple[int, int]], cursor: list[int]) -> list[int]:
    """Digits of a row: each (key value, digit count), then the cursor's digits."""
    out: list[int] = []
    for value, n in key:
        out += int_digits(value, n)
    return [*out, *cursor]


def row_hash(digits: list[int]) -> int:
    """h_1 + 2^31 * h_2 of a row's digits (the module docstring)."""
    parts = []
    for j in range(2):
        h = 1
        for i, d in enumerate(digits):
            h = h * (d + offset(j, i)) % P if i else d + offset(j, i)
        parts.append(h)
    return parts[0] + 2**31 * parts[1]


def is_integer(col: SourceColumn) -> bool:
    """An integer in BIGINT on both sides (BIGINT UNSIGNED is a DECIMAL(20,0) there)."""
    return col.data_type in INTEGER_TYPES and not (
        col.data_type == "bigint" and col.unsigned
    ) and not col.column_type.startswith("tinyint(1)")


def integer_digits(col: SourceColumn) -> int:
    """How many RADIX digits an integer column needs (0: not an integer)."""
    if col.data_type not in INTEGER_TYPES or col.column_type.startswith("tinyint(1)"):
        return 0
    return digits_for(col.data_type)


@dataclass(frozen=True)
class IntHashSQL:
    """`row_hash` as SQL of one side, over `target`'s primary key and cursor."""

    side: Side
    target: LoadTarget

    @property
    def mysql(self) -> bool:
        return self.side == "mysql"

    def q(self, name: str) -> str:
        return mysql_quote(name) if self.mysql else pg_quote(name)

    def _col(self, name: str) -> SourceColumn:
        return next(c for c in self.target.columns if c.name == name)

    @property
    def applies(self) -> bool:
        """Integer key columns (one or several) and a date/time cursor, within MAX_DIGITS."""
        t = self.target
        return (
            all(integer_digits(self._col(k)) for k in t.primary_key)
            and self._col(t.cursor).data_type in TEMPORAL
            and len(self.digits()) <= MAX_DIGITS
        )

    def digits(self, parts: dict[str, str] | None = None) -> list[str]:
        """The row's digits as SQL: each key column's, then the cursor's. `parts` names
        columns of a subquery holding `cursor_parts()` (computed once per row); by default
        the parts are computed in place."""
        out: list[str] = []
        for k in self.target.primary_key:
            col = self._col(k)
            out += [self._int_digit(self.q(k), col, i) for i in range(integer_digits(col))]
        p = parts or self.cursor_parts()
        if "days" in p:
            return [*out, f"COALESCE({p['days']}, {NULL_DAYS})"]
        s, b = p["s"], SECONDS_BLOCK
        low = f"MOD({s}, {b}) * 1000000" + (f" + {p['us']}" if "us" in p else "")
        div = f"{s} DIV {b}" if self.mysql else f"{s} / {b}"
        return [*out, f"COALESCE({low}, 0)", f"COALESCE({div}, {NULL_DAYS})"]

    def cursor_parts(self) -> dict[str, str]:
        """The cursor as integers: whole days since 1970 (DATE), or whole seconds since
        1970 (`s`, floor) and microseconds (`us`, when the type has a fraction); NULL for a
        NULL or zero(-in)-date cursor. The cheapest exact functions of each database."""
        col = self._col(self.target.cursor)
        c = self.q(col.name)
        if col.data_type == "date":
            if self.mysql:
                return {"days": f"(TO_DAYS({c}) - 719528)"}
            if self.side == "postgres":
                return {"days": f"({c} - DATE '1970-01-01')"}
            return {"days": f"DATEDIFF(day, CAST('1970-01-01' AS DATE), {c})"}
        fraction = "(" in col.column_type and not col.column_type.endswith("(0)")
        if self.mysql:
            out = {"s": f"(TO_SECONDS({c}) - 62167219200)", "us": f"MICROSECOND({c})"}
        elif self.side == "postgres":
            # date_part's float8, not EXTRACT's numeric (-0.07 s of the backend per 1M rows),
            # and exact here: whole seconds (date_trunc) and the seconds field in microseconds
            # (below 6 * 10^7) are integers a double holds exactly
            out = {"s": f"CAST(date_part('epoch', date_trunc('second', {c})) AS BIGINT)",
                   "us": f"MOD(CAST(date_part('microseconds', {c}) AS BIGINT), 1000000)"}
        else:
            out = {"s": f"DATEDIFF(second, CAST('1970-01-01' AS TIMESTAMP), {c})",
                   "us": f"DATEDIFF(microsecond, DATE_TRUNC('second', {c}), {c})"}
        if not fraction:
            del out["us"]
        return out

    def _mod(self, v: str) -> str:
        return f"MOD({v}, {RADIX})"

    def _div(self, v: str, by: int, *, integral: bool) -> str:
        """`v` divided by `by`, truncated toward zero (as MOD's remainder expects)."""
        if self.side == "mysql":
            return f"{v} DIV {by}"
        if integral:  # integer division truncates on both
            return f"({v} / {by})"
        if self.side == "postgres":
            return f"CAST(DIV({v}, {by}) AS BIGINT)"
        return f"CAST(FLOOR({v} / {by}) AS BIGINT)"  # DECIMAL(20,0): never negative

    def _int_digit(self, v: str, col: SourceColumn, i: int) -> str:
        """Digit `i` of an integer column (RADIX-ary, truncated division)."""
        n = integer_digits(col)
        integral = is_integer(col)
        if i == 0:
            return self._mod(v)
        if i == n - 1:
            return f"({self._div(v, RADIX**i, integral=integral)})"
        return self._mod(self._div(v, RADIX**i, integral=integral))

    def row_hash(self, parts: dict[str, str] | None = None) -> str:
        """`row_hash` as SQL: two products of (digit + offset) modulo 2^31-1. Every factor
        lies in [1, 2^31 - 2], so each product fits BIGINT; the first offset is a BIGINT so
        that PostgreSQL and Redshift multiply in 64 bits."""
        out = []
        for j in range(2):
            h = ""
            for i, d in enumerate(self.digits(parts)):
                t = offset(j, i)
                if not h:
                    big = str(t) if self.mysql else f"CAST({t} AS BIGINT)"
                    h = f"({d} + {big})"
                else:
                    h = f"MOD({h} * ({d} + {t}), {P})"
            out.append(h)
        h = f"({out[0]} + 2147483648 * {out[1]})"
        return f"CAST({h} AS DECIMAL(38,0))" if self.side == "redshift" else h

    def postgres_sums(self, group: str, table: str, where: str, grouped: bool = True) -> str:
        """PostgreSQL's (group, rows, sum of row hashes) of the rows `where` selects from
        `table`, grouped by the expression `group`. OFFSET 0 keeps PostgreSQL from inlining
        the subquery: the cursor's parts (date_part, the costly part) are computed
        once per row, not once per digit. Parameters: `group`'s, then `where`'s. Not
        `grouped`: one aggregate row, `group` (a constant) its first column."""
        parts = self.cursor_parts()
        names = {k: pg_quote(f"s3rs_{k}") for k in parts}
        inner = ", ".join(
            ([f'{group} AS "s3rs_group"'] if grouped else [])
            + [*(pg_quote(k) for k in self.target.primary_key),
               *(f"{v} AS {names[k]}" for k, v in parts.items())]
        )
        first, tail = ('"s3rs_group"', " GROUP BY 1") if grouped else (group, "")
        return (
            f"SELECT {first}, COUNT(*), COALESCE(SUM({self.row_hash(names)}), 0) "
            f'FROM (SELECT {inner} FROM {table} WHERE {where} OFFSET 0) AS "s3rs_rows"{tail}'
        )
