"""A sync started as a background job of a non-interactive shell (`s3rs sync ... | reader &`
in a script or cron job) inherits SIGINT ignored. Dagster points SIGTERM at SIGINT's handler,
so after a run the process ignored SIGTERM, and a run executed afterwards in a thread (where
Dagster cannot install signal handlers) started its compute-log `tail -F` children ignoring
SIGTERM: Dagster's terminate() did nothing, each waited out a 30 s timeout, and the tails
outlived the process holding its stdout pipe open (the reader never saw EOF). The CLI puts
SIGINT back to Python's handler (cli._interruptible).

Real stack: two tiny tables, real Dagster runs with the instance's compute-log capture, the
command line's own entry point (`cli.main`), started by `bash -c '... &  wait'`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from contextlib import suppress
from datetime import timedelta

import pytest

from s3rs_assets_tests.cli_stack import (
    day,
    empty_warehouse,
    mysql,
)
from s3rs_assets_tests.conftest import REPO
from s3rs_assets_tests.helpers import make_ties_table
from s3rs_assets_tests.processes import MARKER, marked

# One sync on the main thread, as `s3rs sync` runs; then one in a thread, as a process
# that keeps running syncs does (a thread of `--parallel` after a main-thread run).
CHILD = """
import signal, sys, threading
from s3rs_assets import cli
print("SIGINT at start:", "ignored" if signal.getsignal(signal.SIGINT) == signal.SIG_IGN
      else "handled", flush=True)
cli.main(["sync", "-t", sys.argv[1], "--no-progress"], standalone_mode=False)
print("SIGTERM after a run:", "ignored" if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
      else "handled", flush=True)
t = threading.Thread(target=cli.main, args=(["sync", "-t", sys.argv[2], "--no-progress"],),
                     kwargs={"standalone_mode": False})
t.start()
t.join()
print("child done", flush=True)
"""

#: seconds from the child's exit to EOF on its stdout: immediate when nothing outlives it;
#: with the bug the tails never exit (and the thread's run alone took 60 s longer)
EOF_WITHIN = 30


@pytest.fixture
def two_tables(stack):
    rows = [(i, day(1) + timedelta(hours=2, microseconds=i)) for i in range(1, 6)]
    with mysql(stack.db) as conn:
        for t in ("cli_par1", "cli_par2"):
            make_ties_table(conn, t, rows)
    empty_warehouse(stack, "cli_par1", "cli_par2")
    return stack.name("cli_par1"), stack.name("cli_par2")


def test_background_sync_leaves_nothing_holding_its_stdout(stack, two_tables):
    first, second = two_tables
    marker = uuid.uuid4().hex
    env = {**os.environ, "PYTHONPATH": str(REPO), MARKER: marker, "CHILD": CHILD}
    # a non-interactive shell's background job: bash starts it with SIGINT and SIGQUIT ignored
    script = f'"{sys.executable}" -c "$CHILD" "{first}" "{second}" & wait'
    proc = subprocess.Popen(
        ["bash", "-c", script], env=env, cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=600)  # bash's `wait` returns when the child process has exited
        reader.join(timeout=EOF_WITHIN)
        eof = not reader.is_alive()
        # Spark's JVM and Python workers may take a moment to go after the child has gone;
        # the tails of the bug never do
        deadline = time.monotonic() + 15
        while marked(marker) and time.monotonic() < deadline:
            time.sleep(0.3)
        left = [(pid, _cmdline(pid)) for pid in marked(marker)]
    finally:
        for pid in marked(marker):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reader.join(timeout=10)
    text = b"".join(out).decode(errors="replace")
    assert proc.returncode == 0
    assert "SIGINT at start: ignored" in text, text[-3000:]  # the case this test is about
    assert not left, f"outlived the sync: {left}"
    assert eof, f"stdout still open {EOF_WITHIN} s after the sync exited"
    assert "child done" in text, text[-3000:]
    assert "SIGTERM after a run: handled" in text, text[-3000:]
    assert text.count(" succeeded") == 2, text[-3000:]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:150]
    except OSError:
        return "?"
