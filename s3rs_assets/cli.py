"""The `s3rs` command line: thin, it calls the same functions the assets use.

Sensors and this CLI never start Spark themselves; `s3rs sync` launches Dagster runs, and
those runs start one SparkSession for the whole command.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any

import click

from s3rs_assets.config import TableConfig, find_table, load_tables
from s3rs_assets.errors import S3rsError
from s3rs_assets.watermark import WatermarkRecord, iso


def _s3():
    from s3rs_assets.resources import S3Resource

    bucket = os.environ.get("S3RS_S3_BUCKET")
    if not bucket:
        raise click.UsageError("S3RS_S3_BUCKET is not set")
    return S3Resource(bucket=bucket, prefix=os.environ.get("S3RS_S3_PREFIX", "s3rs"))


def _store(s3=None):
    from s3rs_assets.io_manager import store_for

    return store_for(s3 or _s3())


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn s3rs's own errors into one red line and exit code 2, without a traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except S3rsError as e:
            click.secho(f"error: {e}", fg="red", err=True)
            sys.exit(2)

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


@click.group()
def main() -> None:
    """s3rs: keep Redshift in step with MySQL through S3 parquet, on Dagster."""


@main.command()
@click.option("-t", "--table", "names", multiple=True, help="schema.table (repeatable)")
@click.option("--all", "all_", is_flag=True, help="Every configured table.")
@click.option("--backup-only", is_flag=True, help="Only MySQL -> S3 (materialize s3_parquet).")
@click.option("--redshift-only", is_flag=True, help="Only S3 -> Redshift (redshift_table).")
@click.option("--limit", type=click.IntRange(min=1), help="Read at most N rows per table.")
@friendly_errors
def sync(
    names: tuple[str, ...], all_: bool, backup_only: bool, redshift_only: bool, limit: int | None
) -> None:
    """Sync tables through Dagster, from the first incomplete partition to the current one."""
    from s3rs_assets import runner

    if backup_only and redshift_only:
        raise click.UsageError("--backup-only and --redshift-only exclude each other")
    if redshift_only and limit is not None:
        raise click.UsageError("--limit applies to the backup stage, not --redshift-only")
    tables = _tables(names, all_)
    stages = ("backup",) if backup_only else ("load",) if redshift_only else ("backup", "load")
    inst = runner.instance()
    store = _store()
    failed = []
    for table in tables:
        plan = runner.plan_sync(table, store.read(table.name), stages)
        click.echo(f"{table.name}: {' + '.join(stages)}, partitions {plan.start} .. {plan.end}")
        result = runner.execute(plan, inst, limit=limit)
        if result.success:
            click.echo(f"{table.name}: run {result.run_id} succeeded")
        else:
            failed.append(table.name)
            click.secho(f"{table.name}: run {result.run_id} FAILED", fg="red", err=True)
    if failed:
        click.secho(f"failed: {', '.join(failed)}", fg="red", err=True)
        sys.exit(1)


@main.group()
def watermark() -> None:
    """Inspect and manage watermarks."""


def _fmt(ts) -> str:
    return iso(ts).replace("T", " ") if ts else "-"


def render_record(rec: WatermarkRecord, show_files: bool = False) -> str:
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
                lines += [f"        {f.key}  ({f.rows:,} rows, {f.bytes:,} B)" for f in p.files]
    nxt = next((k for k in sorted(rec.partitions) if rec.partitions[k].status != "complete"), None)
    lines.append("")
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
    table = find_table(load_tables(), name)
    rec = _store().read(table.name)
    if rec is None:
        if as_json:
            click.echo(json.dumps(None))
        else:
            click.echo(
                f"No watermark for {table.name} yet: the first sync starts at "
                f"{_fmt(table.start)} (tables.yaml start)."
            )
        return
    if as_json:
        click.echo(rec.to_json())
    else:
        click.echo(render_record(rec, show_files))


if __name__ == "__main__":  # pragma: no cover
    main()
