"""What s3rs asks MySQL directly (pymysql, never Spark): table shape, clock, chunk plans.

    table.py    the table as the catalog describes it (`describe`), its clock check
    bound.py    MySQL's clock and the safety bound (open transactions, statements in flight)
    probes.py   index probes of the keyset: first/last row, chunk plans, rows not read
"""

from s3rs_assets.source.bound import (
    Blocker,
    SafetyBound,
    blockers,
    safety_bound,
    server_now,
    server_utc,
)
from s3rs_assets.source.probes import (
    count_between,
    first_row,
    last_row,
    nth_row,
    plan_chunk,
    plan_window,
    source_counts,
    with_key_spans,
)
from s3rs_assets.source.table import SourceTable, check_clock, describe, describe_many

__all__ = [
    "Blocker",
    "SafetyBound",
    "SourceTable",
    "blockers",
    "check_clock",
    "count_between",
    "describe",
    "describe_many",
    "first_row",
    "last_row",
    "nth_row",
    "plan_chunk",
    "plan_window",
    "safety_bound",
    "server_now",
    "server_utc",
    "source_counts",
    "with_key_spans",
]
