"""The process's SparkSession: its settings, its start (the JDBC jar, UTC, the JVM's start-up
options), the warm-up of its Python workers, and its early start by `s3rs sync`.

No Dagster here: `s3rs sync` starts a local JVM in a background thread as soon as its plan
shows rows to read (`start_early`), so the JVM's start (~2.5 s with the CDS archive) and the
workers' warm-up overlap Dagster's import, the instance, the run's creation and its start,
instead of beginning when the backup step first asks for the session. The step's
`SparkResource` then takes that session (`take_early`): one SparkSession per process. A
table with nothing to read never gets here, and never imports PySpark (test_imports.py).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from s3rs_assets import jvm_options, logs
from s3rs_assets.errors import ConfigError

DEFAULT_JDBC_JARS = "/usr/share/java/mariadb-java-client.jar"
UTC_JAVA_OPTION = "-Duser.timezone=UTC"
WARM_UP_GROUP = "s3rs-warm-up"
DAEMON_MODULE = "s3rs_assets.spark_daemon"
#: Spark Connect's answer for a session a client released (`stop()`): the server refuses
#: that session id from then on
SESSION_CLOSED = "INVALID_HANDLE.SESSION_CLOSED"
_log = logging.getLogger("s3rs.spark")


def spark_defaults(master: str = "local[*]", jars: str = DEFAULT_JDBC_JARS) -> dict[str, str]:
    """The spark_config s3rs runs with: `master` is `local[*]`, a standalone
    `spark://host:port` or a Spark Connect `sc://host:port` URL."""
    if master.startswith("sc://"):
        # a Connect server has its own JVM settings: only the session time zone is ours
        return {"spark.remote": master, "spark.sql.session.timeZone": "UTC"}
    conf = {
        "spark.master": master,
        "spark.app.name": "s3rs",
        "spark.driver.memory": "2g",
        "spark.driver.extraJavaOptions": UTC_JAVA_OPTION,
        "spark.executor.extraJavaOptions": UTC_JAVA_OPTION,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Tables synced side by side (`s3rs sync --parallel`) share this session: FAIR
        # scheduling with a pool per table (extract.py) keeps a big table's job from
        # holding back the small ones.
        "spark.scheduler.mode": "FAIR",
    }
    if master.startswith("local"):
        # the Python workers are forked from a daemon that imported what a task imports
        # (spark_daemon.py); a cluster's executors keep PySpark's own daemon
        conf["spark.python.daemon.module"] = DAEMON_MODULE
    if jars:
        conf["spark.jars"] = jars
    return conf


def config_from_env() -> dict[str, str]:
    """`spark_defaults` for S3RS_SPARK_MASTER and S3RS_SPARK_JARS: what the definitions'
    SparkResource and `s3rs sync`'s early start both run with."""
    return spark_defaults(
        os.environ.get("S3RS_SPARK_MASTER", "local[*]"),
        os.environ.get("S3RS_SPARK_JARS", DEFAULT_JDBC_JARS),
    )


def _local(conf: dict[str, Any]) -> bool:
    return str(conf.get("spark.master", "")).startswith("local")


def check_jars(conf: dict[str, Any]) -> list[str]:
    """The JDBC jars of `conf`; ConfigError when a local master's jar is missing (no JVM is
    started then)."""
    jars = [j for j in str(conf.get("spark.jars", "")).split(",") if j]
    missing = [j for j in jars if not os.path.exists(j)]
    if missing and _local(conf):
        raise ConfigError(
            f"JDBC driver jar {missing[0]} not found: run `make setup` "
            "(installs Debian's libmariadb-java) or set S3RS_SPARK_JARS"
        )
    return jars


