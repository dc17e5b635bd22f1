"""The `s3rs` command line: thin, it calls the same functions the assets use.

One module per command group: `sync`, `watermark`, `s3` (s3clean), `tables`, `verify`,
`reconcile`; `common` holds what they share. The logic lives beside the data it changes
(`runner`, `watermark.edits`, `s3clean`, `verify`, `reconcile`): these modules parse, call
and print.

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

import importlib
import os

import click

from s3rs_assets import logs
from s3rs_assets.errors import S3rsError

__all__ = ["main"]

#: command name -> (module, attribute): each module is imported when its command runs, so
#: a command imports only what it needs (`reconcile` neither Dagster nor Spark)
COMMANDS = {
    "sync": ("s3rs_assets.cli.sync", "sync"),
    "watermark": ("s3rs_assets.cli.watermark", "watermark"),
    "s3clean": ("s3rs_assets.cli.s3", "s3clean"),
    "tables": ("s3rs_assets.cli.tables", "tables"),
    "verify": ("s3rs_assets.cli.verify", "verify"),
    "reconcile": ("s3rs_assets.cli.reconcile", "reconcile"),
    "spark": ("s3rs_assets.cli.spark", "spark"),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr = COMMANDS[cmd_name]
        return getattr(importlib.import_module(module), attr)


@click.group(cls=_LazyGroup)
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

