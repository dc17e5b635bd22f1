"""A stop asked of the whole process: Ctrl-C in `s3rs sync --parallel N`.

A signal reaches the main thread only, and Dagster cannot hold it for runs executing in
other threads, so such runs are asked to stop instead: the command sets `STOP`, and the
stages look at it where stopping loses nothing (the backup before it starts reading the
next chunk, once the chunk in flight is checkpointed; the load before each transaction),
raising the same KeyboardInterrupt a Ctrl-C raises on the main thread
(`stage_results.dagster_step` fails the step without a retry). No Dagster import: the CLI
sets it before any run module is loaded.
"""

from __future__ import annotations

import threading

STOP = threading.Event()


def check() -> None:
    """Raise KeyboardInterrupt once a stop was asked for."""
    if STOP.is_set():
        raise KeyboardInterrupt("stop requested (Ctrl-C)")
