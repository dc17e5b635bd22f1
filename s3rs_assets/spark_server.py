"""A long-lived Spark Connect server: one JVM that every run attaches to over `sc://`.

Starting a SparkSession costs 7-27 s per run (JVM, Spark context, Python workers); a run
attaching to a running Connect server costs about a second. The server is pyspark's own
`SparkConnectServer` class (its jar ships in the pyspark package), launched with
`spark-class ... SparkSubmit` as pyspark's `sbin/start-connect-server.sh` does, with what
s3rs needs on the server side, since a Connect client cannot set JVM options: the JDBC
jar(s), `-Duser.timezone=UTC` for driver and executors, `spark.sql.session.timeZone=UTC`,
and Python workers running this interpreter (PYSPARK_PYTHON), warmed up before the
server is announced as ready.

State lives in a directory (default `.local/spark-connect`, `S3RS_SPARK_STATE_DIR`):
`server.pid`, `server.url` and `server.log`. `scripts/env.sh` reads the first two to point
`S3RS_SPARK_MASTER` at a running server.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from s3rs_assets import jvm_options
from s3rs_assets.backup.extract import check_utc
from s3rs_assets.errors import ConfigError
from s3rs_assets.resources import DEFAULT_JDBC_JARS, spark_defaults, warm_up

DEFAULT_PORT = 15002
DEFAULT_HOST = "127.0.0.1"
STATE_DIR_ENV = "S3RS_SPARK_STATE_DIR"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT = 180.0


def default_state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or Path(".local") / "spark-connect")


def spark_home() -> Path:
    """The installed pyspark package: it ships bin/spark-class and every jar, the Connect
    server's included."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ConfigError("pyspark is not installed in this Python")
    return Path(spec.origin).parent


@dataclass(frozen=True)
class ServerSettings:
    """How to run the server. `master` is where its tasks run: `local[*]` on this host, or
    a cluster's `spark://host:7077`."""

    port: int = DEFAULT_PORT
    host: str = DEFAULT_HOST
    master: str = "local[*]"
    jars: str = DEFAULT_JDBC_JARS
    python: str = sys.executable
    state_dir: Path = field(default_factory=default_state_dir)
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def url(self) -> str:
        """What runs attach with: the server and its warm session (see `wait_ready`)."""
        return f"sc://{self.host}:{self.port}/;session_id={self.session_id}"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "server.pid"

    @property
    def url_file(self) -> Path:
        return self.state_dir / "server.url"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "server.log"

    def conf(self) -> dict[str, str]:
        """s3rs's own Spark settings for the master (UTC, JDBC jars, ...) plus the
        Connect endpoint and the workers' Python."""
        conf = spark_defaults(self.master, self.jars)
        conf.update(
            {
                "spark.app.name": "s3rs-connect",
                "spark.connect.grpc.binding.address": self.host,
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.pyspark.python": self.python,
                # the shared warm session (`wait_ready`) must outlive idle hours
                "spark.connect.session.manager.defaultSessionTimeout": "3650d",
            }
        )
        if self.master.startswith("local"):
            key = "spark.driver.extraJavaOptions"
            jars = [j for j in self.jars.split(",") if j]
            conf[key] = jvm_options.append(
                conf.get(key), jvm_options.server_options(jars, spark_home())
            )
        return conf

    def command(self) -> list[str]:
        args = [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.SparkSubmit",
                "--class", SERVER_CLASS, "--name", "s3rs-connect"]
        for k, v in self.conf().items():
            args += ["--conf", f"{k}={v}"]
        return [*args, "spark-internal"]

    def env(self) -> dict[str, str]:
        """The server's environment: ours, with Spark's home and Python set (Connect runs
        Python tasks with PYSPARK_PYTHON of the server, not of the client)."""
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home()),
            PYSPARK_PYTHON=self.python,
            PYSPARK_DRIVER_PYTHON=self.python,
        )
        if self.host in ("127.0.0.1", "localhost"):
            env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        return env


def reachable(host: str, port: int, timeout: float = 1.0) -> bool:
    with socket.socket() as s:
        s.settimeout(timeout)
        return s.connect_ex((host, port)) == 0


