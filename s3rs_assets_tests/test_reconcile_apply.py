"""`reconcile --apply` killed at each step and run again; rows changing in MySQL or in the
warehouse while it runs; soft deletes."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from s3rs_assets.load import CHECKPOINTS
from s3rs_assets.reconcile.repair import REPAIR_PARTITION
from s3rs_assets_tests.reconcile_fixtures import Env, make_env, warehouse_rows
from s3rs_assets_tests.test_reconcile import CASES, _assert_same, _make, _pg_where, _where

STEPS = ("after_diff", "after_repair_file", "after_pending", *CHECKPOINTS, "after_load")


@pytest.fixture
def env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource) -> Env:
    return make_env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource)


class Crash(Exception):
    pass


def _crash_at(step: str):
    def observe(name: str) -> None:
        if name == step:
            raise Crash(step)

    return observe


def _ledger(env, target) -> list[tuple]:
    return env.pg(
        f'SELECT "file_key", "file_md5" FROM "{target.schema}"."s3rs_load_ledger" '
        'WHERE "table_name" = %s AND "partition_key" = %s',
        (target.table, REPAIR_PARTITION),
    )


@pytest.mark.parametrize("step", STEPS)
def test_apply_killed_at_each_step_then_rerun(env, step):
    table, target = _make(env, "int")
    for make, _, _ in CASES.values():
        make(env, table, target, "int")
    with pytest.raises(Crash):
        env.reconcile(table, columns="all", threshold=8, apply=True, checkpoint=_crash_at(step))
    committed = step == "after_load"
    assert bool(_ledger(env, target)) == committed
    rec = env.store().read(table.name, fresh=True)
    pending = rec.reconcile.pending if rec.reconcile else None
    assert (pending is not None) == (step not in ("after_diff", "after_repair_file"))

    again = env.reconcile(table, columns="all", threshold=8, apply=True)
    _assert_same(env, table, target)
    ledger = _ledger(env, target)
    assert len(ledger) == 1, ledger  # one repair file, loaded once
    if pending is not None:
        assert [r.file for r in again.resumed] == [pending.file.key]
        assert again.resumed[0].loaded is (not committed)
        assert again.total == 0  # the resumed repair already fixed everything
    rec = env.store().read(table.name, fresh=True)
    assert rec.reconcile.pending is None
    assert [r.file.key for r in rec.reconcile.repairs] == [k for k, _ in ledger]
    assert env.reconcile(table, columns="all", threshold=8).total == 0


def test_rows_changing_during_the_run_are_left_alone(env):
    table, target = _make(env, "int")
    t = f'"{target.schema}"."{target.table}"'
    # 10: deleted in MySQL, re-inserted after the diff -> must not be deleted
    w10, p10 = _where("int", 10)
    env.mysql_exec(f"DELETE FROM `{table.table}` WHERE {w10}", p10)
    # 30: cursor moved back, then updated again after the diff (above the bound)
    w30, p30 = _where("int", 30)
    env.mysql_exec(f"UPDATE `{table.table}` SET update_at = %s WHERE {w30}",
                   (datetime(2020, 1, 1), *p30))
    # 50: differs; a sync loads a newer version into the warehouse after the re-read
    w50, p50 = _where("int", 50)
    env.mysql_exec(f"UPDATE `{table.table}` SET note = 'mysql edit' WHERE {w50}", p50)
    # 70: deleted in MySQL; re-inserted and synced into the warehouse after the re-read
    w70, p70 = _where("int", 70)
    env.mysql_exec(f"DELETE FROM `{table.table}` WHERE {w70}", p70)
    newer = datetime(2025, 3, 1, 23, 0, 0)

    def meanwhile(name: str) -> None:
        if name == "after_diff":
            env.mysql_exec(
                f"INSERT INTO `{table.table}` (id, update_at, note) VALUES (10, %s, 'back')",
                (newer,),
            )
            env.mysql_exec(
                f"UPDATE `{table.table}` SET update_at = NOW(6) + INTERVAL 1 HOUR, "
                f"note = 'new' WHERE {w30}", p30)
        if name == "after_pending":
            pw50, pp50 = _pg_where("int", 50)
            env.pg(f"UPDATE {t} SET update_at = %s, note = 'synced newer' WHERE {pw50}",
                   (newer, *pp50))
            env.pg(f"UPDATE {t} SET update_at = %s, note = 'synced again' WHERE id = 70",
                   (newer,))

    report = env.reconcile(table, columns="all", threshold=8, apply=True, checkpoint=meanwhile)
    assert report.counts() == {"missing": 0, "extra": 2, "differs": 2}
    assert report.plan.skipped == {
        "present_in_mysql_after_diff": 1, "changed_in_mysql_during_run": 1,
    }
    rows = warehouse_rows(env, target)
    assert rows["10"][2] == "note 10"  # still there, untouched
    assert rows["30"][1] != datetime(2020, 1, 1)  # not overwritten by the older read
    assert rows["50"][1:] == (newer, "synced newer")  # the newer version wins
    assert rows["70"][1:] == (newer, "synced again")  # never deleted by mistake


def test_soft_deletes_stamp_the_row_and_count_it_absent(env):
    table, target = _make(env, "int", deletes="soft")
    w, p = _where("int", 10)
    env.mysql_exec(f"DELETE FROM `{table.table}` WHERE {w}", p)
    report = env.reconcile(table, threshold=8, apply=True)
    assert report.repaired() == {"upserted": 0, "deleted": 0, "soft_deleted": 1}
    t = f'"{target.schema}"."{target.table}"'
    stamped = env.pg(f'SELECT id FROM {t} WHERE "_s3rs_deleted_at" IS NOT NULL')
    assert stamped == [(10,)]
    assert env.reconcile(table, threshold=8).total == 0
    # back in MySQL: found missing, repaired, un-deleted
    env.mysql_exec(
        f"INSERT INTO `{table.table}` (id, update_at, note) VALUES (10, %s, 'again')",
        (datetime(2025, 3, 1) - timedelta(days=3),),
    )
    again = env.reconcile(table, threshold=8, apply=True)
    assert again.counts()["missing"] == 1
    assert env.pg(f'SELECT note, "_s3rs_deleted_at" FROM {t} WHERE id = 10') == [("again", None)]