def start_session(spark_config: dict[str, Any], jvm_tuning: str | None, jdbc_reads: bool) -> Any:
    """The process's SparkSession (an active one is reused), built from `spark_config` with
    s3rs's JVM start-up tunings (`jvm_tuning`, jvm_options.py) for a local JVM."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None and _closed_on_server(session):
        session = _session_of_its_own(spark_config)
    if session is None:
        conf = dict(spark_config)
        local = _local(conf)
        jars = check_jars(conf)
        if local and not os.environ.get("PYSPARK_PYTHON"):
            # Python workers must run this interpreter, not `python3` from PATH (cron,
            # systemd: no venv on PATH). SparkContext reads the variable, not a conf key.
            os.environ["PYSPARK_PYTHON"] = sys.executable
        quiet = logs.spark_log_options()  # Spark's WARN lines only with `s3rs -v`
        key = "spark.driver.extraJavaOptions"
        if quiet and not str(conf.get("spark.remote", "")):
            conf[key] = f"{conf.get(key, '')} {quiet}".strip()
        pending = None
        if not conf.get("spark.remote") and not _jvm_running():  # this process's driver JVM
            if local:  # the JVM this process launches runs the executors too
                opts, pending = local_jvm_options(jvm_tuning, jdbc_reads, jars, conf.get(key))
                conf[key] = jvm_options.append(conf.get(key), opts)
            launch_relayed(conf)
        try:
            session = SparkSession.builder.config(map=conf).getOrCreate()
        except Exception as e:
            if SESSION_CLOSED not in str(e):
                raise
            # refused while the builder applied its settings (to the session it made, or
            # to the process's default one, from a thread with no active session)
            session = _session_of_its_own(spark_config)
        if pending is not None:
            jvm_options.finish_at_exit(pending)
    # No zone check here: only Spark's JDBC reader depends on the session's and the JVM's
    # zones, so `Extractor` checks them before each JDBC read of a DATETIME/TIMESTAMP table
    # (the session may have changed since; connectorx reads do not depend on them).
    return session


def _closed_on_server(session: Any) -> bool:
    """Whether `session` is a Spark Connect session its server has closed (one request).

    Runs attach to the server's one shared session (spark_server.wait_ready), named in the
    URL; any client's `stop()` on it (a notebook given the same S3RS_SPARK_MASTER) releases
    it for all, and every later run failed with INVALID_HANDLE.SESSION_CLOSED until the
    server restarted."""
    connect = sys.modules.get("pyspark.sql.connect.session")
    if connect is None or not isinstance(session, connect.SparkSession):
        return False
    try:
        session.conf.get("spark.app.id")
    except Exception as e:  # noqa: BLE001 - anything else surfaces at the run's first job
        return SESSION_CLOSED in str(e)
    return False


def _session_of_its_own(spark_config: dict[str, Any]) -> Any:
    """A new server-side session in place of the closed shared one: the same server, the
    URL without its session id. Its Python workers start first (a few seconds), once per
    process."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    # the closed one is this thread's active session or the process's default: forgotten
    # here (stopped without releasing anything), so that getOrCreate makes a new one
    closed = {
        id(s): s
        for s in (ConnectSession.getActiveSession(), ConnectSession._get_default_session())
        if s is not None
    }
    _log.warning(
        "the Spark Connect session %s was closed on the server (a client called stop() on "
        "it); this process opens a session of its own, whose Python workers start first. "
        "`s3rs spark stop && s3rs spark start` (or restarting `make ui`) opens a new shared "
        "session, and `source scripts/env.sh` points S3RS_SPARK_MASTER at it",
        ", ".join(s.session_id for s in closed.values()) or "?",
    )
    for s in closed.values():
        s.release_session_on_close = False
        s.stop()
    url = re.sub(r";session_id=[^;]*", "", str(spark_config.get("spark.remote", "")))
    return SparkSession.builder.config(map={**spark_config, "spark.remote": url}).getOrCreate()


def launch_relayed(conf: dict[str, Any]) -> None:
    """Launch PySpark's gateway JVM as `getOrCreate` would (the same spark-submit command
    line), its stdout and stderr relayed through this process instead of inherited.

    An inherited descriptor keeps a caller's pipe open until the JVM has run Spark's
    shutdown hooks, ~0.5 s after this process exits: `s3rs sync | tee`, a CI step or a
    benchmark capturing the output waited for them. Relayed, the output reads the same
    while s3rs runs, and the pipe closes when s3rs exits (what the JVM prints after
    that, its shutdown, is dropped)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    sconf = SparkConf(loadDefaults=False)
    sconf.setAll(list(conf.items()))
    pipes = [os.pipe() for _ in range(2)]
    try:
        gateway = launch_gateway(
            sconf, popen_kwargs={"stdout": pipes[0][1], "stderr": pipes[1][1]}
        )
    except BaseException:
        for r, _ in pipes:
            os.close(r)
        raise
    finally:
        for _, w in pipes:
            os.close(w)
    for (r, _), to in zip(pipes, (1, 2), strict=True):
        threading.Thread(target=_relay, args=(r, to), name="s3rs-jvm-output",
                         daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway)


def _relay(source: int, to: int) -> None:
    """Copy the JVM's output to this process's descriptor `to` until the JVM closes it."""
    try:
        while chunk := os.read(source, 65536):
            while chunk:
                chunk = chunk[os.write(to, chunk):]
    except OSError:  # our stdout/stderr went away: the JVM's output has nowhere to go
        pass
    finally:
        os.close(source)


def _jvm_running() -> bool:
    """PySpark's gateway JVM is up already (a stopped session's): JVM options are moot."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None


def local_jvm_options(
    jvm_tuning: str | None, jdbc_reads: bool, jars: list[str], user: str | None
) -> tuple[list[str], jvm_options.PendingArchive | None]:
    """The start-up tunings (jvm_options.py) for the local JVM this process launches:
    `jvm_tuning`, else $S3RS_SPARK_JVM, else auto."""
    setting = jvm_tuning if jvm_tuning is not None else os.environ.get(jvm_options.ENV)
    chosen = jvm_options.tunings(setting, jdbc_reads=jdbc_reads)
    return jvm_options.java_options(chosen, jvm_options.spark_home(), jars, user)


