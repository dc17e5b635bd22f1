"""`s3rs spark serve|start|status|stop`: the long-lived Spark Connect server runs attach to.

Thin: the server's logic is in `spark_server`. `serve` runs it in the foreground (Ctrl-C
stops it); `start` leaves it running in the background (what `make ui` does) and returns
once it accepts clients. Point runs at it with `S3RS_SPARK_MASTER=<the sc:// URL printed>`:
it names the server's warm session, which runs share (see `spark_server.wait_ready`).
Exit codes: 0 done; 1 `status` found no server; 2 bad input or the server failed to start.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import click

from s3rs_assets import spark_server
from s3rs_assets.cli.common import echo
from s3rs_assets.errors import S3rsError
from s3rs_assets.resources import DEFAULT_JDBC_JARS


def _server_options(f: Any) -> Any:
    options = [
        click.option("--port", type=click.IntRange(1, 65535), default=spark_server.DEFAULT_PORT,
                     show_default=True, help="gRPC port clients connect to."),
        click.option("--host", default=spark_server.DEFAULT_HOST, show_default=True,
                     help="Address to listen on."),
        click.option("--master", default="local[*]", show_default=True,
                     help="Where the server's tasks run: local[N] or a cluster's spark://..."),
        click.option("--jars", default=lambda: os.environ.get("S3RS_SPARK_JARS",
                                                              DEFAULT_JDBC_JARS),
                     help="JDBC driver jar(s), comma-separated (default: S3RS_SPARK_JARS or "
                     f"{DEFAULT_JDBC_JARS})."),
    ]
    for option in reversed(options):
        f = option(f)
    return _state_option(f)


def _state_option(f: Any) -> Any:
    return click.option(
        "--state-dir", type=click.Path(path_type=Path), default=None,
        help="Where the pid, URL and log files are (default: S3RS_SPARK_STATE_DIR or "
        ".local/spark-connect).",
    )(f)


def _settings(port: int, host: str, master: str, jars: str,
              state_dir: Path | None) -> spark_server.ServerSettings:
    return spark_server.ServerSettings(
        port=port, host=host, master=master, jars=jars,
        state_dir=state_dir or spark_server.default_state_dir(),
    )


def _ready(settings: spark_server.ServerSettings, proc: Any) -> None:
    app_id = spark_server.wait_ready(settings, proc)
    echo(f"Spark Connect server ready: {settings.url} (application {app_id}, pid {proc.pid}, "
          f"log {settings.log_file})")
    echo(f"attach runs with: export S3RS_SPARK_MASTER='{settings.url}'")


@click.group("spark")
def spark() -> None:
    """A long-lived Spark Connect server, so runs attach (~1 s) instead of starting Spark."""


@spark.command("serve")
@_server_options
def serve(port: int, host: str, master: str, jars: str, state_dir: Path | None) -> None:
    """Run the server in the foreground until Ctrl-C (or SIGTERM)."""
    settings = _settings(port, host, master, jars, state_dir)

    def _terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    try:
        proc = spark_server.launch(settings)
    except S3rsError as e:
        echo(f"error: {e}", err=True)
        sys.exit(2)
    try:
        _ready(settings, proc)
        proc.wait()
        echo(f"the Spark Connect server exited with {proc.returncode}; see "
              f"{settings.log_file}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        echo("stopping the Spark Connect server")
    except S3rsError as e:
        echo(f"error: {e}", err=True)
        sys.exit(2)
    finally:
        spark_server.stop(settings.state_dir)


@spark.command("start")
@_server_options
def start(port: int, host: str, master: str, jars: str, state_dir: Path | None) -> None:
    """Start the server in the background (no-op when one is running) and wait for it."""
    settings = _settings(port, host, master, jars, state_dir)
    found = spark_server.running(settings.state_dir)
    if found is not None:
        echo(f"Spark Connect server already running: {found.url} (pid {found.pid})")
        return
    try:
        proc = spark_server.launch(settings)
        _ready(settings, proc)
    except S3rsError as e:
        spark_server.stop(settings.state_dir)
        echo(f"error: {e}", err=True)
        sys.exit(2)


@spark.command("status")
@_state_option
def status(state_dir: Path | None) -> None:
    """Say whether the server is running, and its URL."""
    found = spark_server.running(state_dir)
    if found is None:
        echo("no Spark Connect server running")
        sys.exit(1)
    echo(f"running: {found.url} (pid {found.pid})")


@spark.command("stop")
@_state_option
def stop(state_dir: Path | None) -> None:
    """Stop the server started by `serve` or `start`."""
    found = spark_server.stop(state_dir)
    echo(f"stopped {found.url} (pid {found.pid})" if found else "no Spark Connect server running")
