"""The `s3rs` command line: thin, it calls the same functions the assets use.

One module per command group: `sync`, `watermark`, `s3` (s3clean), `tables`, `verify`,
`reconcile`; `common` holds what they share. The logic lives beside the data it changes
(`runner`, `watermark.edits`, `s3clean`, `verify`, `reconcile`): these modules parse, call
and print.

With an `s3rs server` running, `sync` is handed to it before its module is imported
(`_LazyGroup.invoke`, `sync_server.forward`): a worker forked from the server runs this
same command line with the caller's environment, directory and stdio.

Sensors and this CLI never start Spark themselves; `s3rs sync` launches Dagster runs, and
those runs start one SparkSession for the whole command.

Exit codes (README, "Command line"; tested in test_exit_codes.py): 0 done and complete;
1 a sync, check or verify found a failure, `watermark list` could not read a record, or a
confirmation was declined; 2 bad input or configuration (unknown table, misspelt column,
invalid timestamp, conflicting flags, MySQL, S3 or the warehouse unreachable or refusing
the login): nothing was changed. Rows above the safety bound are "not yet" (waiting.py),
never a failure.

Settings: the environment first, then `.local/s3rs.env` for what is not exported
(`local_env`, written by `make demo`). Quiet by default; `-v` shows Dagster's event lines
and Spark's WARN lines.

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
import signal
import threading
import warnings

import click
from click.utils import make_default_short_help

from s3rs_assets import logs
from s3rs_assets.cli import local_env
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
    "status": ("s3rs_assets.cli.status", "status"),
    "server": ("s3rs_assets.cli.server", "server"),
}

#: the first line of each command's help, for `s3rs --help` without importing every
#: command (and Dagster with `sync`); test_imports.py checks they match the commands
SUMMARIES = {
    "sync": "Sync tables through Dagster, running only where MySQL has rows or S3 has "
    "files to load.",
    "watermark": "Inspect and manage watermarks.",
    "s3clean": "List and delete a table's parquet files in S3 (never watermarks, never "
    "unloaded files unless --force).",
    "tables": "Help with tables.yaml.",
    "verify": "Compare MySQL and the warehouse per partition (rows, checksum of key and "
    "cursor).",
    "reconcile": "Compare a table in MySQL and the warehouse by primary key; --apply "
    "repairs it.",
    "spark": "A long-lived Spark Connect server, so runs attach (~1 s) instead of "
    "starting Spark.",
    "status": "Every table's lag behind MySQL, last run and what needs a person.",
    "server": "A long-lived process that runs each `s3rs sync` (~2 s of imports saved per "
    "sync).",
}
#: commands an `s3rs server` runs when one is running (sync_server.forward)
SERVED = ("sync",)


class _LazyGroup(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Also note the command line and the command's name, for `invoke`."""
        argv = list(args)
        rest = super().parse_args(ctx, args)
        ctx.meta["s3rs.argv"] = argv
        ctx.meta["s3rs.command"] = argv[-len(rest) - 1] if len(argv) > len(rest) else None
        return rest

    def invoke(self, ctx: click.Context) -> object:
        """A served command goes to the running `s3rs server` (before its module is even
        imported); without one, or with a stale one, it runs here."""
        if ctx.meta.get("s3rs.command") in SERVED:
            from s3rs_assets import sync_server

            try:
                local_env.load()  # the worker gets what this process would have read
            except S3rsError:
                return super().invoke(ctx)  # the group's callback says what is wrong
            code = sync_server.forward(ctx.meta["s3rs.argv"])
            if code is not None:
                ctx.exit(code)
        return super().invoke(ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr = COMMANDS[cmd_name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's list of commands, from SUMMARIES instead of importing each command."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, make_default_short_help(SUMMARIES[name], limit)) for name in COMMANDS]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup)
@click.option(
    "--log-format",
    type=click.Choice(logs.FORMATS),
    default=None,
    help="Log lines as text (default) or JSON lines; also S3RS_LOG_FORMAT.",
)
@click.option(
    "--log-level",
    default=None,
    show_default="INFO",
    help="DEBUG, INFO, WARNING or ERROR (S3RS_LOG_LEVEL).",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Everything: s3rs at DEBUG, Dagster's event lines, Spark's WARN lines "
    "(= --log-level DEBUG).",
)
@click.pass_context
def main(ctx: click.Context, log_format: str | None, log_level: str | None, verbose: bool) -> None:
    """s3rs: keep Redshift in step with MySQL through S3 parquet, on Dagster.

    Settings come from the environment; variables you have not exported are taken from
    `.local/s3rs.env` (written by `make demo`) when there is one: see the README, "The
    local stack".
    """
    _interruptible()
    try:
        local_env.load()  # before anything reads the environment (the redactor included)
        level = "DEBUG" if verbose else (log_level or os.environ.get("S3RS_LOG_LEVEL", "INFO"))
        if level.upper() != "DEBUG":
            _quiet_known_warnings()
        fmt = logs.resolve_format(log_format)
        logs.configure(fmt, level)
    except S3rsError as e:
        raise click.UsageError(str(e)) from None
    ctx.obj = {"log_format": fmt, "log_level": level.upper()}


def _interruptible() -> None:
    """SIGINT back to Python's handler when it was inherited ignored (`s3rs ... &` in a
    script or cron job: a non-interactive shell starts background jobs so).

    Dagster turns SIGTERM into whatever SIGINT is: after a run it leaves SIGTERM ignored
    too, so the process no longer stops on `kill`/`timeout`, and a later run in a thread
    starts its compute-log `tail -F` children ignoring SIGTERM: they outlive the command
    and hold its stdout open. A foreground Ctrl-C is unchanged (SIGINT was not ignored);
    Spark's JVM ignores SIGINT either way (PySpark starts it so)."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _quiet_known_warnings() -> None:
    """Dagster's warning that `backfill_policy` is beta, printed whenever the definitions
    are built: every table's single-run backfills rely on it, and it says nothing a person
    running s3rs can act on (scripts/ui.sh filters it the same way). Shown with -v."""
    warnings.filterwarnings(
        "ignore", message=r"Parameter `backfill_policy` of function `asset` is currently in beta"
    )

