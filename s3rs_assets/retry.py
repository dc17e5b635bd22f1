"""Transient errors and how s3rs retries them: one classifier, one backoff, one counter.

A dropped MySQL connection (failover, network blip, `wait_timeout`, a DBA's `KILL`), a lock
wait timeout, a deadlock, or a warehouse serialization failure must not fail a run. Each is
retried *where it happens*, a bounded number of times with exponential backoff (`call`):

* a MySQL query of the run (describe, safety bound, chunk planning, probes): re-run on a
  fresh connection (`MySQLResource.run`);
* a Spark read of a batch of sub-ranges (connectorx or JDBC in the tasks): the batch is
  read again. Nothing of it is checkpointed before every object is verified in S3, and its
  keys are deterministic, so a re-read overwrites its own objects: exactly the chunk in
  flight is read twice, nothing else;
* a warehouse load transaction: rolled back and run again (the load ledger in the same
  transaction makes it exactly once).
* a reconcile pass's reads (reconcile/run.py, reconcile/diff.py): run again on a new
  connection of the same side.

S3 requests are not retried here: botocore does that (standard mode, see
`resources.S3Resource` and `spark_tasks.s3_client`); one layer per call, never stacked.

What still fails after that, with an error `is_transient` accepts, is retried once more the
Dagster way: both assets carry `names.RETRY_POLICY` (its numbers are here). Any other error
(bad input, a schema change, a bug, a lost compare-and-swap race) fails the step at once
(`stage_results.dagster_step`). This module imports no Dagster: Spark task code uses it.

Every retry is counted in the run's `Retries`, which ends up in the materialization
metadata (`retries`) and in the output of `s3rs sync`.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pymysql

T = TypeVar("T")

#: MySQL/MariaDB error codes after which the same statement may well succeed.
MYSQL_TRANSIENT = {
    1053: "server shutdown in progress",
    1205: "lock wait timeout",
    1213: "deadlock",
    1927: "connection killed",
    2006: "server has gone away",
    2013: "lost connection",
    2014: "commands out of sync after a lost connection",
    2055: "lost connection",
}
#: SQLSTATEs of the warehouse (PostgreSQL / Redshift) worth running the transaction again.
WAREHOUSE_TRANSIENT = {
    "40001": "serialization failure",
    "40P01": "deadlock",
    "57P01": "admin shutdown",
    "57P02": "crash shutdown",
    "57P03": "cannot connect now",
}
#: What a failed Spark job says when a task's MySQL connection was lost (connectorx or JDBC
#: inside the task): Spark wraps the task's error in text, so text is all there is. MySQL's
#: signals only: a task's S3 errors were retried by botocore already (one layer).
#: "bytes remaining on stream": connectorx's MySQL client when the connection closed in the
#: middle of a packet (a KILL while rows were streaming).
_SPARK_TRANSIENT = re.compile(
    r"server disconnected|connection was killed|lost connection to|server has gone away"
    r"|communications link failure|unexpected end of stream|bytes remaining on stream"
    r"|deadlock found|lock wait timeout"
    r"|\b(?:ERROR|errno|code:?)\s*\(?(?:1205|1213|1927|2006|2013)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Backoff:
    """At most `attempts` tries; waits `first` seconds, doubling up to `cap`, jittered."""

    attempts: int
    first: float
    cap: float = 30.0

    def delay(self, attempt: int) -> float:
        """The wait after failed try number `attempt` (1-based)."""
        return min(self.cap, self.first * 2 ** (attempt - 1)) * (0.5 + random.random())


#: A MySQL query (a few ms each): up to 6 tries over roughly 15 s.
MYSQL_BACKOFF = Backoff(attempts=6, first=0.5)
#: A Spark read of one batch (seconds to minutes of work): up to 4 tries.
SPARK_READ_BACKOFF = Backoff(attempts=4, first=1.0)
#: A warehouse load transaction: up to 5 tries (load.load_files).
WAREHOUSE_BACKOFF = Backoff(attempts=5, first=0.5)
#: Dagster's retry of a step that still failed with a transient error (both assets:
#: names.RETRY_POLICY, exponential from this delay).
STEP_MAX_RETRIES = 2
STEP_RETRY_DELAY_SECONDS = 15.0


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a psycopg or redshift_connector error, if it carries one."""
    state = getattr(exc, "sqlstate", None)
    if state:
        return str(state)
    arg = exc.args[0] if exc.args else None
    if isinstance(arg, dict):  # redshift_connector: {'S': 'ERROR', 'C': '...', 'M': ...}
        return arg.get("C")
    return None


