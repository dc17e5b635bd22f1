"""A MariaDB server of a test worker's own, for the second and later pytest-xdist workers.

The safety bound (source/bound.py) holds a sync back for every write statement in flight
anywhere on its MySQL server, as it must: it cannot know which tables another thread will
write. Two test workers on one server are such writers to each other, so a test that syncs
rows stamped a moment ago would now and then find them held back by the other worker's
INSERT (seen: 3 failures in one run of the suite on two workers). The first worker keeps
the machine's server; each further worker starts a throw-away one, like it in what the
tests can see (version, character set, collation, SQL mode, system time zone, time zone
tables), in about two seconds.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pymysql

START_DEADLINE = 60.0


@dataclass
class Instance:
    port: int
    datadir: Path
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.datadir, ignore_errors=True)


def _binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")
    if not found:
        raise RuntimeError(f"{name} not found: the second test worker needs a MariaDB server "
                           "of its own (scripts/setup.sh installs mariadb-server), or run the "
                           "tests in one process: S3RS_TEST_WORKERS=1 make test")
    return found


def _die_with_parent() -> None:
    # a worker killed by CI's timeout must not leave its server running
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _settings_of(host: str, port: int) -> dict[str, str]:
    with pymysql.connect(host=host, port=port, user="root", password="") as conn, \
            conn.cursor() as cur:
        cur.execute("SELECT @@character_set_server, @@collation_server, @@sql_mode, "
                    "@@system_time_zone")
        charset, collation, sql_mode, zone = cur.fetchone()
    return {"charset": charset, "collation": collation, "sql_mode": sql_mode, "zone": zone}


def start(like_host: str, like_port: int, port: int) -> Instance:
    """A new server on 127.0.0.1:`port`, root without password, set up like the server at
    `like_host`:`like_port`."""
    like = _settings_of(like_host, like_port)
    datadir = Path(tempfile.mkdtemp(prefix="s3rs-test-mariadb-"))
    data = datadir / "data"
    subprocess.run(
        [_binary("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root",
         "--auth-root-authentication-method=normal", "--skip-test-db"],
        check=True, capture_output=True,
    )
    env = {**os.environ, "TZ": like["zone"]}
    process = subprocess.Popen(
        [_binary("mariadbd"), "--no-defaults", f"--datadir={data}", f"--port={port}",
         "--bind-address=127.0.0.1", f"--socket={datadir / 'sock'}",
         f"--pid-file={datadir / 'pid'}", f"--log-error={datadir / 'error.log'}",
         "--user=root", "--skip-name-resolve", "--skip-log-bin",
         f"--character-set-server={like['charset']}", f"--collation-server={like['collation']}",
         f"--sql-mode={like['sql_mode']}"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent,
    )
    instance = Instance(port, datadir, process)
    try:
        _wait_for(instance)
        zones = subprocess.run([_binary("mariadb-tzinfo-to-sql"), "/usr/share/zoneinfo"],
                               check=True, capture_output=True).stdout
        subprocess.run([_binary("mariadb"), "-uroot", "-h127.0.0.1", f"-P{port}", "mysql"],
                       input=zones, check=True, capture_output=True)
    except BaseException:
        log = (datadir / "error.log").read_text(errors="replace")[-2000:] \
            if (datadir / "error.log").exists() else ""
        instance.stop()
        raise RuntimeError(f"the test worker's MariaDB did not start:\n{log}") from None
    return instance


def _wait_for(instance: Instance) -> None:
    deadline = time.monotonic() + START_DEADLINE
    while True:
        try:
            pymysql.connect(host="127.0.0.1", port=instance.port, user="root",
                            password="").close()
            return
        except pymysql.err.OperationalError:
            if instance.process.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
