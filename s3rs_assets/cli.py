"""The `s3rs` command line: thin, it calls the same functions the assets use.

Sensors and this CLI never start Spark themselves; `s3rs sync` launches Dagster runs, and
those runs start one SparkSession for the whole command.

Exit codes: 0 done; 1 a sync or verify found a failure, or a confirmation was declined;
2 bad input or configuration (unknown table, invalid timestamp, conflicting flags,
unreachable service): nothing was changed.

Every line printed goes through `logs.redact`, and every log line through the redaction
filter, so no credential from the environment reaches the terminal.

Manual watermark changes (`watermark set` / `reset`) are compare-and-swap updates of the
current record (`WatermarkStore.update`): a run working on the same table at that moment
loses its next checkpoint with a WatermarkConflict instead of overwriting the manual
setting, and later runs only move the cursors forward from where `set` put them.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from functools import wraps
from typing import Any

import click

from s3rs_assets import logs
from s3rs_assets.config import TableConfig, find_table, load_tables
from s3rs_assets.discovery import discover, render_discovery
from s3rs_assets.errors import ConfigError, S3rsError, WatermarkConflict
from s3rs_assets.progress import SYNC_TAG, SyncMonitor, failure_reasons
from s3rs_assets.times import (
    TIMESTAMP_HELP,
    parse_age,
    parse_timestamp_syntax,
    resolve_timestamp,
)
from s3rs_assets.watermark import (
    PartitionState,
    Position,
    WatermarkRecord,
    iso,
    utcnow,
)

log = logging.getLogger("s3rs.cli")

MANUAL_STRATEGY = "manual_cli"


# ----------------------------------------------------------------------------- plumbing


def echo(text: str = "", err: bool = False, **style: Any) -> None:
    """click.echo through the redactor: nothing printed may carry a credential."""
    text = logs.redact(text)
    if style:
        click.secho(text, err=err, **style)
    else:
        click.echo(text, err=err)


def _s3():
    from s3rs_assets.resources import S3Resource

    bucket = os.environ.get("S3RS_S3_BUCKET")
    if not bucket:
        raise click.UsageError("S3RS_S3_BUCKET is not set")
    return S3Resource(bucket=bucket, prefix=os.environ.get("S3RS_S3_PREFIX", "s3rs"))


def _store(s3=None):
    from s3rs_assets.io_manager import store_for

    return store_for(s3 or _s3())


def _mysql():
    from s3rs_assets.resources import MySQLResource

    url = os.environ.get("S3RS_MYSQL_URL")
    if not url:
        raise ConfigError("S3RS_MYSQL_URL is not set (mysql://user:password@host:port/db)")
    return MySQLResource(url=url)


def _warehouse():
    from s3rs_assets.warehouse import WarehouseResource

    url = os.environ.get("S3RS_REDSHIFT_URL")
    if not url:
        raise ConfigError(
            "S3RS_REDSHIFT_URL is not set (redshift://... or postgresql://user:password@host/db)"
        )
    return WarehouseResource(url=url, iam_role=os.environ.get("S3RS_REDSHIFT_IAM_ROLE") or None)


def _source_now() -> datetime:
    """The MySQL server's clock (naive, source time zone): what cursors compare against."""
    from s3rs_assets.source import server_now

    with _mysql().connect() as conn:
        return server_now(conn)


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn s3rs's own errors into one red line and exit code 2, without a traceback.

    Anything else is a bug or an unexpected service error: one redacted line, exit 1, and
    the (redacted) traceback at debug level.
    """

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except S3rsError as e:
            echo(f"error: {e}", err=True, fg="red")
            sys.exit(2)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except Exception as e:  # noqa: BLE001 - the last line of defence for secrets
            log.debug("unexpected error", exc_info=True)
            echo(f"error: unexpected {type(e).__name__}: {e}", err=True, fg="red")
            sys.exit(1)

    return wrapper


def _tables(names: tuple[str, ...], all_: bool = False) -> list[TableConfig]:
    tables = load_tables()
    if all_:
        if names:
            raise click.UsageError("give either --all or -t/--table, not both")
        if not tables:
            raise click.UsageError("no tables configured")
        return tables
    if not names:
        raise click.UsageError("name a table with -t schema.table (or --all)")
    return [find_table(tables, n) for n in names]


def _table(name: str) -> TableConfig:
    return find_table(load_tables(), name)


def _dump(obj: Any) -> None:
    echo(json.dumps(obj, indent=2, default=str))


@click.group()
@click.option(
    "--log-format",
    type=click.Choice(logs.FORMATS),
    default=None,
    help="Log lines as text (default) or JSON lines; also S3RS_LOG_FORMAT.",
)
@click.option(
    "--log-level",
    default=lambda: os.environ.get("S3RS_LOG_LEVEL", "INFO"),
    show_default="INFO",
    help="DEBUG, INFO, WARNING or ERROR (S3RS_LOG_LEVEL).",
)
@click.pass_context
def main(ctx: click.Context, log_format: str | None, log_level: str) -> None:
    """s3rs: keep Redshift in step with MySQL through S3 parquet, on Dagster."""
    try:
        fmt = logs.resolve_format(log_format)
        logs.configure(fmt, log_level)
    except S3rsError as e:
        raise click.UsageError(str(e)) from None
    ctx.obj = {"log_format": fmt, "log_level": log_level.upper()}


# --------------------------------------------------------------------------------- sync


@main.command()
@click.option("-t", "--table", "names", multiple=True, help="schema.table (repeatable)")
@click.option("--all", "all_", is_flag=True, help="Every configured table.")
@click.option("--backup-only", is_flag=True, help="Only MySQL -> S3 (materialize s3_parquet).")
@click.option("--redshift-only", is_flag=True, help="Only S3 -> Redshift (redshift_table).")
@click.option("--limit", type=click.IntRange(min=1), help="Read at most N rows per table.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress line (default: on when stderr is a terminal, else log lines).",
)
@click.pass_context
@friendly_errors
def sync(
    ctx: click.Context,
    names: tuple[str, ...],
    all_: bool,
    backup_only: bool,
    redshift_only: bool,
    limit: int | None,
    progress: bool | None,
) -> None:
    """Sync tables through Dagster, from the first incomplete partition to the current one.

    Each table is one Dagster run (visible in the UI); a failed table does not stop the
    others, and the command exits 1 naming every table that failed.
    """
    from s3rs_assets import runner

    if backup_only and redshift_only:
        raise click.UsageError("--backup-only and --redshift-only exclude each other")
    if redshift_only and limit is not None:
        raise click.UsageError("--limit applies to the backup stage, not --redshift-only")
    tables = _tables(names, all_)
    stages = ("backup",) if backup_only else ("load",) if redshift_only else ("backup", "load")
    inst = runner.instance()
    s3 = _s3()
    store = _store(s3)
    tty = sys.stderr.isatty() if progress is None else progress
    failed = []
    for table in tables:
        try:
            plans = runner.plan_runs(table, store.read(table.name), stages)
        except Exception as e:  # noqa: BLE001 - this table fails, the others still run
            failed.append(table.name)
            echo(f"{table.name}: cannot plan the sync: {e}", err=True, fg="red")
            continue
        for plan in plans:
            echo(f"{table.name}: {' + '.join(plan.stages)}, partitions {plan.start} .. {plan.end}")
            token = uuid.uuid4().hex
            monitor = SyncMonitor(table, plan.stages, inst, s3, token, tty=tty)
            monitor.start()
            try:
                result = _execute(runner, plan, inst, limit, {SYNC_TAG: token}, quiet=True)
            except Exception as e:  # noqa: BLE001 - one table's failure must not stop others
                monitor.stop()
                failed.append(table.name)
                echo(f"{table.name}: FAILED before the run started: {e}", err=True, fg="red")
                break
            monitor.stop()
            if result.success and not _failed_checks(ctx, table, result):
                echo(f"{table.name}: run {result.run_id} succeeded")
                _report_unread_rows(ctx, table, store)
            elif result.success:
                failed.append(table.name)
                break
            else:
                failed.append(table.name)
                echo(f"{table.name}: run {result.run_id} FAILED", err=True, fg="red")
                for reason in failure_reasons(result):
                    echo(f"  {reason}", err=True, fg="red")
                break
    if failed:
        echo(f"failed: {', '.join(failed)}", err=True, fg="red")
        sys.exit(1)


def _say(ctx: click.Context, level: int, text: str, **fields: Any) -> None:
    """A finding for people (a coloured line on stderr) or, with `--log-format json`, one
    structured log record carrying `fields`."""
    if ctx.obj and ctx.obj.get("log_format") == "json":
        log.log(level, text, extra=fields)
    else:
        echo(text, err=True, fg="red" if level >= logging.ERROR else "yellow")


def _failed_checks(ctx: click.Context, table: TableConfig, result: Any) -> bool:
    """Report every failed asset check of the run; True when there was one (exit 1): a
    sync whose data does not match MySQL has not succeeded."""
    evaluations = result.get_asset_check_evaluations()
    for c in evaluations:
        if not c.passed and c.severity.value != "ERROR":  # a warning: reported, not failed
            _say(ctx, logging.WARNING, f"warning: {table.name}: check {c.check_name}: "
                 f"{c.description}", event="check_warning", table=table.name)
    bad = [c for c in evaluations if not c.passed and c.severity.value == "ERROR"]
    for c in bad:
        counts = {
            k: v.value for k, v in c.metadata.items() if k in ("mysql_rows", "warehouse_rows")
        }
        detail = ", ".join(f"{k} {v:,}" for k, v in counts.items())
        _say(
            ctx,
            logging.ERROR,
            f"{table.name}: run {result.run_id} FAILED its check {c.check_name} ({detail}): "
            f"{c.description}",
            event="check_failed",
            table=table.name,
            run_id=result.run_id,
            error=c.description,
            **({"rows": counts["warehouse_rows"]} if "warehouse_rows" in counts else {}),
        )
    return bool(bad)


def _report_unread_rows(ctx: click.Context, table: TableConfig, store: Any) -> None:
    """Warn about rows no run has copied (future-dated, NULL or zero cursors, before start)."""
    rec = store.read(table.name, fresh=True)  # after the run: not the plan's copy
    counts = rec.source_counts if rec else None
    for line in counts.warnings(table.name) if counts else []:
        _say(ctx, logging.WARNING, f"warning: {line}", event="rows_not_copied", table=table.name)


def _execute(runner: Any, plan: Any, inst: Any, limit: int | None, tags: dict, quiet: bool):
    """runner.execute, with Dagster's own console logger silenced when `quiet` (SyncMonitor
    then re-emits the run's log messages in s3rs's format, redacted)."""
    loggers = {"console": {"config": {"log_level": "CRITICAL"}}} if quiet else None
    return runner.execute(plan, inst, limit=limit, extra_tags=tags, loggers=loggers)


# ---------------------------------------------------------------------------- watermark


@main.group()
def watermark() -> None:
    """Inspect and manage watermarks."""


def _fmt(ts) -> str:
    return iso(ts).replace("T", " ") if ts else "-"


def next_start(table: TableConfig, rec: WatermarkRecord | None) -> tuple[str, datetime, str]:
    """(partition, timestamp, text) of where the next backup starts reading."""
    from s3rs_assets.partitions import partitions_def, window
    from s3rs_assets.runner import first_incomplete

    key = first_incomplete(table, rec, "backup")
    start = window(partitions_def(table), key)[0]
    state = rec.partitions.get(key) if rec else None
    if state is not None and state.status == "complete":
        return key, start, f"partition {key}: every partition is complete up to now"
    if state is not None and state.cursor is not None:
        return key, state.cursor.c, f"partition {key} at {state.cursor}"
    return key, start, f"partition {key} at ({_fmt(start)}, start)"


def render_record(
    rec: WatermarkRecord, show_files: bool = False, table: TableConfig | None = None
) -> str:
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
    sc = rec.source_counts
    if sc is not None:
        lines += [
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
    lines.append("")
    if table is not None:
        lines.append(f"  Next sync starts from: {next_start(table, rec)[2]}")
        return "\n".join(lines)
    nxt = next((k for k in sorted(rec.partitions) if rec.partitions[k].status != "complete"), None)
    if nxt:
        p = rec.partitions[nxt]
        pos = p.cursor or f"({_fmt(p.window_start)}, start)"
        lines.append(f"  Next sync starts from: partition {nxt} at {pos}")
    elif rec.partitions:
        lines.append("  Next sync starts from: the partition after the last complete one")
    return "\n".join(lines)


@watermark.command("get")
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--json", "as_json", is_flag=True, help="The record as JSON.")
@click.option("--show-files", is_flag=True, help="List every S3 file per partition.")
@friendly_errors
def watermark_get(name: str, as_json: bool, show_files: bool) -> None:
    """Show a table's watermark (both stages, per partition)."""
    table = _table(name)
    rec = _store().read(table.name)
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
        echo(render_record(rec, show_files, table))


