"""The MySQL server of this test process, decided when it is first imported (conftest.py
imports it before any test module): the machine's for the first pytest-xdist worker, one of
its own for each later worker (mariadb_instance.py says why). Apart from conftest.py so that
the fixture modules conftest.py loads (cli_stack.py) can use it without importing conftest.
"""

from __future__ import annotations

import atexit
import os
import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The machine's MySQL server (S3RS_TEST_MYSQL_HOST/PORT), which the first worker uses.
MACHINE_MYSQL = (os.environ.get("S3RS_TEST_MYSQL_HOST", "127.0.0.1"),
                 int(os.environ.get("S3RS_TEST_MYSQL_PORT", "3306")))


def _worker_mysql() -> tuple[str, int]:
    """The MySQL server of this test process: the machine's, except on the second and later
    pytest-xdist workers, which start one of their own (mariadb_instance.py says why).
    Decided at import, before any test module reads it."""
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
        return MACHINE_MYSQL
    from s3rs_assets_tests import mariadb_instance

    own = mariadb_instance.start(*MACHINE_MYSQL, free_port())
    atexit.register(own.stop)
    return "127.0.0.1", own.port


MYSQL_HOST, MYSQL_PORT = _worker_mysql()
