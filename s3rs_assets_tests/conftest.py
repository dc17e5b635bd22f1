"""Real local services for the tests: MariaDB, PostgreSQL, a moto S3 server, one SparkSession.

Each test session works in its own MySQL and PostgreSQL databases (dropped at the end)
and each test in its own bucket, so runs never see each other's data.
"""

from __future__ import annotations

import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pymysql
import pytest

# The CLI tests' stack for every file (`stack`, the session's table list, the CLI's log
# handler taken off after each test): defined in cli_stack.py beside its helpers.
from s3rs_assets_tests.cli_stack import (  # noqa: F401 - fixtures
    _detach_log_handler,
    cli_tables_file,
    orders,
    stack,
)
from s3rs_assets_tests.mysql_server import (  # noqa: F401 - re-exported to the test files
    MACHINE_MYSQL,
    MYSQL_HOST,
    MYSQL_PORT,
    free_port,
)

REPO = Path(__file__).resolve().parent.parent


PG_DSN = os.environ.get("S3RS_TEST_PG_DSN", "host=127.0.0.1 port=5432 user=postgres")
# The settings `make demo` leaves in .local/s3rs.env are for people typing commands, never
# for the tests (an `s3rs` run in-process or as a subprocess would take the demo's stack
# for whatever a test leaves unset): empty means "read no settings file" (cli/local_env.py).
os.environ["S3RS_ENV_FILE"] = ""


@pytest.fixture(scope="session", autouse=True)
def _record_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # `s3rs status` keeps record bodies in ~/.cache/s3rs by default (body_cache.py): the
    # tests' own, thrown away with the session (a test that counts GETs sets its own).
    os.environ["S3RS_CACHE_DIR"] = str(tmp_path_factory.mktemp("s3rs-cache"))
    # an `s3rs server` a developer left running in the checkout must not run the tests'
    # syncs (test_sync_server starts its own and turns this back on for its clients)
    os.environ["S3RS_SERVER"] = "off"
    # nor the Spark Connect server of `make ui` that a sourced scripts/env.sh points
    # S3RS_SPARK_MASTER at: a test's `s3rs sync` attached to it, and a session fixture's
    # stop() at the end released the server's shared session (every later run of the UI,
    # or of the developer's shell, then failed with INVALID_HANDLE.SESSION_CLOSED). Tests
    # that attach start their own server (`connect_server`) and name it.
    os.environ.pop("S3RS_SPARK_MASTER", None)
    os.environ.pop("S3RS_SPARK_MASTER_FROM", None)
    # A Spark JVM's class archive (jvm_options.py) is written when the first JVM exits (~10
    # CPU-s, ~120 MB): in this throw-away cache dir every test session, and every Spark
    # subprocess started before one exists, would write it again. C1 alone here;
    # test_jvm_options.py covers the archive with a state dir of its own.
    os.environ.setdefault("S3RS_SPARK_JVM", "c1")