def apply_set(rec: WatermarkRecord, table: TableConfig, ts: datetime) -> None:
    """Make `ts` the point the next sync starts from (see `watermark set --help`)."""
    from s3rs_assets.partitions import partition_keys, partitions_def, window

    pdef = partitions_def(table)
    now = utcnow()
    keys = partition_keys(table)
    for key in keys:
        start, end = window(pdef, key)
        state = rec.partitions.get(key)
        if end <= ts:
            if state is None:
                state = PartitionState(window_start=start, window_end=end, status="complete")
            else:
                state.status = "complete"
            state.updated_at = now
            rec.partitions[key] = state
        elif start <= ts:
            state = state or PartitionState(window_start=start, window_end=end)
            # Files wholly before ts stay as history; the rest is read again from ts.
            state.files = [f for f in state.files if f.cursor_max is not None and f.cursor_max < ts]
            state.cursor = Position(c=ts, pk=None)
            state.status = "partial"
            state.run_id = None
            state.updated_at = now
            rec.partitions[key] = state
        else:
            rec.partitions.pop(key, None)
    for key in [k for k, p in rec.partitions.items() if k not in keys and p.window_start >= ts]:
        del rec.partitions[key]
    rec.backup_strategy = MANUAL_STRATEGY
    rec.manual_timestamp = ts
    rec.mysql_status = "pending"
    rec.last_error = None


