"""Every command's exit code when what it needs is wrong or out of reach (README, "Command
line"): 0 done and complete, 1 the data or a check is wrong, 2 configuration or connection
error that changed nothing. A command that could not reach what it needed never exits 0.

Each case runs the command in-process (as `test_cli.py` does) against the real stack with
one thing broken: a misspelt cursor column in tables.yaml, a wrong MySQL password, an S3
endpoint nobody listens on, a warehouse nobody listens on. The listing of the bucket and
the warehouse's ledger show that nothing changed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml

from s3rs_assets_tests.cli_stack import (
    day,
    invoke,
    key_of,
    mysql,
    pg,
    seed,
)
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT, free_port
from s3rs_assets_tests.helpers import make_ties_table

GOOD, TYPO = "ec_orders", "ec_typo"


@pytest.fixture(scope="session")
def cli_tables_file(tmp_path_factory, mysql_db):
    """The table list of this module: one good table, one whose cursor is misspelt."""
    path = tmp_path_factory.mktemp("exit_codes") / "tables.yaml"
    common = {"lag": "0s", "partition": "daily", "start": key_of(day(10))}
    path.write_text(yaml.safe_dump({"tables": [
        {"name": f"{mysql_db}.{GOOD}", **common},
        {"name": f"{mysql_db}.{TYPO}", "cursor": "update_att", **common},
    ]}, sort_keys=False))
    return path


@pytest.fixture
def tables(stack):
    """Both tables in MySQL (the same rows) and in the warehouse, with a watermark each."""
    from s3rs_assets.config import load_tables
    from s3rs_assets.load import ensure_target
    from s3rs_assets.load.sql import create_ledger_sql
    from s3rs_assets.load_stage import load_target
    from s3rs_assets.resources import MySQLResource
    from s3rs_assets.warehouse import WarehouseResource

    rows = [(i, day(6) + timedelta(hours=i % 20)) for i in range(1, 21)]
    with mysql(stack.db) as conn:
        for t in (GOOD, TYPO):
            make_ties_table(conn, t, rows)
    cfg = next(t for t in load_tables() if t.name == stack.name(GOOD))
    url = f"mysql://root:@{MYSQL_HOST}:{MYSQL_PORT}/{stack.db}"
    ensure_target(WarehouseResource(url=stack.pg_url), load_target(cfg, MySQLResource(url=url)))
    with pg(stack) as c:
        c.execute(f'TRUNCATE "{stack.db}"."{GOOD}"')
        c.execute(create_ledger_sql(stack.db))
        with c.cursor() as cur:
            cur.executemany(
                f'INSERT INTO "{stack.db}"."{GOOD}" (id, update_at, amount, note) '
                "VALUES (%s, %s, %s, %s)",
                [(i, ts, f"{i}.0001", f"row {i} ✓") for i, ts in rows],
            )
    for t in (GOOD, TYPO):
        seed(stack, t)
    return rows


def _broken(what: str, stack, monkeypatch) -> str:
    """Break one thing; returns the table to name."""
    if what == "cursor":
        return stack.name(TYPO)
    if what == "mysql_password":
        monkeypatch.setenv("S3RS_MYSQL_URL",
                           f"mysql://root:not-the-password@{MYSQL_HOST}:{MYSQL_PORT}/{stack.db}")
    elif what == "s3":
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    elif what == "warehouse":
        monkeypatch.setenv("S3RS_REDSHIFT_URL",
                           f"postgresql://postgres:@127.0.0.1:{free_port()}/{stack.db}")
    return stack.name(GOOD)


COMMANDS = {
    "sync": ["sync", "-t", "{t}", "--no-progress"],
    "verify": ["verify", "-t", "{t}"],
    "reconcile": ["reconcile", "-t", "{t}"],
    "watermark get": ["watermark", "get", "-t", "{t}"],
    "watermark list": ["watermark", "list"],
    "watermark set": ["watermark", "set", "-t", "{t}", "--timestamp", "{ts}", "--yes"],
    "watermark reset": ["watermark", "reset", "-t", "{t}", "--yes"],
    "watermark history": ["watermark", "history", "-t", "{t}"],
    "s3clean list": ["s3clean", "list", "-t", "{t}"],
    "status": ["status", "-t", "{t}"],
}

BROKEN = ("cursor", "mysql_password", "s3", "warehouse")
CURSOR = "has no cursor column 'update_att' (its date/time columns: update_at)"
MYSQL = "cannot connect to MySQL at mysql://root:***@"
S3 = "cannot reach s3://"
S3_READ = "cannot read the watermark of"  # s3clean reads the record first
S3_RECONCILE = "cannot reach S3 to read s3://"  # reconcile: its own plain S3 client
WAREHOUSE = "cannot connect to the warehouse at postgresql://postgres:***@"

#: (command, what is broken) -> (exit code, text of the message). 0 where the command does
#: not need what is broken: the watermark commands never read the table itself (a misspelt
#: column is found by the commands that read rows), verify never reads S3, and only the
#: commands that ask the warehouse need it.
EXPECTED = {
    ("sync", "cursor"): (2, CURSOR),
    ("sync", "mysql_password"): (2, MYSQL),
    ("sync", "s3"): (2, S3),
    ("sync", "warehouse"): (2, WAREHOUSE),
    ("verify", "cursor"): (2, CURSOR),
    ("verify", "mysql_password"): (2, MYSQL),
    ("verify", "s3"): (0, "all match"),
    ("verify", "warehouse"): (2, WAREHOUSE),
    ("reconcile", "cursor"): (2, CURSOR),
    ("reconcile", "mysql_password"): (2, MYSQL),
    ("reconcile", "s3"): (2, S3_RECONCILE),
    ("reconcile", "warehouse"): (2, WAREHOUSE),
    ("watermark get", "cursor"): (0, "Watermark for"),
    ("watermark get", "mysql_password"): (0, "Watermark for"),
    ("watermark get", "s3"): (2, S3),
    ("watermark get", "warehouse"): (0, "Watermark for"),
    ("watermark list", "cursor"): (0, "NEXT SYNC FROM"),
    # every row printed, but without the lag it could not compute
    ("watermark list", "mysql_password"): (2, "source clock unavailable (" + MYSQL),
    ("watermark list", "s3"): (2, S3),
    ("watermark list", "warehouse"): (0, "NEXT SYNC FROM"),
    ("watermark set", "cursor"): (0, "saved: next sync starts from"),
    ("watermark set", "mysql_password"): (2, MYSQL),  # TS is read on MySQL's clock
    ("watermark set", "s3"): (2, S3),
    ("watermark set", "warehouse"): (0, "saved: next sync starts from"),
    ("watermark reset", "cursor"): (0, "saved: next sync starts from"),
    ("watermark reset", "mysql_password"): (0, "saved: next sync starts from"),
    ("watermark reset", "s3"): (2, S3),
    ("watermark reset", "warehouse"): (2, WAREHOUSE),  # the load side is the ledger
    ("watermark history", "cursor"): (0, "(current)"),
    ("watermark history", "mysql_password"): (0, "(current)"),
    ("watermark history", "s3"): (2, S3),
    ("watermark history", "warehouse"): (0, "(current)"),
    ("s3clean list", "cursor"): (0, "unloaded"),
    ("s3clean list", "mysql_password"): (0, "unloaded"),
    ("s3clean list", "s3"): (2, S3_READ),
    ("s3clean list", "warehouse"): (2, WAREHOUSE),
    ("status", "cursor"): (2, CURSOR),  # its catalog is wrong, and no table is behind
    ("status", "mysql_password"): (2, MYSQL),
    ("status", "s3"): (2, S3),
    ("status", "warehouse"): (0, "1 ok"),  # status reads MySQL and the records only
}


def _ledger_rows(stack) -> int:
    with pg(stack) as c:
        return c.execute(f'SELECT COUNT(*) FROM "{stack.db}".s3rs_load_ledger').fetchone()[0]


@pytest.mark.parametrize("what", BROKEN)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_exit_code(stack, tables, monkeypatch, command, what):
    code, message = EXPECTED[(command, what)]
    s3_listing, ledger = stack.listing(), _ledger_rows(stack)
    with monkeypatch.context() as broken:
        name = _broken(what, stack, broken)
        args = [a.format(t=name, ts=key_of(day(5))) for a in COMMANDS[command]]
        r = invoke(*args)
    assert r.exit_code == code, r.output
    assert message in r.output, r.output
    assert "Traceback" not in r.output
    if code == 2:  # nothing was changed
        assert stack.listing() == s3_listing
        assert _ledger_rows(stack) == ledger


def test_watermark_list_with_an_unreadable_record_exits_1(stack, tables):
    """An ERROR row is a finding: the record is damaged and no valid copy is left."""
    name = stack.name(GOOD)
    layout = stack.resource.layout
    for key in list(stack.listing()):
        if key.startswith(layout.watermarks()) and name in key:
            stack.s3.delete_object(Bucket=stack.bucket, Key=key)
    stack.s3.put_object(Bucket=stack.bucket, Key=layout.watermark_primary(name), Body=b"{oops")
    r = invoke("watermark", "list")
    assert r.exit_code == 1, r.output
    assert f"{name}" in r.output and "ERROR: " in r.output
    assert f"error: the watermark of {name} could not be read (ERROR above)" in r.output
    assert stack.name(TYPO) in r.output  # the other tables are still listed