@pytest.fixture(scope="session", autouse=True)
def _python_for_spark() -> None:
    # Spark's Python workers must run this interpreter (pyarrow lives in the venv).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in _AWS_ENV}
    os.environ.update(
        AWS_ENDPOINT_URL_S3=endpoint,
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    os.environ.pop("AWS_SESSION_TOKEN", None)
    os.environ.pop("AWS_PROFILE", None)
    yield endpoint
    server.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


_AWS_ENV = (
    "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
    "AWS_SESSION_TOKEN", "AWS_PROFILE",
)


@pytest.fixture
def bucket(moto_endpoint: str) -> str:
    name = f"s3rs-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_resource(bucket: str):
    from s3rs_assets.resources import S3Resource

    return S3Resource(bucket=bucket, prefix="s3rs")


@pytest.fixture
def s3_client(moto_endpoint: str):
    return boto3.client("s3", endpoint_url=moto_endpoint)


def _mysql_root(database: str | None = None) -> pymysql.connections.Connection:
    return pymysql.connect(
        host=MYSQL_HOST, port=MYSQL_PORT, user="root", password="", database=database,
        charset="utf8mb4", autocommit=True,
    )


@pytest.fixture(scope="session")
def mysql_db() -> Iterator[str]:
    """A fresh MySQL schema for this test session, dropped afterwards."""
    name = f"s3rs_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with _mysql_root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    yield name
    with _mysql_root() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture(scope="session")
def mysql_url(mysql_db: str) -> str:
    return f"mysql://root:@{MYSQL_HOST}:{MYSQL_PORT}/{mysql_db}"


@pytest.fixture
def mysql_conn(mysql_db: str) -> Iterator[pymysql.connections.Connection]:
    conn = _mysql_root(mysql_db)
    yield conn
    conn.close()


@pytest.fixture
def dropping_conn(mysql_db: str) -> Iterator[pymysql.connections.Connection]:
    """A root connection (autocommit, utf8mb4) that drops the tables a test appends to its
    `made` list, so tests sharing the session schema do not see each other's tables."""
    conn = _mysql_root(mysql_db)
    conn.made = []  # type: ignore[attr-defined]
    yield conn
    with conn.cursor() as cur:
        for name in conn.made:  # type: ignore[attr-defined]
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
    conn.close()


@pytest.fixture(scope="session")
def pg_db() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards."""
    import psycopg

    name = f"s3rs_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_url(pg_db: str) -> str:
    return f"postgresql://postgres:@127.0.0.1:5432/{pg_db}"


@pytest.fixture(scope="session")
def spark_resource():
    from s3rs_assets.resources import SparkResource, spark_defaults

    return SparkResource(spark_config=spark_defaults("local[2]"))


@pytest.fixture(scope="session")
def spark(spark_resource):
    session = spark_resource.session()
    yield session
    session.stop()


# `make test` runs the files on two workers (pytest-xdist, `--dist loadfile`: a file's
# module and session fixtures stay in one process), and a worker takes the next file in
# collection order when it is nearly done with its own. The slowest files go first (seconds
# per file on a 2-core machine, from the summary below), so that neither worker is handed
# a long file while the other is finishing; the rest keep pytest's order.
SLOWEST_FILES = (
    "test_bench_smoke.py", "test_cli.py", "test_compose_statemachine.py",
    "test_ui_browser.py", "test_spark_masters.py", "test_webserver.py",
    "test_jvm_options.py", "test_compose_regressions.py", "test_spark_early.py",
    "test_run_worker.py", "test_extract.py", "test_exit_codes.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


# Seconds per test file (setup + call + teardown, so a module fixture counts where it is
# used), printed after the run: CI's 30 minutes are watched from its own output, and
# --durations lists single phases, not what a whole file costs.
_FILE_SECONDS: dict[str, float] = {}
FILES_SHOWN = 15
_LOADED = time.monotonic()  # this conftest loads before collection: the session's start


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    largest = sorted(_FILE_SECONDS.items(), key=lambda kv: kv[1], reverse=True)[:FILES_SHOWN]
    terminalreporter.write_sep("=", f"seconds per test file (largest {len(largest)} of "
                                    f"{len(_FILE_SECONDS)})")
    for path, seconds in largest:
        terminalreporter.write_line(f"{seconds:9.1f} s  {seconds / total:5.1%}  {path}")
    terminalreporter.write_line(f"{total:9.1f} s  in all test files (setup, call, teardown)")
    terminalreporter.write_line(f"{time.monotonic() - _LOADED:9.1f} s  session wall time "
                                "(collection included)")


# ------------------------------------------------------------ a Spark Connect server

CONNECT_DEADLINE = 300.0  # the JVM listening and its Python workers warm, on a busy machine
CONNECT_READY = re.compile(
    r"Spark Connect server ready: (sc://\S+) \(application (\S+), pid (\d+)")


def spark_env(**extra: str) -> dict[str, str]:
    """The environment of an `s3rs` subprocess of the tests."""
    return {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1", **extra}


@contextmanager
def serving_connect(tmp_path_factory) -> Iterator[tuple[str, str, Path]]:
    """`s3rs spark serve` on a free port while the block runs: (sc:// URL, application id,
    state dir)."""
    from s3rs_assets.spark_server import running
    from s3rs_assets_tests.processes import managed_process, tail

    tmp = tmp_path_factory.mktemp("connect")
    state = tmp / "state"
    log = tmp / "serve.log"
    args = [sys.executable, "-m", "s3rs_assets.cli", "spark", "serve", "--port",
            str(free_port()), "--master", "local[2]", "--state-dir", str(state)]
    with managed_process(args, spark_env(), log, tmp) as proc:
        deadline = time.monotonic() + CONNECT_DEADLINE
        while not (found := CONNECT_READY.search(tail(log))):
            assert proc.poll() is None, f"spark serve exited {proc.returncode}:\n{tail(log)}"
            assert time.monotonic() < deadline, f"no server in {CONNECT_DEADLINE}s:\n{tail(log)}"
            time.sleep(0.5)
        url, app_id, _ = found.groups()
        yield url, app_id, state
    # SIGTERM to `serve` stopped the JVM and removed its state (managed_process checked
    # that no process of the group is left)
    assert running(state) is None
    assert not (state / "server.pid").exists()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """One Spark Connect server for the session (test_spark_connect_server,
    test_sync_server, ...): (sc:// URL, application id, state dir). A test that closes its
    shared session starts one of its own (`serving_connect`)."""
    with serving_connect(tmp_path_factory) as server:
        yield server