def _module(exc: BaseException) -> str:
    return type(exc).__module__ or ""


def kind(exc: BaseException) -> str | None:
    """A short name for a transient error ("mysql 2013 lost connection"), or None when the
    error is not transient (retrying would fail the same way, or hide a real fault)."""
    if isinstance(exc, pymysql.err.InterfaceError):
        return "mysql connection closed"  # pymysql's (0, '') on a connection the server dropped
    if isinstance(exc, pymysql.err.MySQLError):
        code = exc.args[0] if exc.args else None
        return f"mysql {code} {MYSQL_TRANSIENT[code]}" if code in MYSQL_TRANSIENT else None
    mod = _module(exc)
    if mod.startswith(("psycopg", "redshift_connector")):
        state = sqlstate(exc)
        if state in WAREHOUSE_TRANSIENT:
            return f"warehouse {state} {WAREHOUSE_TRANSIENT[state]}"
        if state and state.startswith("08"):
            return f"warehouse {state} connection failure"
        arg = exc.args[0] if exc.args else None
        if isinstance(arg, dict) and str(arg.get("M", "")).strip() == "1023":
            return "warehouse 1023 serializable isolation violation"  # Redshift, XX000
        if "serializable isolation violation" in str(exc).lower():
            return "warehouse serializable isolation violation"
        if state is None and type(exc).__name__ in ("OperationalError", "InterfaceError"):
            return "warehouse connection lost"  # no SQLSTATE: the connection itself broke
        return None
    if mod.startswith(("pyspark", "py4j")):
        match = _SPARK_TRANSIENT.search(str(exc))
        return f"spark read: {match.group(0).lower()}" if match else None
    if getattr(exc, "classify_by_cause", False) and exc.__cause__ is not None:
        return kind(exc.__cause__)  # an s3rs error wrapping a driver's (load.LoadError)
    return None


def is_transient(exc: BaseException) -> bool:
    return kind(exc) is not None


@dataclass
class Retries:
    """One run's retries, by kind of error: what the metadata and `s3rs sync` report."""

    by_kind: Counter[str] = field(default_factory=Counter)
    recent: list[str] = field(default_factory=list)  # the last few, for the UI

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def add(self, what: str, error_kind: str) -> None:
        self.by_kind[error_kind] += 1
        self.recent = [*self.recent, f"{what}: {error_kind}"][-10:]

    def metadata(self) -> dict[str, Any]:
        return {"total": self.total, "by_kind": dict(self.by_kind), "recent": self.recent}


class SharedRetries(Retries):
    """`Retries` counted from several threads at once (a reconcile pass's query threads)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add(self, what: str, error_kind: str) -> None:
        with self._lock:
            super().add(what, error_kind)


def call(
    op: Callable[[], T],
    *,
    what: str,
    retries: Retries,
    backoff: Backoff,
    transient: Callable[[BaseException], str | None] = kind,
    before_retry: Callable[[], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> T:
    """`op()`, tried again after a transient error (`transient(e)` names its kind) up to
    `backoff.attempts` times in all; any other error, or the last one, is raised as is."""
    attempt = 1
    while True:
        try:
            return op()
        except Exception as e:
            name = transient(e)
            if name is None or attempt >= backoff.attempts:
                raise
            delay = backoff.delay(attempt)
            retries.add(what, name)
            if log is not None:
                log(
                    f"{what}: {name} ({type(e).__name__}); try {attempt + 1} of "
                    f"{backoff.attempts} in {delay:.1f}s"
                )
            if before_retry is not None:
                before_retry()
            time.sleep(delay)
            attempt += 1
