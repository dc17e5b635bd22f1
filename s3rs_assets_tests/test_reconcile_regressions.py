"""Issue 16's reconcile items, reproduced as they were found: a row repaired once and
deleted again is repaired again (item 4), under a safety bound that does not move between
passes (an open transaction holds it, or a DATE cursor's whole day)."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pymysql
import pytest

from s3rs_assets.reconcile.repair import REPAIR_PARTITION
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.reconcile_fixtures import (
    Env,
    copy_to_warehouse,
    make_env,
    mysql_rows,
    new_table,
    warehouse_rows,
)
from s3rs_assets_tests.test_reconcile import _make


@pytest.fixture
def env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource) -> Env:
    return make_env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource)


@pytest.fixture
def held_bound(env, mysql_db):
    """An open InnoDB transaction that has written: every pass's safety bound is held at
    its start, so two passes share one bound."""
    env.mysql_exec("CREATE TABLE IF NOT EXISTS rc_hold (id INT PRIMARY KEY) ENGINE=InnoDB")
    other = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=mysql_db,
                            autocommit=False)
    with other.cursor() as cur:
        cur.execute("START TRANSACTION")
        cur.execute("INSERT INTO rc_hold VALUES (1)")
    yield
    other.rollback()
    other.close()


def _ledger(env: Env, target) -> list[tuple]:
    return env.pg(
        f'SELECT "file_key" FROM "{target.schema}"."s3rs_load_ledger" '
        'WHERE "table_name" = %s AND "partition_key" = %s',
        (target.table, REPAIR_PARTITION),
    )


def _delete_in_warehouse(env: Env, target, where: str) -> None:
    env.pg(f'DELETE FROM "{target.schema}"."{target.table}" WHERE {where}')


def test_a_row_deleted_again_is_repaired_again_under_a_held_bound(env, held_bound):
    table, target = _make(env, "int", n=50)
    for round_ in (1, 2, 3):
        _delete_in_warehouse(env, target, "id = 7")
        report = env.reconcile(table, threshold=8, apply=True)
        assert report.counts()["missing"] == 1, round_
        assert report.repaired()["upserted"] == 1, round_
        assert report.unrepaired == [], round_
        assert "7" in warehouse_rows(env, target), round_
    assert len({r[0] for r in _ledger(env, target)}) == 3  # a new file per pass
    bounds = {r.bound for r in env.store().read(table.name, fresh=True).reconcile.repairs}
    assert len(bounds) == 1  # the bound really did not move


def test_a_date_cursor_repairs_and_repairs_again(env):
    """Item 5 (a DATE cursor failed every --apply with a TypeError) and item 4 together:
    the bound of a DATE cursor is the start of MySQL's day, the same for every pass."""
    table = new_table(
        env, "id INT NOT NULL PRIMARY KEY, update_on DATE NULL, note VARCHAR(20)",
        cursor="update_on",
    )
    day = date(2025, 3, 1)
    with env.mysql_conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO `{table.table}` VALUES (%s, %s, %s)",
            [(i, day + timedelta(days=i % 3), f"n{i}") for i in range(30)],
        )
    target = copy_to_warehouse(env, table)
    # each kind: missing, extra, cursor moved back, content edited (all mode)
    env.mysql_exec(f"DELETE FROM `{table.table}` WHERE id = 3")
    env.mysql_exec(f"UPDATE `{table.table}` SET update_on = '2024-01-01' WHERE id = 4")
    env.mysql_exec(f"UPDATE `{table.table}` SET note = 'edited' WHERE id = 5")
    _delete_in_warehouse(env, target, "id = 6")
    report = env.reconcile(table, columns="all", threshold=4, apply=True)
    assert report.counts() == {"missing": 1, "extra": 1, "differs": 2}
    assert report.unrepaired == []
    assert warehouse_rows(env, target) == mysql_rows(env, table, target)
    _delete_in_warehouse(env, target, "id = 6")
    again = env.reconcile(table, columns="all", threshold=4, apply=True)
    assert again.counts() == {"missing": 1, "extra": 0, "differs": 0}
    assert again.repaired()["upserted"] == 1 and again.unrepaired == []
    assert warehouse_rows(env, target) == mysql_rows(env, table, target)
    assert env.reconcile(table, columns="all", threshold=4).total == 0


CURSOR_TYPES = ["date", *(f"datetime({n})" for n in range(7)), "timestamp", "timestamp(6)"]


@pytest.mark.parametrize("columns", ["key", "all"])
@pytest.mark.parametrize("cursor_type", CURSOR_TYPES)
def test_every_cursor_type_repairs_every_kind(env, cursor_type, columns):
    """Item 5 for every cursor type: missing, extra, differing and moved-back rows are
    found and repaired by --apply in both column modes, and repaired again next time."""
    table = new_table(
        env, f"id INT NOT NULL PRIMARY KEY, update_at {cursor_type} NULL, note VARCHAR(20)"
    )
    t0 = datetime(2025, 3, 1, 8, 0, 0)
    with env.mysql_conn.cursor() as cur:
        cur.executemany(
            f"INSERT INTO `{table.table}` VALUES (%s, %s, %s)",
            [(i, t0 + timedelta(days=i % 4, seconds=i, microseconds=123457 * i % 10**6),
              f"n{i}") for i in range(40)],
        )
    target = copy_to_warehouse(env, table)
    env.mysql_exec(f"DELETE FROM `{table.table}` WHERE id = 3")  # extra
    env.mysql_exec(f"UPDATE `{table.table}` SET update_at = %s WHERE id = 4",
                   (datetime(2024, 1, 1, 0, 0, 1, 500000),))  # moved back
    env.mysql_exec(f"UPDATE `{table.table}` SET update_at = %s WHERE id = 5",
                   (datetime(2025, 4, 2, 10, 0, 0, 250000),))  # moved on, below the bound
    _delete_in_warehouse(env, target, "id = 6")  # missing
    env.mysql_exec(f"UPDATE `{table.table}` SET note = 'edited' WHERE id = 7")  # all mode
    expected = {"missing": 1, "extra": 1, "differs": 3 if columns == "all" else 2}
    found = env.reconcile(table, columns=columns, threshold=4)
    assert found.counts() == expected
    report = env.reconcile(table, columns=columns, threshold=4, apply=True)
    assert report.counts() == expected and report.unrepaired == [] and report.ok()
    want = mysql_rows(env, table, target)
    got = warehouse_rows(env, target)
    if columns == "key":  # the edit that kept the cursor is invisible to key mode
        want.pop("7"), got.pop("7")
    assert got == want
    _delete_in_warehouse(env, target, "id = 6")
    again = env.reconcile(table, columns=columns, threshold=4, apply=True)
    assert again.counts()["missing"] == 1 and again.repaired()["upserted"] == 1
    assert "6" in warehouse_rows(env, target)
    assert env.reconcile(table, columns=columns, threshold=4).total == 0
