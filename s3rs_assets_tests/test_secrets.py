"""A sentinel password in every credential appears nowhere s3rs writes.

MySQL user, warehouse role and AWS secret key all get the same sentinel. After a real
`s3rs sync` (both stages), failing runs and every read command, the sentinel (plain or
URL-encoded) must be absent from: every line printed (stdout, stderr, both log formats),
every `--json` document, every error, every object in the bucket (watermarks included) and
every file under DAGSTER_HOME (run and event-log sqlite databases, compute logs).
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from s3rs_assets_tests.cli_stack import day, invoke, mysql
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT, PG_DSN, _mysql_root
from s3rs_assets_tests.helpers import make_ties_table

SENTINEL = f"Sntl#{uuid.uuid4().hex[:10]}/p@ss:w"
FORMS = {SENTINEL, quote(SENTINEL, safe=""), quote(SENTINEL)}


@pytest.fixture
def sentinel_env(stack, monkeypatch, pg_db):
    user = f"s3rs_sentinel_{os.getpid()}"
    with _mysql_root() as conn, conn.cursor() as cur:
        for host in ("%", "localhost", "127.0.0.1"):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'{host}'")
            cur.execute(f"CREATE USER '{user}'@'{host.replace('%', '%%')}' IDENTIFIED BY %s",
                        (SENTINEL,))
            cur.execute(f"GRANT ALL ON `{stack.db}`.* TO '{user}'@'{host}'")
            cur.execute(f"GRANT PROCESS ON *.* TO '{user}'@'{host}'")
    with psycopg.connect(PG_DSN, autocommit=True) as c:
        c.execute(f"DROP ROLE IF EXISTS {user}")
        c.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
            sql.Identifier(user), sql.Literal(SENTINEL)))
    pw = quote(SENTINEL, safe="")
    env = {
        "S3RS_MYSQL_URL": f"mysql://{user}:{pw}@{MYSQL_HOST}:{MYSQL_PORT}/{stack.db}",
        "S3RS_REDSHIFT_URL": f"postgresql://{user}:{pw}@127.0.0.1:5432/{pg_db}",
        "AWS_SECRET_ACCESS_KEY": SENTINEL,
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield {"user": user, **env}
    with _mysql_root() as conn, conn.cursor() as cur:
        for host in ("%", "localhost", "127.0.0.1"):
            cur.execute(f"DROP USER IF EXISTS '{user}'@'{host}'")
    with psycopg.connect(f"{PG_DSN} dbname={pg_db}", autocommit=True) as c:
        c.execute(f"REASSIGN OWNED BY {user} TO postgres")
        c.execute(f"DROP OWNED BY {user}")
    with psycopg.connect(PG_DSN, autocommit=True) as c:
        c.execute(f"DROP ROLE IF EXISTS {user}")


def _leaks(text: str | bytes) -> list[str]:
    if isinstance(text, bytes):
        return [f for f in FORMS if f.encode() in text]
    return [f for f in FORMS if f in text]


def test_sentinel_appears_nowhere(stack, sentinel_env, monkeypatch):
    rows = [(i, day(1) + timedelta(hours=1 + i % 5)) for i in range(1, 81)]
    with mysql(stack.db) as conn:
        make_ties_table(conn, "secret_orders", rows)
    name = stack.name("secret_orders")
    printed: dict[str, str] = {}

    def run(label: str, *args: str, code: int | None = 0) -> None:
        r = invoke(*args)
        printed[label] = r.stdout + "\n" + r.stderr
        if code is not None:
            assert r.exit_code == code, (label, r.output)

    # the real thing: both stages, JSON logs, then every read command
    run("sync", "--log-format", "json", "sync", "-t", name)
    assert stack.store.read(name).redshift_rows_loaded == 80
    run("get", "watermark", "get", "-t", name, "--json")
    run("get-text", "watermark", "get", "-t", name, "--show-files")
    run("list", "--log-level", "DEBUG", "watermark", "list", "--json")
    run("status", "watermark", "backup-status", "-t", name, "--json")
    run("s3list", "s3clean", "list", "-t", name, "--json")
    run("s3clean", "s3clean", "clean", "-t", name, "--dry-run")
    run("verify", "verify", "-t", name, "--json")
    run("discover", "tables", "discover", "--schema", stack.db)
    # errors that name the services, in the CLI and inside Dagster runs
    bad_mysql = sentinel_env["S3RS_MYSQL_URL"].replace(f":{MYSQL_PORT}/", ":1/")
    bad_wh = sentinel_env["S3RS_REDSHIFT_URL"].replace(":5432/", ":1/")
    monkeypatch.setenv("S3RS_MYSQL_URL", bad_mysql)
    run("set-down", "watermark", "set", "-t", name, "--timestamp", "1d", "--yes", code=2)
    run("sync-down", "sync", "-t", name, "--backup-only", code=2)  # MySQL unreachable: nothing ran
    monkeypatch.setenv("S3RS_MYSQL_URL", sentinel_env["S3RS_MYSQL_URL"])
    monkeypatch.setenv("S3RS_REDSHIFT_URL", bad_wh)
    run("verify-down", "verify", "-t", name, code=2)
    run("load-down", "--log-format", "json", "sync", "-t", name, "--redshift-only", code=2)
    run("s3clean-down", "s3clean", "list", "-t", name, code=2)

    assert "***" in printed["set-down"] and "cannot connect to MySQL" in printed["set-down"]
    assert "cannot connect to the warehouse" in printed["verify-down"]
    assert "cannot ask the warehouse's load ledger" in printed["s3clean-down"]
    for label, text in printed.items():
        assert not _leaks(text), f"sentinel printed by `{label}`"

    # every object in the bucket: watermarks (primary, daily, session), parquet, manifests
    objects = stack.listing()
    assert any("/watermarks/tables/" in k for k in objects)
    for key in objects:
        body = stack.s3.get_object(Bucket=stack.bucket, Key=key)["Body"].read()
        assert not _leaks(body), f"sentinel stored in s3://{stack.bucket}/{key}"

    # everything Dagster stored: runs, event logs (incl. the failures above), compute logs
    files = [os.path.join(d, f) for d, _, fs in os.walk(stack.home) for f in fs]
    assert any(f.endswith(".db") for f in files)
    for path in files:
        with open(path, "rb") as fh:
            assert not _leaks(fh.read()), f"sentinel stored in {path}"
