"""Reconcile on random tables (hypothesis): string and composite keys of arbitrary Unicode
text, random differences made on both sides, thresholds small enough that segments split
several levels deep, and hash-prefix batches as small as one segment. Reconcile must
report exactly the differences made, in both column modes, and `--apply` must leave the
warehouse equal to MySQL, with nothing left to find.

A key's segment is a prefix of the SHA-256 of its text, computed by each database: a key
whose text MariaDB and PostgreSQL print or hash differently lands in different segments
and shows up as one row missing and another extra. Keys here start with a unique number,
so the collation (general_ci and unicode_ci fold case, accents and trailing spaces; bin
folds nothing) never makes two of them equal. A composite key's first column holds few
values, so segments inside one integer value are cut by the hash too.

Three examples run in the normal suite; `S3RS_HYPOTHESIS_EXAMPLES=50` runs more.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from s3rs_assets.reconcile import diff
from s3rs_assets_tests.reconcile_fixtures import (
    T0,
    Env,
    copy_to_warehouse,
    make_env,
    mysql_rows,
    new_table,
    warehouse_rows,
)
from s3rs_assets_tests.type_shapes import TEXT

EXAMPLES = int(os.environ.get("S3RS_HYPOTHESIS_EXAMPLES", "3"))

DDL = {
    "string": "code VARCHAR(40) NOT NULL, PRIMARY KEY (code)",
    "composite": "id INT NOT NULL, code VARCHAR(40) NOT NULL, PRIMARY KEY (id, code)",
}
#: the key column's collation: folding case, accents and trailing spaces, or none
COLLATIONS = ["utf8mb4_general_ci", "utf8mb4_unicode_ci", "utf8mb4_bin"]
#: difference made to one row -> (rows missing, extra, differing) it makes in key mode, in
#: all-columns mode (rows inserted late are drawn apart: `late`)
OPS = {
    "deleted_in_mysql": ((0, 1, 0), (0, 1, 0)),
    "lost_in_warehouse": ((1, 0, 0), (1, 0, 0)),
    "edited_cursor_kept": ((0, 0, 0), (0, 0, 1)),
    "cursor_moved_back": ((0, 0, 1), (0, 0, 1)),
    "cursor_set_null": ((0, 0, 1), (0, 0, 1)),
}


@st.composite
def cases(draw: st.DrawFn) -> dict:
    kind = draw(st.sampled_from(sorted(DDL)))
    texts = draw(st.lists(TEXT, min_size=10, max_size=120))
    n = len(texts)
    per_id = draw(st.integers(1, n))  # rows sharing one value of a composite key's id
    rows = [{"code": f"{i:04d}{t}", "id": i // per_id, "i": i} for i, t in enumerate(texts)]
    touched = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=min(n, 12)))
    ops = [(draw(st.sampled_from(sorted(OPS))), i) for i in touched]
    return {
        "kind": kind,
        "collate": draw(st.sampled_from(COLLATIONS)),
        "rows": rows,
        "ops": ops,
        "late": draw(st.lists(TEXT, max_size=3)),
        "threshold": draw(st.integers(1, 12)),
        "batch": draw(st.sampled_from([1, 2, 3, 256])),
    }


@pytest.fixture
def env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource) -> Env:
    return make_env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource)


def _key(kind: str, row: dict) -> dict:
    return {"code": row["code"]} if kind == "string" else {"id": row["id"], "code": row["code"]}


def _where(key: dict, quote: str) -> tuple[str, tuple]:
    return (" AND ".join(f"{quote}{c}{quote} = %s" for c in key), tuple(key.values()))


def _insert(env: Env, table: str, key: dict, cursor, note: str) -> None:
    cols = ", ".join([*key, "update_at", "note"])
    marks = ", ".join(["%s"] * (len(key) + 2))
    env.mysql_exec(f"INSERT INTO `{table}` ({cols}) VALUES ({marks})",
                   (*key.values(), cursor, note))


def _apply_ops(env: Env, case: dict, table: str, target) -> tuple[tuple, tuple]:
    """Make the drawn differences; returns the (missing, extra, differs) each mode expects."""
    kind = case["kind"]
    want = {"key": [0, 0, 0], "all": [0, 0, 0]}
    pg_table = f'"{target.schema}"."{target.table}"'
    for op, i in case["ops"]:
        key = _key(kind, case["rows"][i])
        my, my_params = _where(key, "`")
        if op == "deleted_in_mysql":
            env.mysql_exec(f"DELETE FROM `{table}` WHERE {my}", my_params)
        elif op == "lost_in_warehouse":
            pg, pg_params = _where(key, '"')
            env.pg(f"DELETE FROM {pg_table} WHERE {pg}", pg_params)
        elif op == "edited_cursor_kept":
            env.mysql_exec(f"UPDATE `{table}` SET note = 'edited' WHERE {my}", my_params)
        elif op == "cursor_moved_back":
            env.mysql_exec(f"UPDATE `{table}` SET update_at = update_at - INTERVAL 1 HOUR "
                           f"WHERE {my}", my_params)
        else:
            assert op == "cursor_set_null", op
            env.mysql_exec(f"UPDATE `{table}` SET update_at = NULL WHERE {my}", my_params)
        for mode, counts in zip(("key", "all"), OPS[op], strict=True):
            want[mode] = [a + b for a, b in zip(want[mode], counts, strict=True)]
    n = len(case["rows"])
    for j, text in enumerate(case["late"]):  # stamped below a bound that already passed
        row = {"code": f"{n + j:04d}{text}", "id": (n + j) % 7, "i": n + j}
        _insert(env, table, _key(kind, row), T0 - timedelta(days=1), "late")
        for mode in want:
            want[mode][0] += 1
    return tuple(want["key"]), tuple(want["all"])


def _counts(report) -> tuple[int, int, int]:
    c = report.counts()
    return c["missing"], c["extra"], c["differs"]


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_random_keys_and_differences_are_found_exactly(env, monkeypatch, case):
    monkeypatch.setattr(diff, "PREFIX_BATCH", case["batch"])
    cfg = new_table(env, f"{DDL[case['kind']]}, update_at DATETIME(6) NULL, "
                         "note VARCHAR(64) NULL, KEY (update_at)", collate=case["collate"])
    for r in case["rows"]:
        _insert(env, cfg.table, _key(case["kind"], r),
                T0 + timedelta(minutes=r["i"] % 7, microseconds=r["i"]), f"note {r['i']}")
    target = copy_to_warehouse(env, cfg)
    t = case["threshold"]
    assert env.reconcile(cfg, threshold=t).total == 0
    assert env.reconcile(cfg, columns="all", threshold=t).total == 0

    in_key, in_all = _apply_ops(env, case, cfg.table, target)
    found = env.reconcile(cfg, threshold=t)
    event(f"{case['kind']} key, levels split: {min(found.diff.levels, 4)}")  # statistics
    event(f"differences: {min(sum(in_all), 5)}")
    assert _counts(found) == in_key
    assert _counts(env.reconcile(cfg, columns="all", threshold=t, apply=True)) == in_all
    assert warehouse_rows(env, target) == mysql_rows(env, cfg, target)
    assert env.reconcile(cfg, columns="all", threshold=t).total == 0
