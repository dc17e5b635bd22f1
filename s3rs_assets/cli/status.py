"""`s3rs status`: every table's lag, last run and what needs a person (status.py)."""

from __future__ import annotations

import json
import sys

import click

from s3rs_assets.body_cache import BodyCache
from s3rs_assets.cli.common import _mysql, _s3_checked, _store, _tables, echo, friendly_errors
from s3rs_assets.config import load_tables
from s3rs_assets.status import exit_code, fleet_status, human_lag

_COLUMNS = ("TABLE", "STATE", "LAG", "NEWEST MYSQL", "NEWEST LOADED", "LAST RUN", "ROWS 24H")


@click.command()
@click.option(
    "-t",
    "--table",
    "names",
    multiple=True,
    help="schema.table (repeatable); default every configured table.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per table, for monitoring.")
@click.option(
    "--no-cache",
    is_flag=True,
    help="Read every record from S3, not from the local record cache (S3RS_CACHE_DIR).",
)
@friendly_errors
def status(names: tuple[str, ...], as_json: bool, no_cache: bool) -> None:
    """Every table's lag behind MySQL, last run and what needs a person."""
    tables = _tables(names) if names else load_tables()
    if not tables:
        raise click.UsageError("no tables configured")
    store = _store(_s3_checked())
    # a process starts with no memory: record bodies are kept on disk, used only when their
    # MD5 is the ETag S3 lists (body_cache.py)
    cache = None if no_cache else BodyCache.from_env(store.client.meta.endpoint_url)
    with _mysql().connect() as conn:
        statuses = fleet_status(tables, conn, store, cache=cache)
    code = exit_code(statuses)
    if as_json:
        echo(json.dumps({"exit_code": code, "tables": [s.as_json() for s in statuses]}, indent=2))
        sys.exit(code)
    rows = [
        (
            s.table,
            s.state,
            human_lag(s.lag_seconds),
            s.newest_mysql.isoformat(sep=" ", timespec="seconds") if s.newest_mysql else "-",
            s.newest_loaded.isoformat(sep=" ", timespec="seconds") if s.newest_loaded else "-",
            (s.last_result or "-")
            + (f" at {s.last_run_at:%Y-%m-%d %H:%M}" if s.last_run_at else ""),
            str(s.rows_last_day),
        )
        for s in statuses
    ]
    widths = [max(len(r[i]) for r in [_COLUMNS, *rows]) for i in range(len(_COLUMNS))]
    for r in [_COLUMNS, *rows]:
        echo("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    needs = [s for s in statuses if s.needs]
    if needs:
        echo(f"\n{len(needs)} table(s) need a person:")
        for s in needs:
            echo(f"  {s.table}: {s.needs}")
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s.state] = counts.get(s.state, 0) + 1
    echo(f"\n{len(statuses)} table(s): " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    sys.exit(code)
