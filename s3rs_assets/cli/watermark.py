"""`s3rs watermark get|set|reset|list|backup-status|cleanup-backups` (`history` and
`restore`, the undo, are in `cli/watermark_history.py`).

Thin: the edits and the compare-and-swap guard are in `watermark.edits`, storage in
`watermark.store`; this module parses, asks, prints. Manual changes are compare-and-swap
updates of the record that was shown: a run writing the same table meanwhile makes the
command fail (exit 2) instead of mixing the two, and later runs only move the cursors
forward from where `set` put them.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

import click

from s3rs_assets.cli.common import (
    _dump,
    _s3_checked,
    _source_now,
    _store,
    _table,
    _warehouse,
    echo,
    friendly_errors,
)
from s3rs_assets.cli.watermark_change import manual_change
from s3rs_assets.cli.watermark_history import watermark_history, watermark_restore
from s3rs_assets.config import TableConfig, load_tables
from s3rs_assets.errors import ConfigError, S3rsError
from s3rs_assets.partitions import partition_keys, time_windows, window
from s3rs_assets.times import TIMESTAMP_HELP, parse_timestamp_syntax, resolve_timestamp
from s3rs_assets.watermark import WatermarkRecord, iso, utcnow
from s3rs_assets.watermark.edits import (
    MANUAL_STRATEGY,
    apply_reset,
    apply_set,
    closed_summary,
    next_start,
)
from s3rs_assets.watermark.edits import fmt as _fmt


@click.group()
def watermark() -> None:
    """Inspect and manage watermarks."""


def _unread_rows(rec: WatermarkRecord) -> list[str]:
    """The rows the last backup did not read, as `watermark get` shows them."""
    sc = rec.source_counts
    if sc is None:
        return []
    return [
        "",
        f"  Rows the last backup did not read (counted {_fmt(sc.counted_at)}, MySQL clock)",
        f"    above the safety bound: {sc.above_bound:,} (read by a later sync; bound "
        f"{_fmt(sc.upper_bound)})",
        f"    dated in the future:    {sc.future:,}"
        + (f" (latest {_fmt(sc.latest_future)})" if sc.latest_future else ""),
        f"    NULL cursor:            {sc.null_cursor:,}",
        f"    zero-date cursor:       {sc.zero_date_cursor:,}",
        f"    before the start:       {sc.before_start:,}",
    ]


def render_record(rec: WatermarkRecord, table: TableConfig, show_files: bool = False) -> str:
    """`watermark get`: both stages, unread rows, the manual setting, one line per partition
    holding data, closed empty stretches as one line per range, and the next start."""
    lines = [
        f"Watermark for {rec.table_name}",
        "",
        "  MySQL -> S3 backup stage",
        f"    status:               {rec.mysql_status}",
        f"    rows extracted:       {rec.mysql_rows_extracted:,}",
        f"    S3 files:             {rec.s3_file_count:,}",
        f"    last data timestamp:  {_fmt(rec.last_mysql_data_timestamp)}",
        f"    last extraction time: {_fmt(rec.last_mysql_extraction_time)}",
        "",
        "  S3 -> Redshift load stage",
        f"    status:               {rec.redshift_status}",
        f"    rows loaded:          {rec.redshift_rows_loaded:,}",
        f"    files loaded:         {len(rec.processed_s3_files):,}",
        f"    last load time:       {_fmt(rec.last_redshift_load_time)}",
    ]
    if rec.last_error:
        lines.append(f"    last error:           {rec.last_error}")
    lines += _unread_rows(rec)
    if rec.backup_strategy == MANUAL_STRATEGY:
        what = (
            f"set by hand to {_fmt(rec.manual_timestamp)}"
            if rec.manual_timestamp
            else "reset by hand"
        )
        lines += ["", f"  Manual watermark: {what} (backup_strategy {MANUAL_STRATEGY})"]
    if rec.partitions:
        lines += ["", "  Partitions"]
        for key in sorted(rec.partitions):
            p = rec.partitions[key]
            loaded = rec.loaded_partitions.get(key)
            lines.append(
                f"    {key}  {p.status:<8} {p.rows:>10,} rows {len(p.files):>4} files  "
                f"loaded {len(loaded.files) if loaded else 0:>4}  cursor {p.cursor or '-'}"
            )
            if show_files:
                done = set(loaded.files) if loaded else set()
                lines += [
                    f"        {f.key}  ({f.rows:,} rows, {f.bytes:,} B)"
                    + ("  loaded" if f.key in done else "")
                    for f in p.files
                ]
    closed = closed_summary(table, rec)
    if closed:
        lines += ["", "  Closed (complete, empty) partitions"]
        lines += [f"    {line}" for line in closed]
    lines += ["", f"  Next sync starts from: {next_start(table, rec)[2]}"]
    return "\n".join(lines)


@watermark.command("get")
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--json", "as_json", is_flag=True, help="The record as JSON.")
@click.option("--show-files", is_flag=True, help="List every S3 file per partition.")
@friendly_errors
def watermark_get(name: str, as_json: bool, show_files: bool) -> None:
    """Show a table's watermark (both stages, per partition)."""
    table = _table(name)
    report, known = _store(_s3_checked()).peek(table.name)
    rec = known.record
    if report is not None:  # reading never writes: say where this came from
        echo(
            f"note: the primary watermark of {table.name} is {report.primary_error}; showing "
            f"the {report.source} copy {report.key} (nothing was written: the watermark guard "
            "sensor or the next run restores it)",
            err=True,
        )
    if rec is None:
        if as_json:
            echo(json.dumps(None))
        else:
            echo(
                f"No watermark for {table.name} yet: the first sync starts at "
                f"{_fmt(table.start)} (tables.yaml start)."
            )
        return
    if as_json:
        echo(rec.to_json())
    else:
        echo(render_record(rec, table, show_files))


