"""What every `s3rs` command shares: printing through the redactor, turning s3rs errors
into exit code 2, connections built from the environment, and the table list.

The connections are the plain ones of connections.py, not the Dagster resources: a command
that only reads (`watermark get/list`, `verify`, `s3clean list`) then starts without
importing Dagster or Spark (test_imports.py counts). `s3rs sync` takes the resources from
`env_resources.resources_from_env`, like the definitions.

What only a MySQL connection needs (`source`, `waiting`, and with them pymysql and
cryptography) is imported where the connection is opened: `watermark get/list` never
talks to MySQL and starts without them."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from datetime import datetime
from functools import wraps
from typing import TYPE_CHECKING, Any

import click
from botocore.exceptions import BotoCoreError, ClientError

from s3rs_assets import logs
from s3rs_assets.config import TableConfig, find_table, load_tables
from s3rs_assets.connections import (
    MySQLConnector,
    S3Connector,
    WarehouseConnector,
    mysql_from_env,
    s3_from_env,
    warehouse_from_env,
)
from s3rs_assets.errors import ConfigError, S3rsError
from s3rs_assets.watermark.store import WatermarkStore

if TYPE_CHECKING:
    from s3rs_assets.waiting import Waiting

log = logging.getLogger("s3rs.cli")
#: the exit code of a command stopped by Ctrl-C (SIGINT; SIGTERM where Dagster makes it one):
#: 128 + 2, as a shell reports a process a SIGINT ended, so `s3rs sync || page` tells an
#: interruption from a finding (1) or a usage or connection error (2)
INTERRUPTED_EXIT = 130


def echo(text: str = "", err: bool = False, **style: Any) -> None:
    """click.echo through the redactor: nothing printed may carry a credential."""
    text = logs.redact(text)
    if style:
        click.secho(text, err=err, **style)
    else:
        click.echo(text, err=err)


def _s3() -> S3Connector:
    return s3_from_env()


def _s3_checked(s3: Any = None) -> Any:
    """The bucket (`s3`, else from the environment), asked once (HEAD bucket) before
    anything else: an unreachable endpoint, refused credentials or a missing bucket is then
    one clear error naming the bucket and the endpoint (exit 2), not a failure halfway
    through a listing."""
    s3 = s3 or _s3()
    client = s3.client()
    where = f"s3://{s3.bucket} at {client.meta.endpoint_url}"
    try:
        client.head_bucket(Bucket=s3.bucket)
    except ClientError as e:
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        why = {
            404: "no such bucket (S3RS_S3_BUCKET)",
            403: "access denied (AWS credentials, or the bucket's policy)",
        }.get(status, f"{e.response.get('Error', {}).get('Code', '')} {e}".strip())
        raise ConfigError(f"cannot use {where}: {why}") from None
    except BotoCoreError as e:
        raise ConfigError(f"cannot reach {where}: {e} (AWS_ENDPOINT_URL_S3?)") from None
    return s3


def _store(s3: Any = None) -> WatermarkStore:
    """A new watermark store, as `io_manager.store_for` builds it outside a run (no run
    id, no event-log fallback), without importing the Dagster layer."""
    s3 = s3 or _s3()
    return WatermarkStore(s3.client(), s3.bucket, s3.layout)


def _mysql() -> MySQLConnector:
    return mysql_from_env()


def _warehouse() -> WarehouseConnector:
    return warehouse_from_env()


def _source_now() -> datetime:
    """The MySQL server's clock (naive, source time zone): what cursors compare against."""
    from s3rs_assets.source import server_now

    with _mysql().connect() as conn:
        return server_now(conn)


def _not_yet(table: TableConfig, upper: datetime | None) -> Waiting | None:
    """The rows of `table` at or above `upper` (the bound a plan, run or comparison stopped
    at), when they become readable and what holds the bound back (waiting.py), for the
    "not yet" lines of sync and reconcile. Best effort, after the command's own work: None
    (logged at debug level) when MySQL cannot be asked now."""
    if upper is None:
        return None
    from s3rs_assets.waiting import waiting_now

    try:
        with _mysql().connect() as conn:
            return waiting_now(conn, table, upper)
    except Exception as e:  # noqa: BLE001 - a courtesy: the command's answer is already made
        log.debug("%s: rows above the safety bound not counted: %s", table.name, e)
        return None


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn s3rs's own errors into one red line and exit code 2, without a traceback.

    Anything else is a bug or an unexpected service error: one redacted line, exit 1, and
    the (redacted) traceback at debug level. Ctrl-C: one line, exit INTERRUPTED_EXIT (not
    click's "Aborted!" and 1, which a script would take for a finding).
    """

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except S3rsError as e:
            echo(f"error: {e}", err=True, fg="red")
            sys.exit(2)
        except KeyboardInterrupt:
            echo("interrupted", err=True, fg="red")
            sys.exit(INTERRUPTED_EXIT)
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


def _say(ctx: click.Context, level: int, text: str, **fields: Any) -> None:
    """A finding for people (a coloured line on stderr) or, with `--log-format json`, one
    structured log record carrying `fields`."""
    if ctx.obj and ctx.obj.get("log_format") == "json":
        log.log(level, text, extra=fields)
    else:
        echo(text, err=True, fg="red" if level >= logging.ERROR else "yellow")
