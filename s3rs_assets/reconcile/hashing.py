"""The integer-arithmetic row hash of key mode, and why it has no blind spot.

Key mode on integer key columns and a DATE/DATETIME/TIMESTAMP cursor hashes each row with
integer arithmetic that MySQL, PostgreSQL and Redshift compute identically in BIGINT
(`sql.TableSQL._arithmetic_hash` writes it for each; `row_hash` below is the same function
in Python, the reference the tests compare all sides with). It replaces MD5 over the
row's text there: no per-row formatting, no string functions.

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
   TIMESTAMPDIFF.)
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
(every column, of every type), hash the row's canonical text with MD5 (verify.py).
The one common way to integer digits of a string is slices of its MD5: 3 digits of 28 bits
from MD5(key text) times the cursor's digits cost 6.2-6.6 s of MySQL CPU and 6.9-7.4 s of
PostgreSQL CPU on 1M rows (a VARCHAR(32) key), against 1.6-1.7 s and 1.8 s for today's one
MD5 over (key, cursor) text (2026-11-27): neither database shares the MD5 between the
digits and the two products, and even computed once it is the same MD5 the text hash
needs, so the product would only add work and trade exactness for an 84-bit digest.
"""

from __future__ import annotations

from datetime import date, datetime

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
