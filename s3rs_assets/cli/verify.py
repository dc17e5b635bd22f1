"""`s3rs verify`: MySQL and the warehouse compared per partition."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import click

from s3rs_assets.cli.common import _dump, _mysql, _table, _warehouse, echo, friendly_errors
from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError
from s3rs_assets.load import LoadTarget
from s3rs_assets.partitions import partition_keys, time_windows, window
from s3rs_assets.source import describe, safety_bound
from s3rs_assets.verify import unpartitioned_rows, verify_table
from s3rs_assets.waiting import count_windows, waiting


def _range(table: TableConfig, from_key: str | None, to_key: str | None) -> list[str]:
    """The partition keys from --from to --to (default: all), checked."""
    keys = partition_keys(table)
    for what, key in (("--from", from_key), ("--to", to_key)):
        if key is not None and key not in keys:
            raise ConfigError(
                f"{what} {key!r} is not a partition of {table.name} "
                f"({keys[0]} .. {keys[-1]}, {table.partition})"
            )
    lo = keys.index(from_key) if from_key else 0
    hi = keys.index(to_key) if to_key else len(keys) - 1
    if lo > hi:
        raise ConfigError(f"--from {from_key} is after --to {to_key}")
    return keys[lo : hi + 1]


def _as_json(
    table: TableConfig, target: Any, checks: list[Any], outside: Any, pending: dict[str, int]
) -> dict:
    return {
        "table": table.name,
        "target": target.qualified,
        "ok": all(c.ok for c in checks),
        "not_yet_synced_per_partition": {k: n for k, n in pending.items() if n},
        "rows_outside_partitions": {
            "null_cursor": outside.null_cursor,
            "zero_date_cursor": outside.zero_date_cursor,
            "before_start": outside.before_start,
            "after_last_partition": outside.after_last,
        },
        "partitions": [
            {
                "partition": c.partition,
                "mysql_rows": c.mysql_rows,
                "warehouse_rows": c.warehouse_rows,
                "checksum_match": c.mysql_checksum == c.warehouse_checksum,
                "ok": c.ok,
            }
            for c in checks
        ],
    }


def _result(c: Any) -> str:
    if c.ok:
        return "ok"
    if c.mysql_rows != c.warehouse_rows:
        return "MISMATCH: rows differ"
    return "MISMATCH: checksum of (key, cursor) differs"


def _print(
    table: TableConfig,
    target: Any,
    dialect: str,
    checks: list[Any],
    outside: Any,
    pending: dict[str, int],
) -> None:
    """One line per partition holding rows: those compared (below the safety bound), and
    apart, in NOT YET, those not synced yet (at or above it)."""
    by_key = {c.partition: c for c in checks}
    keys = [c.partition for c in checks] + [k for k in pending if k not in by_key]
    shown = [
        k
        for k in keys
        if pending.get(k) or (k in by_key and not (by_key[k].ok and by_key[k].mysql_rows == 0))
    ]
    bad = [c for c in checks if not c.ok]
    echo(f"{table.name} (MySQL) vs {target.qualified} ({dialect})")
    echo(f"  {'PARTITION':<18} {'MYSQL ROWS':>12} {'WAREHOUSE ROWS':>15} {'NOT YET':>9}  RESULT")
    for k in shown:
        c, wait = by_key.get(k), pending.get(k, 0)
        if c is None:
            echo(f"  {k:<18} {'-':>12} {'-':>15} {wait:>9,}  not yet synced")
            continue
        echo(f"  {k:<18} {c.mysql_rows:>12,} {c.warehouse_rows:>15,} {wait:>9,}  {_result(c)}")
    empty = len(keys) - len(shown)
    waiting_rows = sum(pending.values())
    echo(
        f"{len(checks)} partition(s) compared ({empty} empty on both sides not shown): "
        + (f"{len(bad)} MISMATCH" if bad else "all match")
        + (f"; {waiting_rows:,} row(s) not yet synced, not compared (NOT YET)"
           if waiting_rows else "")
    )
    if outside.total:
        echo(
            f"warning: {table.name}: {outside.total:,} MySQL row(s) lie outside every "
            f"partition and are not compared: {outside.describe()}",
            err=True,
            fg="yellow",
        )


@click.command()
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--from", "from_key", help="First partition to compare (default: the first).")
@click.option("--to", "to_key", help="Last partition to compare (default: the current one).")
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def verify(name: str, from_key: str | None, to_key: str | None, as_json: bool) -> None:
    """Compare MySQL and the warehouse per partition (rows, checksum of key and cursor).

    Exits 1 on any mismatch. Rows at or above the safety bound (MySQL's clock less the
    table's lag, or an open write transaction) are not yet synced: counted apart (NOT YET),
    never a mismatch. Rows below it that no sync has read yet show as missing until the
    next sync.
    """
    table = _table(name)
    keys = _range(table, from_key, to_key)
    pdef = time_windows(table)
    parts = [(k, *window(pdef, k)) for k in keys]
    every = partition_keys(table)
    mysql, warehouse = _mysql(), _warehouse()
    with mysql.connect() as conn:
        src = describe(conn, table)  # what the load stage's load_target does, run-free
        target = LoadTarget.from_table_config(table, src.columns, src.primary_key)
        # Rows at or above the safety bound are not yet synced: compared by nobody
        # (sync, reconcile and matches_mysql all stop there), counted apart (waiting.py).
        bound = safety_bound(conn, table.lag, whole_days=src.cursor_is_date)
        below, above = split_at_bound(parts, bound.upper)
        checks = verify_table(conn, warehouse, target, table, below)
        pending = dict(zip([k for k, _, _ in above],
                           count_windows(conn, table, [(s, e) for _, s, e in above]),
                           strict=True))
        later = waiting(conn, table, bound)  # the same bound: its lag, what holds it
        outside = unpartitioned_rows(
            conn, table, window(pdef, every[0])[0], window(pdef, every[-1])[1]
        )
    if as_json:
        _dump({**_as_json(table, target, checks, outside, pending),
               "not_yet_synced": later.as_json()})
    else:
        _print(table, target, warehouse.dialect, checks, outside, pending)
        for line in later.lines():
            echo(line)
    if not all(c.ok for c in checks):
        sys.exit(1)


def split_at_bound(
    parts: list[tuple[str, datetime, datetime]], upper: datetime
) -> tuple[list[tuple[str, datetime, datetime]], list[tuple[str, datetime, datetime]]]:
    """Each partition's window cut at the bound: the part compared, and the part not yet
    synced (partitions wholly above the bound are only in the second)."""
    below = [(k, s, min(e, upper)) for k, s, e in parts if s < upper]
    above = [(k, max(s, upper), e) for k, s, e in parts if e > upper]
    return below, above
