"""`s3rs reconcile -t T [--from KEY --to KEY] [--columns key|all] [--apply] [--json]`.

Thin: it builds the resources from the environment and calls `reconcile_table`, the same
function the `reconciled` asset check runs. Exit codes follow `s3rs`'s: 0 nothing differs
(or, with --apply, everything found was repaired), 1 differences remain, 2 bad input or
configuration (unknown table, --from after --to, a table never synced): nothing changed.

`--json` prints one stable document (`reconcile.REPORT_VERSION`): counts per kind,
timings, example keys, and the full list of differences; benchmarks read it.
"""

from __future__ import annotations

import contextlib
import json
import sys

import click

from s3rs_assets.cli.common import _mysql, _s3, _warehouse, echo
from s3rs_assets.config import find_table, load_tables
from s3rs_assets.errors import S3rsError
from s3rs_assets.io_manager import store_for
from s3rs_assets.reconcile import KINDS, ReconcileOptions, ReconcileReport, reconcile_table
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.waiting import waiting_now
from s3rs_assets.warehouse import WarehouseResource


def _resources() -> tuple[MySQLResource, WarehouseResource, S3Resource]:
    return _mysql(), _warehouse(), _s3()


def render(report: ReconcileReport) -> list[str]:
    """The short table `s3rs reconcile` prints."""
    d = report.diff
    lines = [
        f"{report.table} (MySQL) vs {report.target} ({report.dialect}), "
        f"rows with a cursor below {report.bound.isoformat(timespec='seconds')} or NULL, "
        f"hashing {'every column' if report.columns == 'all' else '(primary key, cursor)'}",
        f"  {d.mysql_rows:,} rows in MySQL, {d.warehouse_rows:,} in the warehouse; "
        f"{d.segments_compared:,} key ranges compared, {d.rows_fetched:,} rows fetched, "
        f"{report.timings.get('diff', 0):.2f}s",
        f"  {'KIND':<10} {'COUNT':>8}  EXAMPLE KEYS",
    ]
    examples = report.as_json(full=False)["examples"]
    what = {
        "missing": "missing in the warehouse",
        "extra": "deleted in MySQL",
        "differs": "content differs",
    }
    for kind in KINDS:
        n = report.diff.count(kind)
        keys = ", ".join(json.dumps(k, ensure_ascii=False) for k in examples.get(kind, []))
        more = " ..." if n > len(examples.get(kind, [])) else ""
        lines.append(f"  {kind:<10} {n:>8,}  {keys}{more}" + ("" if n else f"  ({what[kind]})"))
    if report.plan is not None:
        rep = report.repaired()
        lines.append(
            f"  repaired: {rep['upserted']:,} row(s) re-read from MySQL, {rep['deleted']:,} "
            f"deleted, {rep['soft_deleted']:,} soft-deleted"
            + (f"; left for the next pass: {report.plan.skipped}" if report.plan.skipped else "")
        )
    for r in report.resumed:
        lines.append(
            f"  finished the pending repair {r.file} "
            f"({'loaded now' if r.loaded else 'already in the ledger'})"
        )
    if report.pending:
        lines.append(f"  a repair is pending ({report.pending}): run with --apply to finish it")
    return lines


@click.command("reconcile")
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--from", "from_key", type=int, help="First value of the first key column.")
@click.option("--to", "to_key", type=int, help="Last value of the first key column.")
@click.option(
    "--columns",
    type=click.Choice(["key", "all"]),
    default="key",
    show_default=True,
    help="Hash (primary key, cursor), or every column (finds edits that kept the cursor).",
)
@click.option("--apply", is_flag=True, help="Repair what differs, through the load ledger.")
@click.option("--json", "as_json", is_flag=True, help="The full report as JSON.")
@click.option(
    "--threshold",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Rows per side a range may hold before its rows are fetched.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 16),
    default=2,
    show_default=True,
    help="Connections per database.",
)
@click.option("--examples", type=click.IntRange(min=0), default=10, show_default=True)
def reconcile(
    name: str,
    from_key: int | None,
    to_key: int | None,
    columns: str,
    apply: bool,
    as_json: bool,
    threshold: int,
    workers: int,
    examples: int,
) -> None:
    """Compare a table in MySQL and the warehouse by primary key; --apply repairs it.

    Finds rows missing in the warehouse, rows deleted in MySQL and rows whose content
    differs, whatever their cursor (NULL, moved backwards, stamped late).
    """
    try:
        table = find_table(load_tables(), name)
        options = ReconcileOptions(
            columns=columns,  # type: ignore[arg-type]
            apply=apply,
            from_key=from_key,
            to_key=to_key,
            threshold=threshold,
            workers=workers,
            examples=examples,
        )
        options.check(table.name)
        mysql, warehouse, s3 = _resources()
        report = reconcile_table(
            table,
            mysql,
            warehouse,
            s3,
            store_for(s3),
            options,
            log=lambda m: None if as_json else echo(m, err=True),
        )
    except S3rsError as e:
        echo(f"error: {e}", err=True, fg="red")
        sys.exit(2)
    # rows at or above the bound are not yet synced: counted apart, never a difference
    # (waiting.py; a courtesy after the report: a failure here changes no exit code)
    later = None
    with contextlib.suppress(Exception), mysql.connect() as conn:
        later = waiting_now(conn, table, report.bound)
    if as_json:
        doc = {**report.as_json(), "not_yet_synced": later.as_json() if later else None}
        echo(json.dumps(doc, indent=2, ensure_ascii=False, default=str))
    else:
        for line in render(report) + (later.lines() if later else []):
            echo(line)
    remaining = (
        report.total if not apply else sum(report.plan.skipped.values() if report.plan else [])
    )
    if remaining:
        sys.exit(1)