def apply_reset(rec: WatermarkRecord, mysql: bool, redshift: bool) -> None:
    if mysql:
        rec.partitions = {}
        rec.mysql_status = "pending"
        rec.last_mysql_extraction_time = None
        rec.manual_timestamp = None
        rec.backup_strategy = MANUAL_STRATEGY
    if redshift:
        rec.loaded_partitions = {}
        rec.redshift_status = "pending"
        rec.last_redshift_load_time = None
    rec.last_error = None


_DIFF_FIELDS = (
    "mysql_status",
    "mysql_rows_extracted",
    "s3_file_count",
    "last_mysql_data_timestamp",
    "last_mysql_extraction_time",
    "redshift_status",
    "redshift_rows_loaded",
    "last_redshift_load_time",
    "backup_strategy",
    "manual_timestamp",
)


def _show(value: Any) -> str:
    if isinstance(value, datetime):
        return _fmt(value)
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)


def _pstate(p: PartitionState | None) -> str:
    if p is None:
        return "absent (read again)"
    return f"{p.status}, {p.rows:,} rows in {len(p.files)} files, cursor {p.cursor or '-'}"


def describe_change(
    table: TableConfig, before: WatermarkRecord | None, after: WatermarkRecord, limit: int = 12
) -> list[str]:
    """Human lines `field: before -> after`, partitions included; empty when nothing moves."""
    old = before or WatermarkRecord.new(after.table_name)
    lines = []
    for f in _DIFF_FIELDS:
        a, b = getattr(old, f), getattr(after, f)
        if a != b:
            lines.append(f"  {f}: {_show(a)} -> {_show(b)}")
    if len(old.processed_s3_files) != len(after.processed_s3_files):
        lines.append(
            f"  load mirror: {len(old.processed_s3_files):,} files -> "
            f"{len(after.processed_s3_files):,} files"
        )
    changed = []
    for key in sorted(set(old.partitions) | set(after.partitions)):
        a, b = old.partitions.get(key), after.partitions.get(key)
        if _pstate(a) != _pstate(b):
            changed.append(f"    {key}: {_pstate(a)} -> {_pstate(b)}")
    if changed:
        lines.append(f"  partitions ({len(changed)} change):")
        if len(changed) > limit:
            half = limit // 2
            lines += changed[:half] + [f"    ... {len(changed) - limit} more ..."] + changed[-half:]
        else:
            lines += changed
    if lines:
        lines.append(
            f"  next sync starts from: {next_start(table, before)[2]} -> "
            f"{next_start(table, after)[2]}"
        )
    return lines


