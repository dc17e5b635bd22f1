"""Processes the slow tests start (a webserver, Spark clusters): each runs in its own
process group with a marker in its environment, and is stopped with SIGTERM, then SIGKILL
after a grace period, even when the test fails; `managed_process` asserts none is left."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

MARKER = "S3RS_TEST_PROCESS_ID"


def _procs(pred) -> list[int]:
    """Live (non-zombie) processes for which pred(stat fields, environ bytes) holds."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp ...
            if fields[0] != "Z" and pred(fields, d):
                pids.append(int(d.name))
        except (OSError, ValueError):
            continue
    return pids


def _leftovers(pgid: int, marker: str) -> list[int]:
    needle = f"{MARKER}={marker}".encode()
    return _procs(
        lambda f, d: int(f[2]) == pgid or needle in (d / "environ").read_bytes().split(b"\0")
    )


def marked(marker: str) -> list[int]:
    """Live processes whose environment carries `MARKER=marker` (children inherit it)."""
    needle = f"{MARKER}={marker}".encode()
    return _procs(lambda f, d: needle in (d / "environ").read_bytes().split(b"\0"))


def restore_default_signals() -> None:
    """preexec_fn: default SIGINT/SIGTERM/SIGHUP, as in an interactive terminal."""
    _restore_default_signals()


def _restore_default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def tail(path: Path, n: int = 5000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


@contextmanager
def managed_process(args: list[str], env: dict, log: Path, cwd: Path) -> Iterator[subprocess.Popen]:
    """Start `args` in its own process group; on exit stop it and all it started."""
    marker = uuid.uuid4().hex
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env={**env, MARKER: marker},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_restore_default_signals,
        )
    try:
        yield proc
    finally:
        _stop(proc, marker)


def _stop(proc: subprocess.Popen, marker: str, grace: float = 15.0) -> None:
    pgid = proc.pid
    with suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        proc.poll()
        if not _leftovers(pgid, marker):
            break
        time.sleep(0.3)
    for pid in _leftovers(pgid, marker):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _leftovers(pgid, marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _leftovers(pgid, marker)
    assert not left, f"processes left running: {left}"
