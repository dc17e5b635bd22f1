"""What every manual watermark edit shares (`set`, `reset`, `restore`): show before ->
after, confirm, write compare-and-swap onto the record that was shown, and keep the
record it replaced so the edit can be undone (`watermark.history.keep_copy`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import click

from s3rs_assets.cli.common import _s3_checked, _store, echo
from s3rs_assets.config import TableConfig
from s3rs_assets.errors import S3rsError
from s3rs_assets.watermark import WatermarkRecord
from s3rs_assets.watermark import edits as watermark_edit
from s3rs_assets.watermark import history as watermark_history
from s3rs_assets.watermark.edits import next_start


def manual_change(
    table: TableConfig,
    change: Callable[[WatermarkRecord], None],
    *,
    title: str,
    yes: bool,
    dry_run: bool,
    now: datetime | None,
    notes: list[str] = (),
    create: bool = True,
    also: tuple[list[str], Callable[[], str]] | None = None,
    keep: str,
    store: Any = None,
) -> None:
    """Show before -> after, confirm, then apply `change` compare-and-swap
    (watermark_edit.commit refuses if the record moved since it was shown). `also` is a
    change outside the record (its description lines, and the call that makes it after the
    record is saved). The record replaced is first kept as the session copy
    `before-<keep>-<time>` (watermark.history.keep_copy), so `watermark restore` can put it
    back whatever the bucket's versioning."""
    store = store or _store(_s3_checked())
    mc = watermark_edit.preview(store, table, change, now=now, create=create)
    extra, act = also if also else ([], None)
    echo(title)
    if mc is None and not extra:
        echo(f"  nothing to change: {table.name} has no watermark yet.")
        return
    for n in notes:
        echo(f"  note: {n}")
    diff = (mc.diff if mc else []) + extra
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
    # The bytes the edit replaces, read before it commits: the commit's compare-and-swap
    # refuses if they are not the record shown, so they are kept only once it succeeded.
    replaced = watermark_history.primary_body(store, table.name) if mc and mc.diff else None
    saved = watermark_edit.commit(store, mc, now=now) if mc and mc.diff else None
    if replaced is not None and saved is not None:
        try:
            vid, key = watermark_history.keep_copy(store, table.name, keep, replaced)
            echo(
                f"kept the record it replaced as version {vid} ({key}): "
                f"`s3rs watermark restore -t {table.name} --to {vid}` puts it back"
            )
        except S3rsError as e:  # the edit is done; only its undo copy is missing
            echo(f"warning: {e}; `s3rs watermark history -t {table.name}` lists the other "
                 "copies", err=True, fg="yellow")
    if act is not None:
        echo(act())
    if saved is not None:
        echo(f"saved: next sync starts from {next_start(table, saved)[2]}")
