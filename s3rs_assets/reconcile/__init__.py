"""Reconcile: find and repair what a cursor-based sync cannot see.

A sync by (cursor, primary key) misses rows deleted in MySQL, rows changed without a new
cursor value, rows whose cursor moved backwards, rows with a NULL cursor and rows the
application stamped below the watermark after it passed. Reconcile compares the two
databases by primary key instead, with checksums computed inside both, and repairs through
the same exactly-once load.

    keys.py    key segments both databases select identically (integer intervals, SHA-256
               prefixes of the key's canonical text), and how a segment splits
    sql.py     the SQL text, pure builders for MySQL, PostgreSQL and Redshift (the
               integer-arithmetic row hash of key mode is `s3rs_assets.int_hash`,
               shared with verify.py's checksums)
    diff.py    the bisection: per-segment checksums, then leaf rows compared by key
    repair.py  re-read by key, the repair file (new per pass), its load with deletes in
               the same transaction, the check of every repaired key afterwards
    report.py  what a pass is asked (options) and answers (report, exit decision, JSON)
    run.py     one pass over one table (`reconcile_table`) and its record; without
               `apply` a pass writes nothing anywhere

The `reconciled` asset check and the optional schedules are in `s3rs_assets.checks`.

What is compared: rows with a cursor below the run's safety bound, or NULL, on both sides.
`columns="key"` (default) hashes (primary key, cursor): it finds missing, extra and
re-stamped rows. `columns="all"` hashes every carried column, and so also finds edits that
did not touch the cursor, at the price of reading every column.
"""

from s3rs_assets.reconcile.diff import KINDS, Difference, DiffResult
from s3rs_assets.reconcile.report import REPORT_VERSION, ReconcileOptions, ReconcileReport
from s3rs_assets.reconcile.run import reconcile_table

__all__ = [
    "KINDS",
    "REPORT_VERSION",
    "DiffResult",
    "Difference",
    "ReconcileOptions",
    "ReconcileReport",
    "reconcile_table",
]