def _manual_change(
    table: TableConfig,
    change: Callable[[WatermarkRecord], None],
    *,
    title: str,
    yes: bool,
    dry_run: bool,
    now: datetime | None,
    notes: list[str] = (),
    create: bool = True,
) -> None:
    """Show before -> after, confirm, then apply `change` compare-and-swap."""
    store = _store()
    before, _etag = store.read_versioned(table.name, now=now)
    if before is None and not create:
        echo(title)
        echo(f"  nothing to change: {table.name} has no watermark yet.")
        return
    after = before.model_copy(deep=True) if before else WatermarkRecord.new(table.name)
    change(after)
    after.refresh()
    diff = describe_change(table, before, after)
    echo(title)
    for n in notes:
        echo(f"  note: {n}")
    if not diff:
        echo("  nothing to change.")
        return
    for line in diff:
        echo(line)
    if dry_run:
        echo("dry run: nothing written.")
        return
    if not yes:
        click.confirm("Apply this change?", abort=True, err=True)

    def guarded(rec: WatermarkRecord) -> None:
        # Apply only to the record that was shown: a run (or another operator) writing it
        # since then makes this fail instead of silently mixing the two.
        moved = (
            bool(rec.partitions or rec.loaded_partitions or rec.backup_metadata)
            if before is None
            else rec.updated_at != before.updated_at
        )
        if moved:
            raise WatermarkConflict(
                f"the watermark of {table.name} changed since it was shown (a run is writing "
                "it?); nothing was written: look again and retry"
            )
        change(rec)

    saved = store.update(table.name, guarded, now=now).record
    store.write_backups(table.name)  # a manual change is a run of its own: back it up now
    echo(f"saved: next sync starts from {next_start(table, saved)[2]}")


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
    from s3rs_assets.partitions import partition_keys, partitions_def, window

    first = window(partitions_def(table), partition_keys(table)[0])[0]
    if ts < first:
        raise ConfigError(
            f"timestamp {_fmt(ts)} is before {table.name}'s first partition ({_fmt(first)}, "
            "tables.yaml start): rows before it are never read. Lower `start` in "
            f"tables.yaml, or use `s3rs watermark reset -t {table.name}` to start from it."
        )
    _manual_change(
        table,
        lambda rec: apply_set(rec, table, ts),
        title=f"watermark set {table.name} to {_fmt(ts)} (source clock now {_fmt(source_now)}):",
        yes=yes,
        dry_run=dry_run,
        now=source_now,
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
    """Back to "nothing extracted": the next sync starts at tables.yaml `start`.

    --redshift-only clears the watermark's mirror of the load ledger; the ledger table in
    the warehouse stays the truth, so files it lists are not loaded again.
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
    if redshift:
        notes.append(
            "the load mirror is cleared, but the warehouse's load ledger (s3rs_load_ledger) "
            "is unchanged and stays the truth: files it lists are not loaded again; the next "
            "load mirrors it back"
        )
    _manual_change(
        table,
        lambda rec: apply_reset(rec, mysql, redshift),
        title=f"watermark reset {table.name} ({'both stages' if mysql and redshift else 'MySQL side' if mysql else 'load mirror'}):",  # noqa: E501
        yes=yes,
        dry_run=dry_run,
        now=None,
        notes=notes,
        create=False,
    )


@watermark.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per table, as a list.")
@friendly_errors
def watermark_list(as_json: bool) -> None:
    """Every configured table: stage statuses, cursor, lag behind the source, age."""
    tables = load_tables()
    store = _store()
    try:
        source_now: datetime | None = _source_now()
        note = None
    except S3rsError as e:
        source_now, note = None, f"source clock unavailable ({e}): lag not shown"
    wall = utcnow()
    rows = []
    for t in tables:
        row: dict[str, Any] = {"table": t.name, "configured": True}
        try:
            rec = store.read(t.name)
        except S3rsError as e:
            row.update(error=str(e))
            rows.append(row)
            continue
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
        rows.append(row)
    configured = {t.name for t in tables}
    try:
        stray = [n for n in store.list_tables() if n not in configured]
    except Exception:  # noqa: BLE001 - listing is a courtesy
        stray = []
    for n in stray:
        rows.append({"table": n, "configured": False, "has_watermark": True})
    if as_json:
        _dump(rows)
        return
    if note:
        echo(f"note: {note}", err=True)
    if not rows:
        echo("no tables configured")
        return
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
    status = _store().backup_status(table.name)
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
    """Delete old watermark backups (never a primary, never a table's newest valid copy)."""
    report = _store().cleanup_backups(days_to_keep, dry_run=dry_run)
    if as_json:
        _dump({**report.as_metadata(), "keys": report.deleted})
        return
    verb = "would delete" if dry_run else "deleted"
    echo(f"{verb} {len(report.deleted)} backup(s) older than {days_to_keep} day(s)")
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


# ------------------------------------------------------------------------------ s3clean


@main.group()
def s3clean() -> None:
    """List and delete a table's parquet files in S3 (never watermarks, never unloaded
    files unless --force)."""


def _ledger_versions(table: TableConfig) -> tuple[set[tuple[str, str]] | None, str]:
    """(file key, md5) of every file version the warehouse ledger holds for `table`, and
    where that came from; (None, why) when the warehouse cannot be asked.

    Versions matter: a chunk read again after `watermark set` overwrites its own key with
    new content, which is not loaded until the ledger holds that key with the new md5.
    """
    from s3rs_assets.load import ledger_versions

    try:
        wh = _warehouse()
        versions = ledger_versions(wh, table.target_schema, table.target_table)
        return versions, f"warehouse load ledger ({wh.redacted()})"
    except S3rsError as e:
        return None, str(e)


def _list_data(s3: Any, table: TableConfig) -> list[dict[str, Any]]:
    client = s3.client()
    prefix = s3.key("data", table.schema, table.table) + "/"
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out.append(
                {
                    "key": o["Key"],
                    "partition": o["Key"][len(prefix) :].split("/", 1)[0],
                    "bytes": o["Size"],
                    "last_modified": o["LastModified"],
                    "etag": o["ETag"].strip('"'),
                }
            )
    return out


def _classify(s3: Any, table: TableConfig) -> tuple[list[dict[str, Any]], str, bool]:
    """Every data object of `table` with `state` loaded / unloaded / orphan."""
    store = _store(s3)
    rec = store.read(table.name)
    manifest = {f.key: k for k, p in (rec.partitions.items() if rec else []) for f in p.files}
    versions, source = _ledger_versions(table)
    fallback = versions is None
    mirror = set(rec.processed_s3_files) if rec else set()
    if fallback:
        source = f"watermark load mirror (warehouse unreachable: {source})"
    md5s = {f.key: f.md5 for p in (rec.partitions.values() if rec else []) for f in p.files}
    objs = _list_data(s3, table)
    for o in objs:
        # Single-part uploads (all s3rs writes) have ETag == MD5 of the content.
        md5 = o["etag"] if "-" not in o["etag"] else md5s.get(o["key"], "")
        loaded = o["key"] in mirror if fallback else (o["key"], md5) in versions
        if loaded:
            o["state"] = "loaded"
        elif o["key"] in manifest:
            o["state"] = "unloaded"
        else:
            o["state"] = "orphan"  # in no manifest and never loaded (e.g. read before `set`)
    return objs, source, fallback


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@s3clean.command("list")
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def s3clean_list(name: str, as_json: bool) -> None:
    """The table's parquet files with size, age and load state."""
    table = _table(name)
    s3 = _s3()
    objs, source, fallback = _classify(s3, table)
    if as_json:
        _dump(
            {
                "table": table.name,
                "load_state_from": source,
                "files": [{**o, "last_modified": o["last_modified"].isoformat()} for o in objs],
            }
        )
        return
    if fallback:
        echo(f"warning: {source}", err=True)
    echo(
        f"{table.name}: {len(objs)} file(s), {_size(sum(o['bytes'] for o in objs))} "
        f"(load state from {source})"
    )
    for o in objs:
        echo(
            f"  {o['key']}  {_size(o['bytes']):>10}  "
            f"{o['last_modified'].astimezone(UTC):%Y-%m-%d %H:%M:%S}  {o['state']}"
        )
    counts = {s: sum(1 for o in objs if o["state"] == s) for s in ("loaded", "unloaded", "orphan")}
    echo("  " + ", ".join(f"{n} {s}" for s, n in counts.items()))


def _clean(
    tables: list[TableConfig], older_than: str | None, dry_run: bool, force: bool, as_json: bool
) -> None:
    age = parse_age(older_than, "--older-than") if older_than is not None else None
    s3 = _s3()
    client = s3.client()
    cutoff = datetime.now(UTC) - age if age is not None else None
    protected = s3.key("watermarks") + "/"
    summary = []
    any_failed = False
    for table in tables:
        objs, source, fallback = _classify(s3, table)
        if fallback and not as_json:
            echo(f"warning: {table.name}: {source}", err=True)
        old = [o for o in objs if cutoff is None or o["last_modified"] < cutoff]
        doomed = [o for o in old if force or o["state"] == "loaded"]
        doomed = [o for o in doomed if not o["key"].startswith(protected)]
        kept = [o for o in old if o not in doomed]
        deleted, failed = [], {}
        if not dry_run:
            for i in range(0, len(doomed), 1000):
                batch = [o["key"] for o in doomed[i : i + 1000]]
                resp = client.delete_objects(
                    Bucket=s3.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}
                )
                errs = {e["Key"]: e.get("Code", "error") for e in resp.get("Errors", [])}
                failed.update(errs)
                deleted += [k for k in batch if k not in errs]
        lost = [o["key"] for o in doomed if o["state"] == "unloaded"]
        summary.append(
            {
                "table": table.name,
                "dry_run": dry_run,
                "older_than": older_than,
                "load_state_from": source,
                "candidates": len(old),
                "deleted" if not dry_run else "would_delete": (
                    deleted if not dry_run else [o["key"] for o in doomed]
                ),
                "kept_unloaded": [o["key"] for o in kept],
                "forced_unloaded": lost,
                "failed": failed,
            }
        )
        any_failed = any_failed or bool(failed)
        if as_json:
            continue
        verb = "would delete" if dry_run else "deleted"
        n = len(doomed) if dry_run else len(deleted)
        size = sum(o["bytes"] for o in doomed if dry_run or o["key"] in deleted)
        age_txt = f" older than {older_than}" if older_than else ""
        echo(
            f"{table.name}: {verb} {n} file(s){age_txt} ({_size(size)}); "
            f"kept {len(kept)} not yet loaded (load state from {source})"
        )
        for o in doomed if dry_run else [o for o in doomed if o["key"] in deleted]:
            echo(f"  {verb}: {o['key']}  ({o['state']})")
        for o in kept:
            echo(f"  kept:  {o['key']}  ({o['state']}; --force deletes it)")
        if lost:
            echo(
                f"  WARNING: {len(lost)} {'would be' if dry_run else 'were'} in a partition "
                "manifest but not loaded: loading those partitions fails until they are "
                "extracted again (materialize s3_parquet for them, or `s3rs watermark set`)",
                err=True,
            )
        for k, e in failed.items():
            echo(f"  failed: {k}: {e}", err=True)
    if as_json:
        _dump(summary if len(summary) != 1 else summary[0])
    if any_failed:
        sys.exit(1)


_CLEAN_OPTIONS = [
    click.option("--dry-run", is_flag=True, help="Show what would be deleted."),
    click.option("--force", is_flag=True, help="Also delete files not yet loaded."),
    click.option("--json", "as_json", is_flag=True),
]


def _clean_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(_CLEAN_OPTIONS):
        fn = opt(fn)
    return fn


@s3clean.command("clean")
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--older-than", help="Only files last written longer ago than this (7d, 1month).")
@_clean_options
@friendly_errors
def s3clean_clean(
    name: str, older_than: str | None, dry_run: bool, force: bool, as_json: bool
) -> None:
    """Delete a table's loaded parquet files (all ages unless --older-than).

    A file counts as loaded when the warehouse's load ledger lists it; when the warehouse
    cannot be reached the watermark's load mirror is used instead, and the output says so.
    Partition manifests keep listing deleted files: they are the history of what was
    loaded. Watermark objects are never touched.
    """
    if older_than is not None:
        parse_age(older_than, "--older-than")
    _clean([_table(name)], older_than, dry_run, force, as_json)


@s3clean.command("clean-all")
@click.option("--older-than", required=True, help="Files last written longer ago (30d).")
@_clean_options
@friendly_errors
def s3clean_clean_all(older_than: str, dry_run: bool, force: bool, as_json: bool) -> None:
    """`clean` for every configured table."""
    parse_age(older_than, "--older-than")
    tables = load_tables()
    if not tables:
        raise click.UsageError("no tables configured")
    _clean(tables, older_than, dry_run, force, as_json)


# ------------------------------------------------------------------------------- tables


@main.group()
def tables() -> None:
    """Help with tables.yaml."""


@tables.command("discover")
@click.option("--schema", required=True, help="MySQL schema (database) to inspect.")
@friendly_errors
def tables_discover(schema: str) -> None:
    """Print tables.yaml entries for every table with a usable cursor and primary key."""
    with _mysql().connect() as conn:
        usable, skipped = discover(conn, schema)
    echo(render_discovery(schema, usable, skipped))


# ------------------------------------------------------------------------------- verify


@main.command()
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--from", "from_key", help="First partition to compare (default: the first).")
@click.option("--to", "to_key", help="Last partition to compare (default: the current one).")
@click.option("--json", "as_json", is_flag=True)
@friendly_errors
def verify(name: str, from_key: str | None, to_key: str | None, as_json: bool) -> None:
    """Compare MySQL and the warehouse per partition (rows, checksum of key and cursor).

    Exits 1 on any mismatch. Rows newer than the last sync (or above its safety bound)
    show as missing in the warehouse until the next sync.
    """
    from s3rs_assets.load_stage import load_target
    from s3rs_assets.partitions import partition_keys, partitions_def, window
    from s3rs_assets.verify import unpartitioned_rows, verify_table

    table = _table(name)
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
    pdef = partitions_def(table)
    parts = [(k, *window(pdef, k)) for k in keys[lo : hi + 1]]
    mysql, warehouse = _mysql(), _warehouse()
    target = load_target(table, mysql)
    with mysql.connect() as conn:
        checks = verify_table(conn, warehouse, target, table, parts)
        outside = unpartitioned_rows(
            conn, table, window(pdef, keys[0])[0], window(pdef, keys[-1])[1]
        )
    bad = [c for c in checks if not c.ok]
    if as_json:
        _dump(
            {
                "table": table.name,
                "target": target.qualified,
                "ok": not bad,
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
        )
    else:
        shown = [c for c in checks if not (c.ok and c.mysql_rows == 0)]
        echo(f"{table.name} (MySQL) vs {target.qualified} ({warehouse.dialect})")
        echo(f"  {'PARTITION':<18} {'MYSQL ROWS':>12} {'WAREHOUSE ROWS':>15}  RESULT")
        for c in shown:
            result = (
                "ok"
                if c.ok
                else (
                    "MISMATCH: "
                    + (
                        "rows differ"
                        if c.mysql_rows != c.warehouse_rows
                        else "checksum of (key, cursor) differs"
                    )
                )
            )
            echo(f"  {c.partition:<18} {c.mysql_rows:>12,} {c.warehouse_rows:>15,}  {result}")
        empty = len(checks) - len(shown)
        echo(
            f"{len(checks)} partition(s) compared ({empty} empty on both sides not shown): "
            + (f"{len(bad)} MISMATCH" if bad else "all match")
        )
        if outside.total:
            echo(
                f"warning: {table.name}: {outside.total:,} MySQL row(s) lie outside every "
                f"partition and are not compared: {outside.describe()}",
                err=True,
                fg="yellow",
            )
    if bad:
        sys.exit(1)


from s3rs_assets.cli_reconcile import reconcile  # noqa: E402  (issue 10; moves on the cli split)

main.add_command(reconcile)
main.add_command(__import__("s3rs_assets.cli_spark").cli_spark.spark)  # issue 13

if __name__ == "__main__":  # pragma: no cover
    main()
