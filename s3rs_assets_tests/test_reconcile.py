"""Reconcile against real MariaDB and PostgreSQL: every kind of difference, alone and
together, on integer, composite and string (case-insensitive collation) keys, found and
repaired through the load's ledger."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from s3rs_assets.errors import ConfigError
from s3rs_assets_tests.reconcile_fixtures import (
    KEY_DDL,
    T0,
    Env,
    copy_to_warehouse,
    key_of,
    make_env,
    mysql_rows,
    new_table,
    stamp,
    warehouse_rows,
)

N = 240


@pytest.fixture
def env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource) -> Env:
    return make_env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource)


def _make(env: Env, kind: str, n: int = N, **cfg):
    ddl = f"{KEY_DDL[kind]}, update_at DATETIME(6) NULL, note VARCHAR(64) NULL, KEY (update_at)"
    table = new_table(env, ddl, **cfg)
    rows = []
    for i in range(n):
        k = key_of(kind, i)
        rows.append((*k.values(), stamp(i), f"note {i}"))
    cols = ", ".join([*key_of(kind, 0), "update_at", "note"])
    marks = ", ".join(["%s"] * (len(key_of(kind, 0)) + 2))
    with env.mysql_conn.cursor() as cur:
        cur.executemany(f"INSERT INTO `{table.table}` ({cols}) VALUES ({marks})", rows)
    target = copy_to_warehouse(env, table)
    return table, target


def _where(kind: str, i: int) -> tuple[str, tuple]:
    k = key_of(kind, i)
    return " AND ".join(f"`{c}` = %s" for c in k), tuple(k.values())


def _pg_where(kind: str, i: int) -> tuple[str, tuple]:
    k = key_of(kind, i)
    return " AND ".join(f'"{c}" = %s' for c in k), tuple(k.values())


#: each kind of difference a cursor cannot see, made on a table copied identically:
#: name -> (function(env, table, target, kind), expected counts in key mode, in all mode)
def _deleted(env, t, target, kind):
    w, p = _where(kind, 10)
    env.mysql_exec(f"DELETE FROM `{t.table}` WHERE {w}", p)


def _edited(env, t, target, kind):
    w, p = _where(kind, 20)
    env.mysql_exec(f"UPDATE `{t.table}` SET note = 'edited, cursor kept' WHERE {w}", p)


def _backwards(env, t, target, kind):
    w, p = _where(kind, 30)
    env.mysql_exec(f"UPDATE `{t.table}` SET update_at = %s WHERE {w}",
                   (T0 - timedelta(days=30), *p))


def _null_cursor(env, t, target, kind):
    k = key_of(kind, N + 1)
    cols = ", ".join([*k, "update_at", "note"])
    marks = ", ".join(["%s"] * (len(k) + 2))
    env.mysql_exec(f"INSERT INTO `{t.table}` ({cols}) VALUES ({marks})",
                   (*k.values(), None, "null cursor"))


def _late(env, t, target, kind):
    """Stamped by the application's own clock below a bound that already passed."""
    k = key_of(kind, N + 2)
    cols = ", ".join([*k, "update_at", "note"])
    marks = ", ".join(["%s"] * (len(k) + 2))
    env.mysql_exec(f"INSERT INTO `{t.table}` ({cols}) VALUES ({marks})",
                   (*k.values(), T0 - timedelta(days=1), "late"))


def _lost_in_warehouse(env, t, target, kind):
    w, p = _pg_where(kind, 40)
    env.pg(f'DELETE FROM "{target.schema}"."{target.table}" WHERE {w}', p)


CASES = {
    "deleted_in_mysql": (_deleted, {"extra": 1}, {"extra": 1}),
    "edited_cursor_kept": (_edited, {}, {"differs": 1}),
    "cursor_moved_backwards": (_backwards, {"differs": 1}, {"differs": 1}),
    "null_cursor": (_null_cursor, {"missing": 1}, {"missing": 1}),
    "hidden_below_bound": (_late, {"missing": 1}, {"missing": 1}),
    "lost_in_warehouse": (_lost_in_warehouse, {"missing": 1}, {"missing": 1}),
}


def _counts(expected: dict[str, int]) -> dict[str, int]:
    return {k: expected.get(k, 0) for k in ("missing", "extra", "differs")}


def _assert_same(env, table, target):
    live = {k: v for k, v in warehouse_rows(env, target).items()}
    assert live == mysql_rows(env, table, target)


