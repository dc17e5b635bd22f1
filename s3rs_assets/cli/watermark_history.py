"""`s3rs watermark history -t T` and `s3rs watermark restore -t T --to ID`: the undo of a
manual edit. The versions and the restore change are in `watermark.history`; the
description, confirmation and compare-and-swap are `watermark set`'s (`manual_change`)."""

from __future__ import annotations

import click

from s3rs_assets.cli.common import _dump, _s3_checked, _store, _table, echo, friendly_errors
from s3rs_assets.cli.watermark_change import manual_change
from s3rs_assets.config import TableConfig
from s3rs_assets.watermark import history, iso
from s3rs_assets.watermark.edits import MANUAL_STRATEGY, describe_change, next_start
from s3rs_assets.watermark.edits import fmt as _fmt

#: change lines shown per version in `history` (the restore preview shows them all)
SHOWN_CHANGES = 8


def _summary(table: TableConfig, v: history.Version) -> str:
    rec = v.record
    if rec is None:
        return f"INVALID: {v.error}"
    manual = ""
    if rec.backup_strategy == MANUAL_STRATEGY:
        manual = (
            f"; set by hand to {_fmt(rec.manual_timestamp)}"
            if rec.manual_timestamp
            else "; reset by hand"
        )
    return (
        f"next sync from {next_start(table, rec)[2]}; {rec.mysql_rows_extracted:,} rows "
        f"extracted, {rec.redshift_rows_loaded:,} loaded{manual}"
    )


#: fields that change with every save and say nothing about the data
_BOOKKEEPING = {"updated_at", "backup_metadata"}


def _other_fields(older: history.Version, newer: history.Version) -> str:
    """The top-level fields that differ when the position did not move (e.g. `reconcile`,
    written by `s3rs reconcile`; `last_error`, written by a failed run)."""
    a = older.record.model_dump(mode="json") if older.record else {}
    b = newer.record.model_dump(mode="json") if newer.record else {}
    names = sorted(k for k in set(a) | set(b) if k not in _BOOKKEEPING and a.get(k) != b.get(k))
    return ", ".join(names) or "nothing but the time it was saved"


def _as_json(table: TableConfig, v: history.Version) -> dict:
    rec = v.record
    return {
        "id": v.id,
        "current": v.current,
        "saved_at": iso(v.saved),
        "copies": [
            {"where": c.where, "key": c.key, "version_id": c.version_id,
             "last_modified": c.last_modified.isoformat()}
            for c in v.copies
        ],
        "valid": rec is not None,
        "error": v.error,
        "next_start": next_start(table, rec)[2] if rec else None,
        "rows_extracted": rec.mysql_rows_extracted if rec else None,
        "rows_loaded": rec.redshift_rows_loaded if rec else None,
        "backup_strategy": rec.backup_strategy if rec else None,
        "manual_timestamp": iso(rec.manual_timestamp) if rec else None,
    }


@click.command("history")
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Newest distinct versions shown.",
)
@click.option("--json", "as_json", is_flag=True, help="The versions as a JSON list.")
@friendly_errors
def watermark_history(name: str, limit: int, as_json: bool) -> None:
    """List the versions of a table's watermark, newest first, and what changed in each.

    A version is one distinct content of the record wherever it is kept: the primary, the
    daily and session copies, the copy every `set`/`reset`/`restore` keeps of the record it
    replaces, and older S3 versions of the primary when the bucket has versioning. Its id
    (8 hex digits of its MD5) is what `s3rs watermark restore --to` takes.
    """
    table = _table(name)
    store = _store(_s3_checked())
    found, notes = history.versions(store, table.name, limit)
    if as_json:
        _dump([_as_json(table, v) for v in found])
        return
    for n in notes:
        echo(f"note: {n}", err=True)
    if not found:
        echo(f"No watermark for {table.name} in S3: nothing to restore.")
        return
    echo(
        f"Watermark versions of {table.name}, newest first "
        f"(put one back: s3rs watermark restore -t {table.name} --to ID)"
    )
    for i, v in enumerate(found):
        older = next((o for o in found[i + 1 :] if o.record is not None), None)
        echo("")
        echo(f"  {v.id}  saved {_fmt(v.saved)}{'  (current)' if v.current else ''}")
        echo(f"      held by: {', '.join(c.where for c in v.copies)}")
        echo(f"      {_summary(table, v)}")
        if v.record is None:
            continue
        if older is None:
            echo("      (the oldest version shown)")
            continue
        lines = describe_change(table, older.record, v.record, limit=4)
        if not lines:
            echo(f"      same position as {older.id}; changed: {_other_fields(older, v)}")
            continue
        echo(f"      changes from {older.id}:")
        shown = lines[:SHOWN_CHANGES]
        for line in shown:
            echo(f"      {line}")
        if len(lines) > len(shown):
            echo(f"        ... {len(lines) - len(shown)} more line(s): "
                 f"`s3rs watermark restore -t {table.name} --to {older.id} --dry-run` shows "
                 "them all")


@click.command("restore")
@click.option("-t", "--table", "name", required=True, help="schema.table")
@click.option("--to", "ident", required=True, help="Version id from `s3rs watermark history`.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@friendly_errors
def watermark_restore(name: str, ident: str, yes: bool, dry_run: bool) -> None:
    """Put a version of the watermark back (the undo of `set` / `reset`).

    Shows every change from the current record to that version, asks, then writes it
    compare-and-swap onto the record that was shown, exactly like `set`; the current
    record is kept as a copy first, so a restore can be undone too. The current
    `reconcile` section is kept: repairs already made to the warehouse stay recorded.
    """
    table = _table(name)
    store = _store(_s3_checked())
    version = history.find(store, table.name, ident)
    manual_change(
        table,
        history.restore_change(version),
        title=f"watermark restore {table.name} to version {version.id} "
        f"(saved {_fmt(version.saved)}, held by {', '.join(c.where for c in version.copies)}):",
        yes=yes,
        dry_run=dry_run,
        now=None,
        create=False,
        keep="restore",
        store=store,
    )
