"""Splitting a table's primary-key space into segments both databases select identically.

A segment is the set of rows whose key lies in it; both sides compute a (row count, sum
of row hashes) per segment, and unequal segments are split until their rows are few
enough to fetch. The one rule: a segment's predicate must pick the same keys in MySQL and
in the warehouse, whatever either database's collation says. So segments use only:

* an integer interval `(lo, hi]` of the first primary-key column, when that column is an
  integer (integers order alike everywhere; MySQL's index scans the interval), and
* a prefix of the lower-case hex SHA-256 of the key's canonical text (`verify.mysql_field` /
  `warehouse_field`: the same bytes on both sides), for string, binary, decimal or date
  keys, and inside an interval that cannot be split further (one value of the first
  column of a composite key shared by many rows).

String keys are never compared by order: MySQL's `utf8mb4_general_ci` and PostgreSQL's
collation disagree on order and on equality ('a' = 'A' = 'a ' in MySQL), while the SHA-256 of
the stored bytes is the same on both sides. A MySQL key and a warehouse key are the same
row exactly when their canonical texts are equal (the bytes the warehouse stored are the
ones MySQL gave the backup).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

HEX = "0123456789abcdef"
#: SHA-256 has 64 hex digits: a prefix this long is a single key
MAX_PREFIX = 64


@dataclass(frozen=True)
class Segment:
    """Rows with `lo < k0 <= hi` (an open side is unbounded) and SHA-256(key text) starting
    with `prefix`. Without an integer first column, `lo`/`hi` are unused (None)."""

    lo: int | None = None
    hi: int | None = None
    open_lo: bool = True
    open_hi: bool = True
    prefix: str = ""

    def can_split_interval(self) -> bool:
        return self.lo is not None and self.hi is not None and self.hi - self.lo > 1

    def can_split(self) -> bool:
        return self.can_split_interval() or len(self.prefix) < MAX_PREFIX


@dataclass(frozen=True)
class Split:
    """How a parent segment divides into children: by interval (`width`, `count` children
    numbered 0..count-1) or by `digits` more hex digits of the key's SHA-256."""

    parent: Segment
    width: int = 0
    count: int = 0
    digits: int = 0

    @property
    def by_interval(self) -> bool:
        return self.width > 0

    def child(self, label: int | str) -> Segment:
        p = self.parent
        if not self.by_interval:
            return replace(p, prefix=p.prefix + str(label))
        i = int(label)
        assert p.lo is not None and p.hi is not None
        lo = p.lo + i * self.width
        hi = min(p.hi, lo + self.width)
        return replace(
            p,
            lo=lo,
            hi=hi,
            open_lo=p.open_lo and i == 0,
            open_hi=p.open_hi and i == self.count - 1,
        )

    def labels(self) -> list[int | str]:
        if self.by_interval:
            return list(range(self.count))
        return [_hex(i, self.digits) for i in range(16**self.digits)]


def _hex(i: int, digits: int) -> str:
    out = ""
    for _ in range(digits):
        out = HEX[i % 16] + out
        i //= 16
    return out


def split(seg: Segment, parts: int) -> Split:
    """Divide `seg` into about `parts` children: by interval while it has more than one
    integer value, then by SHA-256 digits (16 children per digit)."""
    parts = max(2, parts)
    if seg.can_split_interval():
        assert seg.lo is not None and seg.hi is not None
        span = seg.hi - seg.lo
        width = max(1, math.ceil(span / parts))
        return Split(seg, width=width, count=math.ceil(span / width))
    digits = max(1, min(MAX_PREFIX - len(seg.prefix), round(math.log(parts, 16)) or 1))
    return Split(seg, digits=digits)


def root(first_key_is_integer: bool, bounds: tuple[int, int] | None) -> Segment:
    """The whole key space: the integer interval both sides' MIN/MAX span (open at both
    ends, so a row inserted beyond them is still compared), or every hash."""
    if not first_key_is_integer or bounds is None:
        return Segment()
    lo, hi = bounds
    return Segment(lo=lo - 1, hi=max(hi, lo), open_lo=True, open_hi=True)


def restrict(seg: Segment, from_key: int | None, to_key: int | None) -> Segment:
    """`seg` limited to first-key values in [from_key, to_key] (closed both ends)."""
    if from_key is not None:
        seg = replace(seg, lo=from_key - 1, open_lo=False)
    if to_key is not None:
        seg = replace(seg, hi=to_key, open_hi=False)
    return seg