@watermark.command("set")
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--timestamp", "ts_text", required=True, help=TIMESTAMP_HELP)
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@friendly_errors
def watermark_set(name: str, ts_text: str, yes: bool, dry_run: bool) -> None:
    """Make the next sync start at TIMESTAMP.

    Partitions wholly before it are marked complete (their files, if any, are kept as
    history), the partition holding it resumes at (TIMESTAMP, start), later partitions are
    dropped from the record so the next sync reads them again. Recorded as
    backup_strategy=manual_cli; automatic runs then only move forward from here.
    """
    table = _table(name)
    parse_timestamp_syntax(ts_text)  # reject 'banana' / 2024-02-30 before any connection
    source_now = _source_now()
    ts = resolve_timestamp(ts_text, source_now)
    first = window(time_windows(table), partition_keys(table)[0])[0]
    if ts < first:
        raise ConfigError(
            f"timestamp {_fmt(ts)} is before {table.name}'s first partition ({_fmt(first)}, "
            "tables.yaml start): rows before it are never read. Lower `start` in "
            f"tables.yaml, or use `s3rs watermark reset -t {table.name}` to start from it."
        )
    manual_change(
        table,
        lambda rec: apply_set(rec, table, ts),
        title=f"watermark set {table.name} to {_fmt(ts)} (source clock now {_fmt(source_now)}):",
        yes=yes,
        dry_run=dry_run,
        now=source_now,
        keep="set",
    )


