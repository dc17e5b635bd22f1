"""`s3rs server serve|start|status|stop`: the long-lived process `s3rs sync` hands its
command line to (`sync_server`), so a sync skips ~2 s of imports.

`serve` runs it in the foreground (Ctrl-C stops it), `start` in the background, returning
once it answers. Running syncs are not stopped with it: each is its own process.
Exit codes: 0 done; 1 `status` found no server (or one on other code); 2 bad input or the
server could not start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from s3rs_assets import sync_server
from s3rs_assets.cli.common import echo
from s3rs_assets.errors import S3rsError

START_TIMEOUT = 120.0


def _state_option(f: Any) -> Any:
    return click.option(
        "--state-dir", type=click.Path(path_type=Path), default=None,
        help=f"Where the socket, pid and log files are (default: {sync_server.STATE_DIR_ENV} "
        "or .local/s3rs-server).",
    )(f)


@click.group("server")
def server() -> None:
    """A long-lived process that runs each `s3rs sync` (~2 s of imports saved per sync)."""


@server.command("serve")
@_state_option
@click.pass_context
def serve(ctx: click.Context, state_dir: Path | None) -> None:
    """Run the server in the foreground until Ctrl-C (or SIGTERM)."""
    state_dir = state_dir or sync_server.default_state_dir()

    def _terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with `&`
    srv = sync_server.Server(state_dir, ctx.find_root().command)  # the `s3rs` group
    try:
        srv.bind()
    except S3rsError as e:
        echo(f"error: {e}", err=True)
        sys.exit(2)
    try:
        try:
            sync_server.preload()
        except S3rsError as e:
            echo(f"error: {e}", err=True)
            sys.exit(2)
        echo(f"s3rs server ready: {srv.path} (pid {os.getpid()}); `s3rs sync` runs here "
             f"while it runs ({sync_server.SWITCH_ENV}=off: not)")
        srv.serve_forever()
    except KeyboardInterrupt:
        echo("s3rs server stopping (running syncs go on)")
    finally:
        srv.close()


@server.command("start")
@_state_option
def start(state_dir: Path | None) -> None:
    """Start the server in the background (no-op when one is running) and wait for it."""
    state_dir = state_dir or sync_server.default_state_dir()
    found = sync_server.running(state_dir)
    if found is not None:
        echo(f"s3rs server already running (pid {found['pid']})")
        return
    state_dir.mkdir(parents=True, exist_ok=True)
    log_file = state_dir / "server.log"
    with open(log_file, "ab") as log, open(os.devnull, "rb") as null:
        proc = subprocess.Popen(
            [sys.executable, "-m", "s3rs_assets.cli", "server", "serve",
             "--state-dir", str(state_dir)],
            stdin=null, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        found = sync_server.running(state_dir)
        if found is not None and found.get("pid") == proc.pid:
            echo(f"s3rs server ready (pid {proc.pid}, log {log_file}); `s3rs sync` runs in it")
            return
        if proc.poll() is not None:
            echo(f"error: the s3rs server exited with {proc.returncode}; see {log_file}",
                 err=True)
            sys.exit(2)
        time.sleep(0.1)
    proc.terminate()
    echo(f"error: the s3rs server did not answer within {START_TIMEOUT:.0f} s; see {log_file}",
         err=True)
    sys.exit(2)


@server.command("status")
@_state_option
def status(state_dir: Path | None) -> None:
    """Say whether the server is running and runs this code."""
    found = sync_server.running(state_dir)
    if found is None:
        echo("no s3rs server running")
        sys.exit(1)
    age = time.time() - float(found.get("started", time.time()))
    current = found.get("fingerprint") == sync_server.fingerprint()
    echo(f"running: pid {found['pid']}, up {age:.0f} s, {found.get('workers', 0)} sync(s) "
         f"running, {'this code' if current else 'OTHER code: syncs run in their own process'}")
    if not current:
        sys.exit(1)


@server.command("stop")
@_state_option
def stop(state_dir: Path | None) -> None:
    """Stop the server (syncs it is running go on to their end)."""
    state_dir = state_dir or sync_server.default_state_dir()
    found = sync_server.running(state_dir)
    if found is None:
        echo("no s3rs server running")
        return
    pid = int(found["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline and sync_server.socket_path(state_dir).exists():
        time.sleep(0.05)
    echo(f"stopped the s3rs server (pid {pid})")