def _restore_default_signals() -> None:
    # A parent started from a non-interactive shell may ignore SIGINT/SIGTERM; the JVM must
    # not inherit that, or `stop` cannot end it.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    """pid is a live (non-zombie) Spark Connect server process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z" and SERVER_CLASS.encode() in cmdline


@dataclass(frozen=True)
class RunningServer:
    pid: int
    url: str


def running(state_dir: Path | None = None) -> RunningServer | None:
    """The server recorded in `state_dir`, if its process is still alive."""
    state_dir = state_dir or default_state_dir()
    try:
        pid = int((state_dir / "server.pid").read_text().strip())
        url = (state_dir / "server.url").read_text().strip()
    except (OSError, ValueError):
        return None
    return RunningServer(pid, url) if _alive(pid) else None


def launch(settings: ServerSettings) -> subprocess.Popen:
    """Start the server JVM in its own process group (log in `server.log`) and record it;
    returns at once. Refuses when one is recorded as running or the port is taken."""
    found = running(settings.state_dir)
    if found is not None:
        raise ConfigError(f"a Spark Connect server is already running: {found.url} "
                          f"(pid {found.pid})")
    if reachable(settings.host, settings.port):
        raise ConfigError(f"port {settings.port} on {settings.host} is already in use")
    jars = [j for j in settings.jars.split(",") if j]
    missing = [j for j in jars if not os.path.exists(j)]
    if missing and settings.master.startswith("local"):
        raise ConfigError(f"JDBC driver jar {missing[0]} not found: run `make setup` "
                          "(installs Debian's libmariadb-java) or set S3RS_SPARK_JARS")
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    with settings.log_file.open("ab") as log:
        proc = subprocess.Popen(
            settings.command(),
            env=settings.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_restore_default_signals,
        )
    settings.pid_file.write_text(f"{proc.pid}\n")
    settings.url_file.write_text(f"{settings.url}\n")
    return proc


def wait_ready(settings: ServerSettings, proc: subprocess.Popen,
               timeout: float = START_TIMEOUT) -> str:
    """Wait until the server accepts clients, open the session runs share (`url` names it),
    check it runs in UTC and start its Python workers; returns the application id.

    Runs attach to this one server-side session rather than each opening its own: Spark
    Connect isolates each session's artifacts, so every new session gets its own Python
    worker daemon, which costs a run 2-15 s (start the workers, import pyarrow, connectorx
    and botocore) before its first chunk; in the shared session the warm workers are reused
    (measured: a run's first Spark job 11.5 s in a new session, 0.2-0.3 s in the shared
    one). The session is never released here, and idles out only after years."""
    deadline = time.monotonic() + timeout
    while not reachable(settings.host, settings.port):
        if proc.poll() is not None:
            raise ConfigError(f"the Spark Connect server exited with {proc.returncode}; see "
                              f"{settings.log_file}")
        if time.monotonic() > deadline:
            raise ConfigError(f"the Spark Connect server did not listen on {settings.url} "
                              f"within {timeout:.0f}s; see {settings.log_file}")
        time.sleep(0.5)
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(settings.url).getOrCreate()
    check_utc(session)
    warm_up(session, cores=_cores(settings.master))
    # not session.stop(): that would release the shared session on the server
    return str(session.conf.get("spark.app.id"))


def _cores(master: str) -> int:
    """Task slots of a local master (`local`, `local[2]`, `local[*]`); 2 for a cluster."""
    inner = master.partition("[")[2].rstrip("]").split(",")[0]
    if master.startswith("local") and inner.isdigit():
        return int(inner)
    if master.startswith("local"):
        return 1 if master == "local" else os.cpu_count() or 2
    return 2


def stop(state_dir: Path | None = None, grace: float = 30.0) -> RunningServer | None:
    """Stop the recorded server (SIGTERM to its process group, SIGKILL after `grace`
    seconds) and remove its state files; returns what was stopped, or None."""
    state_dir = state_dir or default_state_dir()
    found = running(state_dir)
    if found is not None:
        with suppress(ProcessLookupError):
            os.killpg(found.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _alive(found.pid) and time.monotonic() < deadline:
            time.sleep(0.3)
        if _alive(found.pid):
            with suppress(ProcessLookupError):
                os.killpg(found.pid, signal.SIGKILL)
    for name in ("server.pid", "server.url"):
        with suppress(FileNotFoundError):
            (state_dir / name).unlink()
    return found
