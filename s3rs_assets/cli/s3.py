"""`s3rs s3clean list|clean|clean-all`: prints what `s3rs_assets.s3clean` finds and does."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from s3rs_assets import s3clean as cleanup
from s3rs_assets.cli.common import _dump, _s3, _store, _table, _warehouse, echo, friendly_errors
from s3rs_assets.config import TableConfig, load_tables
from s3rs_assets.times import parse_age


@click.group()
def s3clean() -> None:
    """List and delete a table's parquet files in S3 (never watermarks, never unloaded
    files unless --force)."""


def _size(n: float) -> str:
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
    listing = cleanup.classify(s3, _store(s3), table, _warehouse)
    objs = listing.files
    if as_json:
        _dump(
            {
                "table": table.name,
                "load_state_from": listing.source,
                "files": [{**o, "last_modified": o["last_modified"].isoformat()} for o in objs],
            }
        )
        return
    echo(
        f"{table.name}: {len(objs)} file(s), {_size(sum(o['bytes'] for o in objs))} "
        f"(load state from {listing.source})"
    )
    for o in objs:
        echo(
            f"  {o['key']}  {_size(o['bytes']):>10}  "
            f"{o['last_modified'].astimezone(UTC):%Y-%m-%d %H:%M:%S}  {o['state']}"
        )
    echo("  " + ", ".join(f"{n} {s}" for s, n in listing.counts().items()))


def _print_report(r: cleanup.CleanReport) -> None:
    verb = "would delete" if r.dry_run else "deleted"
    removed = r.removed
    age_txt = f" older than {r.older_than}" if r.older_than else ""
    echo(
        f"{r.table}: {verb} {len(removed)} file(s){age_txt} "
        f"({_size(sum(o['bytes'] for o in removed))}); "
        f"kept {len(r.kept)} not yet loaded (load state from {r.source})"
    )
    for o in removed:
        echo(f"  {verb}: {o['key']}  ({o['state']})")
    for o in r.kept:
        echo(f"  kept:  {o['key']}  ({o['state']}; --force deletes it)")
    if r.forced_unloaded:
        echo(
            f"  note: {len(r.forced_unloaded)} {'would be' if r.dry_run else 'were'} in a "
            "partition manifest but not loaded yet: the next `s3rs sync` finds them gone and "
            "reads those partitions from MySQL again",
            err=True,
        )
    for k, e in r.failed.items():
        echo(f"  failed: {k}: {e}", err=True)


def _clean(
    tables: list[TableConfig], older_than: str | None, dry_run: bool, force: bool, as_json: bool
) -> None:
    age = parse_age(older_than, "--older-than") if older_than is not None else None
    cutoff = datetime.now(UTC) - age if age is not None else None
    s3 = _s3()
    store = _store(s3)
    reports = []
    for table in tables:
        report = cleanup.clean(
            s3,
            store,
            table,
            _warehouse,
            cutoff=cutoff,
            older_than=older_than,
            dry_run=dry_run,
            force=force,
        )
        reports.append(report)
        if not as_json:
            _print_report(report)
    if as_json:
        docs = [r.as_json() for r in reports]
        _dump(docs if len(docs) != 1 else docs[0])
    if any(r.failed for r in reports):
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

    A file counts as loaded when the warehouse's load ledger lists it (key and content) for
    the target as it is now; when the warehouse cannot be reached nothing is deleted (exit
    2). Partition manifests keep listing deleted files: they are the history of what was
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