@watermark.command("reset")
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--mysql-only", is_flag=True, help="Only the backup side (MySQL -> S3).")
@click.option("--redshift-only", is_flag=True, help="Only the load mirror (S3 -> Redshift).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@friendly_errors
def watermark_reset(
    name: str, mysql_only: bool, redshift_only: bool, yes: bool, dry_run: bool
) -> None:
    """Back to "nothing extracted" and/or "nothing loaded".

    The MySQL side (--mysql-only): the next sync reads every partition again from
    tables.yaml `start`. The load side (--redshift-only): the warehouse's load ledger — the
    truth for what is loaded — forgets every file of the table, so the next sync loads every
    extracted file again (the merge keeps per key the newest row, so nothing moves back;
    rows deleted in MySQL that reconcile removed come back until the next
    `s3rs reconcile --apply`). Without either flag, both.
    """
    if mysql_only and redshift_only:
        raise click.UsageError("--mysql-only and --redshift-only exclude each other")
    table = _table(name)
    mysql, redshift = not redshift_only, not mysql_only
    notes = []
    if mysql:
        notes.append(
            f"every partition is read again from {_fmt(table.start)} (tables.yaml start); "
            "files already in S3 stay (s3rs s3clean removes loaded ones)"
        )
    also = None
    if redshift:
        from s3rs_assets.load import clear_ledger, ledger_versions  # reset only: not for get

        wh = _warehouse()
        target = f"{table.target_schema}.{table.target_table}"
        held = len(ledger_versions(wh, table.target_schema, table.target_table))
        lines = (
            [
                f"  warehouse load ledger of {target}: {held:,} file version(s) -> 0 "
                "(every extracted file loads again at the next sync)"
            ]
            if held
            else []
        )

        def forget() -> str:
            n = clear_ledger(wh, table.target_schema, table.target_table)
            return f"load ledger: {n:,} entr{'y' if n == 1 else 'ies'} of {target} deleted"

        also = (lines, forget)
    manual_change(
        table,
        lambda rec: apply_reset(rec, mysql, redshift),
        title=f"watermark reset {table.name} ({'both stages' if mysql and redshift else 'MySQL side' if mysql else 'load side'}):",  # noqa: E501
        yes=yes,
        dry_run=dry_run,
        now=None,
        notes=notes,
        create=False,
        also=also,
        keep="reset",
    )


@watermark.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per table, as a list.")
@friendly_errors
def watermark_list(as_json: bool) -> None:
    """Every configured table: stage statuses, cursor, lag behind the source, age.

    Exits 1 when a table's watermark could not be read (its ERROR row says why), 2 when
    MySQL's clock could not be read (no lag shown), after printing everything it could.
    """
    tables = load_tables()
    store = _store(_s3_checked())
    try:
        source_now: datetime | None = _source_now()
        note = None
    except S3rsError as e:
        source_now, note = None, f"source clock unavailable ({e}): lag not shown"
    rows = _list_rows(store, tables, source_now, utcnow())
    configured = {t.name for t in tables}
    try:
        stray = [n for n in store.list_tables() if n not in configured]
    except Exception:  # noqa: BLE001 - listing is a courtesy
        stray = []
    for n in stray:
        rows.append({"table": n, "configured": False, "has_watermark": True})
    if as_json:
        _dump(rows)
    elif not rows:
        echo("no tables configured")
    else:
        _print_list(rows)
    # Everything is shown first; then the exit code says what was missing from it.
    errors = [r["table"] for r in rows if "error" in r]
    if errors:
        echo(
            f"error: the watermark of {', '.join(errors)} could not be read (ERROR above)",
            err=True,
            fg="red",
        )
        sys.exit(1)
    if note:
        echo(f"error: {note}", err=True, fg="red")
        sys.exit(2)


def _list_rows(
    store: Any, tables: list[TableConfig], source_now: datetime | None, wall: datetime
) -> list[dict[str, Any]]:
    """`_list_row` of every table, in order; the records are read by `scan.threads`
    threads: one GET each, concurrently."""
    from concurrent.futures import ThreadPoolExecutor

    from s3rs_assets.scan import threads

    if len(tables) < 2:
        return [_list_row(store, t, source_now, wall) for t in tables]
    with ThreadPoolExecutor(max_workers=min(threads(store.client), len(tables))) as pool:
        return list(pool.map(lambda t: _list_row(store, t, source_now, wall), tables))


def _list_row(
    store: Any, t: TableConfig, source_now: datetime | None, wall: datetime
) -> dict[str, Any]:
    """One table of `watermark list` (the `--json` shape)."""
    row: dict[str, Any] = {"table": t.name, "configured": True}
    try:
        rec = store.read(t.name)
    except S3rsError as e:
        return {**row, "error": str(e)}
    key, start_ts, _text = next_start(t, rec)
    row.update(
        has_watermark=rec is not None,
        mysql_status=rec.mysql_status if rec else None,
        redshift_status=rec.redshift_status if rec else None,
        last_mysql_data_timestamp=iso(rec.last_mysql_data_timestamp) if rec else None,
        rows_extracted=rec.mysql_rows_extracted if rec else 0,
        s3_files=rec.s3_file_count if rec else 0,
        rows_loaded=rec.redshift_rows_loaded if rec else 0,
        files_loaded=len(rec.processed_s3_files) if rec else 0,
        next_partition=key,
        next_start=iso(start_ts),
        lag_seconds=round((source_now - start_ts).total_seconds()) if source_now else None,
        age_seconds=round((wall - rec.updated_at).total_seconds()) if rec else None,
        backup_strategy=rec.backup_strategy if rec else None,
        manual_timestamp=iso(rec.manual_timestamp) if rec else None,
        last_error=rec.last_error if rec else None,
    )
    return row


def _print_list(rows: list[dict[str, Any]]) -> None:
    echo(
        f"{'TABLE':<40} {'BACKUP':<8} {'LOAD':<8} {'ROWS':>12} {'LOADED':>12}  "
        f"{'NEXT SYNC FROM':<26} {'LAG':>8} {'AGE':>8}"
    )
    for r in rows:
        if not r.get("configured"):
            echo(f"{r['table']:<40} (watermark in S3, not in tables.yaml)")
            continue
        if "error" in r:
            echo(f"{r['table']:<40} ERROR: {r['error']}")
            continue
        if not r["has_watermark"]:
            echo(
                f"{r['table']:<40} {'-':<8} {'-':<8} {0:>12,} {0:>12,}  "
                f"{_fmt(datetime.fromisoformat(r['next_start'])):<26} "
                f"{_age(r['lag_seconds']):>8} {'never':>8}"
            )
            continue
        manual = "  (manual)" if r["backup_strategy"] == MANUAL_STRATEGY else ""
        echo(
            f"{r['table']:<40} {r['mysql_status']:<8} {r['redshift_status']:<8} "
            f"{r['rows_extracted']:>12,} {r['rows_loaded']:>12,}  "
            f"{_fmt(datetime.fromisoformat(r['next_start'])):<26} "
            f"{_age(r['lag_seconds']):>8} {_age(r['age_seconds']):>8}{manual}"
        )


def _age(seconds: int | None) -> str:
    if seconds is None:
        return "?"
    neg, s = seconds < 0, abs(seconds)
    out = (
        f"{s}s"
        if s < 120
        else f"{s // 60}m"
        if s < 7200
        else f"{s // 3600}h"
        if s < 172800
        else f"{s // 86400}d"
    )
    return "-" + out if neg else out


@watermark.command("backup-status")
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def watermark_backup_status(name: str, as_json: bool) -> None:
    """Primary, daily and session copies of a table's watermark: present, valid, current."""
    table = _table(name)
    status = _store(_s3_checked()).copy_status(table.name)
    if as_json:
        _dump(status)
        return
    echo(f"Watermark copies of {table.name}  ({'healthy' if status['healthy'] else 'UNHEALTHY'})")
    for loc in ("primary", "daily", "session"):
        e = status[loc]
        state = "missing" if not e["present"] else "valid" if e["valid"] else "INVALID"
        extra = []
        if loc != "primary":
            extra.append(f"{e.get('count', 0)} copies")
            if e.get("present"):
                extra.append("same as primary" if e.get("current") else "older than primary")
        if e.get("age_seconds") is not None:
            extra.append(f"written {_age(e['age_seconds'])} ago")
        if e.get("error"):
            extra.append(e["error"])
        echo(f"  {loc:<8} {state:<8} {e.get('key') or '-'}")
        if extra:
            echo(f"           {'; '.join(extra)}")


@watermark.command("cleanup-backups")
@click.option(
    "--days-to-keep",
    type=click.IntRange(min=0),
    required=True,
    help="Delete daily/session backups written more than N days ago.",
)
@click.option("--dry-run", is_flag=True, help="List what would be deleted.")
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def watermark_cleanup_backups(days_to_keep: int, dry_run: bool, as_json: bool) -> None:
    """Delete old watermark backups (never a primary, never a table's newest valid copy),
    and old archives of long records that no kept record references."""
    report = _store(_s3_checked()).cleanup_copies(days_to_keep, dry_run=dry_run)
    if as_json:
        _dump({**report.as_metadata(), "keys": report.deleted})
        return
    verb = "would delete" if dry_run else "deleted"
    archives = f", of them {len(report.archives)} archive(s) no kept record references" if (
        report.archives
    ) else ""
    echo(f"{verb} {len(report.deleted)} backup(s) older than {days_to_keep} day(s){archives}")
    for k in report.deleted:
        echo(f"  {k}")
    echo(
        f"kept {report.kept_recent} recent and {len(report.kept_newest)} newest-valid "
        f"backup(s); {len(report.failed)} failed"
    )
    for k, e in report.failed.items():
        echo(f"  failed {k}: {e}", err=True)
    if report.failed:
        sys.exit(1)


# the undo of set/reset, in their own module (cli/watermark_history.py)
watermark.add_command(watermark_history)
watermark.add_command(watermark_restore)
