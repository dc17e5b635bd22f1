"""`s3rs tables discover`: tables.yaml stanzas for a MySQL schema."""

from __future__ import annotations

import click

from s3rs_assets.cli.common import _mysql, echo, friendly_errors
from s3rs_assets.discovery import discover, render_discovery


@click.group()
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
