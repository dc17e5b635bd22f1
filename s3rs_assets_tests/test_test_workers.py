"""The tests' own set-up on two workers (scripts/test.sh): a worker's MariaDB server
(mariadb_instance.py) is one the tests cannot tell from the machine's, its own, and gone
when stopped."""

from __future__ import annotations

import os

import pymysql

from s3rs_assets_tests import mariadb_instance
from s3rs_assets_tests.conftest import MACHINE_MYSQL, MYSQL_HOST, MYSQL_PORT, free_port

WHAT_TESTS_SEE = (
    "SELECT @@version, @@character_set_server, @@collation_server, @@sql_mode, "
    "@@system_time_zone, @@time_zone, (SELECT COUNT(*) FROM mysql.time_zone_name), "
    "CONVERT_TZ('2025-03-30 01:30:00', 'UTC', 'Europe/Berlin')"
)


def _seen(host: str, port: int) -> tuple:
    with pymysql.connect(host=host, port=port, user="root", password="") as conn, \
            conn.cursor() as cur:
        cur.execute(WHAT_TESTS_SEE)
        return cur.fetchone()


def test_a_workers_server_is_like_the_machines_and_gone_when_stopped():
    own = mariadb_instance.start(*MACHINE_MYSQL, free_port())
    try:
        seen = _seen("127.0.0.1", own.port)
        assert seen == _seen(*MACHINE_MYSQL)
        assert seen[6] > 500 and str(seen[7]) == "2025-03-30 03:30:00"  # zone tables loaded
    finally:
        own.stop()
    assert own.process.poll() is not None and not own.datadir.exists()


def test_only_the_first_worker_uses_the_machines_server():
    """What the safety bound sees on a worker's server are that worker's threads only."""
    first = os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0"
    assert ((MYSQL_HOST, MYSQL_PORT) == MACHINE_MYSQL) == first