@pytest.mark.parametrize("kind", ["int", "composite", "string"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_difference_alone_is_found_and_repaired(env, kind, case):
    make, in_key, in_all = CASES[case]
    table, target = _make(env, kind)
    make(env, table, target, kind)
    key_report = env.reconcile(table, threshold=8)
    assert key_report.counts() == _counts(in_key)
    report = env.reconcile(table, columns="all", threshold=8, apply=True)
    assert report.counts() == _counts(in_all)
    _assert_same(env, table, target)
    after = env.reconcile(table, columns="all", threshold=8)
    assert after.total == 0


@pytest.mark.parametrize("kind", ["int", "composite", "string"])
def test_all_differences_together(env, kind):
    table, target = _make(env, kind)
    for make, _, _ in CASES.values():
        make(env, table, target, kind)
    found = env.reconcile(table, columns="all", threshold=8, apply=True)
    assert found.counts() == {"missing": 3, "extra": 1, "differs": 2}
    assert found.as_json()["repair"]["planned_upserts"] == 5
    assert found.as_json()["repair"]["planned_deletes"] == 1
    _assert_same(env, table, target)
    assert env.reconcile(table, columns="all", threshold=8).total == 0


def test_identical_tables_cost_one_checksum_scan_per_side(env):
    table, _ = _make(env, "int", n=2000)
    report = env.reconcile(table, threshold=64)
    assert report.total == 0
    assert report.diff.levels == 1 and report.diff.leaves_fetched == 0
    assert report.diff.mysql_rows == report.diff.warehouse_rows == 2000


def test_never_synced_and_bad_input_change_nothing(env):
    ddl = f"{KEY_DDL['int']}, update_at DATETIME(6) NULL, note VARCHAR(64) NULL"
    table = new_table(env, ddl)
    with pytest.raises(ConfigError, match="never been synced"):
        env.reconcile(table)
    table2, _ = _make(env, "int", n=10)
    with pytest.raises(ConfigError, match="--from 9 is after --to 3"):
        env.reconcile(table2, from_key=9, to_key=3)
    s_table, _ = _make(env, "string", n=10)
    with pytest.raises(ConfigError, match="integer first primary-key column"):
        env.reconcile(s_table, from_key=1)
    assert env.store().read(table2.name).reconcile is None


def _plan_nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _plan_nodes(child)


@pytest.mark.parametrize("columns", ["key", "all"])
def test_postgres_groups_child_and_hash_pairs_not_whole_rows(env, columns):
    """The checksum query's GROUP BY (a sort or a hash) sees (child, row hash) pairs: on a
    table without statistics PostgreSQL used to sort whole rows by the child, through temp
    files at 1M rows. What the sort carries is a few integers wide, not the row."""
    from s3rs_assets.reconcile.keys import Segment, split
    from s3rs_assets.reconcile.sql import TableSQL

    ddl = (f"{KEY_DDL['int']}, update_at DATETIME(6) NULL, note VARCHAR(64) NULL, "
           "body TEXT NULL")
    table = new_table(env, ddl)
    target = copy_to_warehouse(env, table)
    w = TableSQL("postgres", target.schema, target.table, target, columns)
    for sp in (split(Segment(lo=0, hi=10_000), 40), split(Segment(), 16)):
        sql, params = w.split_checksums(sp, T0 + timedelta(days=999))
        with psycopg.connect(env.pg_url, autocommit=True) as c:
            c.execute("SET enable_hashagg = off")  # the sort the planner may pick
            plan = c.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone()[0][0]["Plan"]
        sorts = [n for n in _plan_nodes(plan) if n["Node Type"] in ("Sort", "Hash")]
        assert sorts and all(n["Plan Width"] <= 64 for n in sorts), [
            (n["Node Type"], n["Plan Width"]) for n in _plan_nodes(plan)
        ]


def test_scattered_differences_under_string_keys_share_scans(env):
    """A string key's segments are hash prefixes, which no index serves: the segments of a
    level are split, and their leaves fetched, in one scan per side and batch, not one
    scan each (1M rows, 100 differences: 81 s before, one scan per segment). The
    differences found are exactly those made."""
    table, target = _make(env, "string", n=2000)
    keys = [key_of("string", i)["code"] for i in range(0, 2000, 50)]  # 40, scattered
    gone, moved = keys[:20], keys[20:]
    marks = lambda ks: ", ".join(["%s"] * len(ks))  # noqa: E731
    env.mysql_exec(f"DELETE FROM `{table.table}` WHERE code IN ({marks(gone)})", tuple(gone))
    env.mysql_exec(f"UPDATE `{table.table}` SET update_at = update_at - INTERVAL 1 HOUR "
                   f"WHERE code IN ({marks(moved)})", tuple(moved))
    for columns in ("key", "all"):
        report = env.reconcile(table, columns=columns, threshold=8)
        assert report.counts() == {"missing": 0, "extra": 20, "differs": 20}, columns
        d = report.diff
        assert d.levels >= 2 and d.leaves_fetched >= 30  # two may share a leaf
        # per level: one checksum batch and one leaf batch per side (each under 256)
        assert d.queries <= 4 * d.levels, (d.queries, d.levels, d.leaves_fetched)