@dataclass
class _Early:
    """A session being started in a background thread, and how that ended."""

    done: threading.Event = field(default_factory=threading.Event)
    session: Any = None
    error: BaseException | None = None


_EARLY_LOCK = threading.Lock()
_EARLY: _Early | None = None


def start_early(spark_config: dict[str, Any], jvm_tuning: str | None, jdbc_reads: bool) -> bool:
    """Start the process's SparkSession and its warm-up in a daemon thread, for a command
    that will need it (`take_early` waits for it). Only a classic session (a Spark Connect
    client's is cheap and its server warms its own workers), once per process; False when
    it started nothing. A missing JDBC jar raises ConfigError here, before any run; any
    other failure is raised by `take_early`, where the session would have been built."""
    global _EARLY
    if spark_config.get("spark.remote") or _context_running():
        return False
    with _EARLY_LOCK:
        if _EARLY is not None:
            return False
        check_jars(spark_config)
        early = _Early()
        thread = threading.Thread(
            target=_start_in_background,
            args=(early, dict(spark_config), jvm_tuning, jdbc_reads),
            name="s3rs-spark-start",
            daemon=True,  # a command ending before its run needs Spark does not wait for it
        )
        _EARLY = early
        thread.start()
        return True


def _start_in_background(
    early: _Early, conf: dict[str, Any], jvm_tuning: str | None, jdbc_reads: bool
) -> None:
    try:
        early.session = start_session(conf, jvm_tuning, jdbc_reads)
        warm_up(early.session, background=True)
    except BaseException as e:  # noqa: BLE001 - handed to take_early, raised there
        early.error = e
    finally:
        early.done.set()


def take_early() -> Any:
    """The session `start_early` started (waiting for it), or None when none was; its
    failure raised. Taken once: a later caller (a retried step, the next run of a
    long-lived process) builds or reuses the session as usual."""
    global _EARLY
    early = _EARLY
    if early is None:
        return None
    early.done.wait()
    with _EARLY_LOCK:
        if _EARLY is early:
            _EARLY = None
    if early.error is not None:
        raise early.error
    return early.session


def _context_running() -> bool:
    """This process has a SparkContext already (a test's, a previous run's): nothing to
    start. Without PySpark imported there is none, and nothing is imported to ask."""
    if "pyspark" not in sys.modules:
        return False
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def warm_up(
    session: Any, cores: int | None = None, *, background: bool = False
) -> threading.Thread | None:
    """Start Spark's Python workers (reused by later tasks) and import in each what a chunk
    task imports (`spark_tasks.warm`): one task per task slot (`cores`; by default the
    session's parallelism). A Spark Connect client leaves this to the server (`s3rs spark
    serve` warms its workers once, before it reports ready).

    `background=True` runs the job in a daemon thread and returns it: a failure is logged,
    never raised (a run's first chunk then starts its own workers); the thread ends with
    its job, or when the session stops (Spark cancels the job). Otherwise it waits and
    raises."""
    if session.conf.get("spark.python.worker.reuse", "true") != "true":
        return None
    if cores is None:
        try:
            cores = int(session.sparkContext.defaultParallelism)
        except Exception:  # Spark Connect: the server warmed its own workers
            return None
    if not background:
        _warm_job(session, cores)
        return None
    thread = threading.Thread(
        target=_warm_in_background, args=(session, cores), name=WARM_UP_GROUP, daemon=True
    )
    thread.start()
    return thread


def _warm_job(session: Any, cores: int) -> None:
    """One task per core. On a classic session an RDD job (the backup's chunks are RDD jobs
    there, and a first RDD job costs a fresh JVM ~1.2 CPU-s against ~4 for a first
    mapInArrow), in the SQL jobs' workers; Spark Connect has no RDDs: mapInArrow."""
    from s3rs_assets.spark_pools import classic_context, same_workers_as_sql

    sc = classic_context(session)
    if sc is None:
        from s3rs_assets.spark_tasks import warm

        session.range(0, cores, numPartitions=cores).mapInArrow(warm, "id long").collect()
        return
    from s3rs_assets.spark_tasks import warm_rows

    same_workers_as_sql(session, sc)
    sc.parallelize(range(cores), cores).mapPartitions(warm_rows).collect()


def _warm_in_background(session: Any, cores: int) -> None:
    sc = session.sparkContext
    try:
        # this thread's jobs only (PySpark pins a Python thread to a JVM thread)
        sc.setJobGroup(WARM_UP_GROUP, "s3rs: start and warm the Python workers")
        _warm_job(session, cores)
    except Exception as e:
        if sc._jsc is None:  # the session was stopped: its jobs were cancelled
            _log.debug("Spark warm-up stopped with its session")
        else:
            _log.warning(
                "Spark warm-up failed (the first chunk starts its own Python workers): %s",
                str(e).splitlines()[0] if str(e) else type(e).__name__,
            )
