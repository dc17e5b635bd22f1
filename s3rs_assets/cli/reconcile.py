"""`s3rs reconcile -t T [--from KEY --to KEY] [--columns key|all] [--apply] [--json]`.

Thin: it builds plain connections from the environment (connections.py: no Dagster, no
Spark is imported by this command) and calls `reconcile_table`, the same function the
`reconciled` asset check runs. Without `--apply` it only reads: nothing is
written anywhere. Exit codes follow `s3rs`'s:

* 0: nothing differs, or `--apply` repaired everything it found (differences MySQL changed
  during the pass are "not yet": shown apart, left for the next sync or pass);
* 1: differences found without `--apply`; with `--apply`, keys still different after the
  repair without a stated reason (named), differences over `--max-repairs`, or a repair
  that stopped after it began to write (the next `--apply` finishes it);
* 2: bad input, configuration or connection (unknown table or column, --from after --to,
  a table never synced, a refused login, an unreachable database or S3): nothing changed.

`--json` prints one stable document (`reconcile.REPORT_VERSION`): counts per kind,
timings, example keys, and the full list of differences; benchmarks read it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import click

from s3rs_assets import logs
from s3rs_assets.config import find_table, load_tables
from s3rs_assets.connections import mysql_from_env, s3_from_env, warehouse_from_env
from s3rs_assets.errors import S3rsError
from s3rs_assets.reconcile import KINDS, ReconcileOptions, ReconcileReport, reconcile_table
from s3rs_assets.reconcile.run import RepairIncomplete
from s3rs_assets.waiting import waiting_now


def echo(text: str = "", err: bool = False, **style: Any) -> None:
    """click.echo through the redactor (as cli.common's, without importing Dagster)."""
    text = logs.redact(text)
    if style:
        click.secho(text, err=err, **style)
    else:
        click.echo(text, err=err)


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
        )
        not_yet = report.not_yet()
        if not_yet:
            lines.append(f"  not yet (MySQL changed them during the pass; the next sync or "
                         f"pass sees them): {not_yet}")
        if report.plan.over_cap():
            lines.append(f"  NOT repaired: {report.plan.over_cap():,} difference(s) over "
                         "--max-repairs: run --apply again")
        if report.unrepaired:
            shown = ", ".join(report.unrepaired[: report.examples or 10])
            more = " ..." if len(report.unrepaired) > (report.examples or 10) else ""
            lines.append(f"  NOT repaired: {len(report.unrepaired):,} key(s) still differ "
                         f"after the repair: {shown}{more}")
    for r in report.resumed:
        lines.append(
            f"  finished the pending repair {r.file} "
            f"({'loaded now' if r.loaded else 'already in the ledger'})"
        )
    if report.pending:
        lines.append(f"  a repair is pending ({report.pending}): run with --apply to finish it")
    for note in report.notes:
        lines.append(f"  note: {note}")
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
@click.option(
    "--max-repairs",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="Differences one --apply repairs at most (the rest: run again).",
)
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
    max_repairs: int,
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
            max_repairs=max_repairs,
        )
        options.check(table.name)
        mysql, warehouse, s3 = mysql_from_env(), warehouse_from_env(), s3_from_env()
        warehouse.check()
        store = None
        if apply:  # the watermark store, as io_manager.store_for builds it outside a run
            from s3rs_assets.watermark.store import WatermarkStore

            store = WatermarkStore(s3.client(), s3.bucket, s3.layout)
        report = reconcile_table(
            table,
            mysql,  # type: ignore[arg-type]
            warehouse,  # type: ignore[arg-type]
            s3,  # type: ignore[arg-type]
            store,
            options,
            log=lambda m: None if as_json else echo(m, err=True),
        )
    except RepairIncomplete as e:
        echo(f"error: {e}", err=True, fg="red")
        sys.exit(1)
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
    if not report.ok():
        sys.exit(1)
