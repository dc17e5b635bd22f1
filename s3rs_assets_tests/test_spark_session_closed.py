"""A Spark Connect session shared through S3RS_SPARK_MASTER that a client closed.

Runs attach to the server's one shared session, named in the URL (spark_server.wait_ready);
a client's `stop()` on it (a notebook given the same S3RS_SPARK_MASTER; before this
stop, the tests' own session fixture) releases it on the server, which refuses that id
from then on: every later run failed with INVALID_HANDLE.SESSION_CLOSED until the server
was restarted. Now a run opens a session of its own on the same server and says how to get
a shared one back. The server here is this module's own: its shared session is closed.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

from s3rs_assets_tests.cli_stack import day, empty_warehouse, mysql, pg
from s3rs_assets_tests.conftest import serving_connect, spark_env
from s3rs_assets_tests.helpers import make_ties_table

pytestmark = pytest.mark.slow

#: another client of the shared session: it stops it, as a notebook's `spark.stop()` does
STOP = (
    "import sys\n"
    "from pyspark.sql import SparkSession\n"
    "SparkSession.builder.remote(sys.argv[1]).getOrCreate().stop()\n"
)

#: a long-lived process (the `s3rs server`'s workers): its session closed between two runs;
#: the next run asks from a thread of its own (`sync --parallel`), then the main thread
LONG_LIVED = """
import subprocess, sys, threading, uuid
from s3rs_assets.spark_session import spark_defaults, start_session
url = sys.argv[1].split(";")[0] + f";session_id={uuid.uuid4()}"
conf = spark_defaults(url)
first = start_session(conf, None, False)
print("first", first.range(3).count())
subprocess.run([sys.executable, "-c", sys.argv[2], url], check=True)
got = {}
thread = threading.Thread(target=lambda: got.update(s=start_session(conf, None, False)))
thread.start()
thread.join()
second = got["s"]
print("second", second is not first, second.range(4).count())
print("third", start_session(conf, None, False) is second)
"""

WARNING = "was closed on the server (a client called stop() on it)"


@pytest.fixture(scope="module")
def own_server(tmp_path_factory):
    with serving_connect(tmp_path_factory) as server:
        yield server


def test_a_sync_attached_to_a_closed_shared_session_opens_one_of_its_own(stack, own_server):
    url = own_server[0]
    subprocess.run([sys.executable, "-c", STOP, url], env=spark_env(), check=True,
                   timeout=120)
    rows = [(i, day(1) + timedelta(hours=1, seconds=i // 3)) for i in range(1, 101)]
    with mysql(stack.db) as conn:
        make_ties_table(conn, "cli_closed", rows)
    empty_warehouse(stack, "cli_closed")
    name = stack.name("cli_closed")
    r = subprocess.run(
        [sys.executable, "-m", "s3rs_assets.cli", "sync", "-t", name, "--no-progress"],
        env=spark_env(S3RS_SPARK_MASTER=url), capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert WARNING in r.stderr and "s3rs spark stop && s3rs spark start" in r.stderr, r.stderr
    assert r.stderr.count(WARNING) == 1, r.stderr  # once per process
    assert "INVALID_HANDLE" not in r.stdout + r.stderr
    with pg(stack) as c:
        got = [row[0] for row in c.execute(f'SELECT id FROM "{stack.db}"."cli_closed" ORDER BY id')]
    assert got == list(range(1, 101))


def test_a_long_lived_process_replaces_its_session_once_it_was_closed(own_server):
    r = subprocess.run([sys.executable, "-c", LONG_LIVED, own_server[0], STOP],
                       env=spark_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["first", "3", "second", "True", "4", "third", "True"], r.stdout
    assert r.stderr.count(WARNING) == 1, r.stderr
