"""The load ledger outlives its target: entries are tied to the table's identity.

Real PostgreSQL and moto S3, as in test_load.py (whose helpers these tests share). The
story each test tells is issue 9 item 4: the warehouse table is dropped and re-created,
truncated, or meets a ledger written before identities existed, and the next load must
still leave every row in the target exactly once.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime
from typing import Any

import dagster as dg
import psycopg
import pytest

from s3rs_assets.load import (
    LEDGER_TABLE,
    LoadTarget,
    ensure_target,
    ledger_files,
    ledger_versions,
    load_files,
)
from s3rs_assets.load.ddl import create_table_sql
from s3rs_assets.names import metadata_facts
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets_tests.test_load import DEMO_COLUMNS, demo_rows, pg, put_rows


@pytest.fixture
def warehouse(pg_url: str) -> WarehouseResource:
    return WarehouseResource(url=pg_url)


@pytest.fixture
def target() -> LoadTarget:
    """A fresh warehouse schema per test, so ledgers never meet."""
    return LoadTarget(
        f"wh_{uuid.uuid4().hex[:10]}", "orders", DEMO_COLUMNS, ("id",), "update_at", "shop.orders"
    )


@pytest.fixture
def loaded(warehouse, s3_resource, s3_client, bucket, pg_url, target) -> dict[str, Any]:
    """Two partitions, five files, 500 rows: loaded once, as a sync would."""
    files = {
        "d1": [put_rows(s3_client, bucket, target, "d1", f"p{i}", demo_rows(100, i * 100))
               for i in range(3)],
        "d2": [put_rows(s3_client, bucket, target, "d2", f"p{i}", demo_rows(100, 300 + i * 100))
               for i in range(2)],
    }
    for key, fs in files.items():
        assert len(load_files(warehouse, s3_resource, target, key, fs).files_loaded) == len(fs)
    assert counts(pg_url, target) == (500, 500)
    return files


def run(pg_url: str, sql: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(sql)


def counts(pg_url: str, target) -> tuple[int, int]:
    (n,) = pg(pg_url, f'SELECT count(*), count(DISTINCT id) FROM "{target.schema}"."orders"')
    return n


def oid(pg_url: str, target) -> int:
    return pg(pg_url, "SELECT %s::regclass::oid::bigint", (f'"{target.schema}"."orders"',))[0][0]


def ledger_ids(pg_url: str, target) -> list[tuple[int | None, int]]:
    return pg(
        pg_url,
        f'SELECT target_id, count(*) FROM "{target.schema}"."{LEDGER_TABLE}" '
        "WHERE table_name = %s GROUP BY target_id ORDER BY target_id",
        (target.table,),
    )


def versions(warehouse, target) -> set[tuple[str, str]]:
    return ledger_versions(warehouse, target.schema, target.table)


# ------------------------------------------------------------------ drop and re-create


@pytest.mark.parametrize("by_hand", [True, False])
def test_dropped_and_recreated_target_gets_every_file_again(
    by_hand, warehouse, s3_resource, pg_url, target, loaded
):
    first_oid = oid(pg_url, target)
    assert ledger_ids(pg_url, target) == [(first_oid, 5)]
    every = {(f.key, f.md5) for fs in loaded.values() for f in fs}
    assert versions(warehouse, target) == every

    run(pg_url, f'DROP TABLE "{target.schema}"."orders"')
    # No table: nothing is loaded into it, whatever the ledger's old rows say.
    assert versions(warehouse, target) == set() and ledger_files(warehouse, target) == {}
    if by_hand:  # a restore or a second deployment creates it with the same columns
        run(pg_url, create_table_sql(target, "postgres"))
        assert ledger_files(warehouse, target, "d1") == {}
        ddl = []
    else:
        ddl = [create_table_sql(target, "postgres")]

    res = load_files(warehouse, s3_resource, target, "d1", loaded["d1"])
    assert res.ddl == ddl
    assert res.files_loaded == [f.key for f in loaded["d1"]] and res.files_skipped == []
    assert res.rows_inserted == 300 and res.ledger_rows == 300
    assert "dropped and re-created since" in res.reloaded_reason
    assert "5 file(s) (500 rows)" in res.reloaded_reason and res.ledger_discarded == 5
    assert res.reload_partitions == ["d1", "d2"]
    assert res.target_id == oid(pg_url, target) != first_oid
    assert res.metadata()["reloaded_reason"] == res.reloaded_reason
    assert counts(pg_url, target) == (300, 300)
    assert ledger_ids(pg_url, target) == [(res.target_id, 3)]  # the old table's rows are gone

    # The other partition's files were never loaded into this table: they load too.
    assert ledger_files(warehouse, target, "d2") == {}
    res2 = load_files(warehouse, s3_resource, target, "d2", loaded["d2"])
    assert len(res2.files_loaded) == 2 and res2.reloaded_reason == ""
    assert counts(pg_url, target) == (500, 500)
    assert versions(warehouse, target) == every

    # Loading everything again is a no-op.
    for key, fs in loaded.items():
        again = load_files(warehouse, s3_resource, target, key, fs)
        assert again.files_loaded == [] and len(again.files_skipped) == len(fs)
        assert again.reloaded_reason == "" and again.attempts == 1
    assert counts(pg_url, target) == (500, 500)


# --------------------------------------------------------------------------- truncate


def test_truncated_target_is_noticed_and_reloaded(
    warehouse, s3_resource, pg_url, target, loaded, caplog
):
    same_oid = oid(pg_url, target)
    run(pg_url, f'TRUNCATE "{target.schema}"."orders"')
    assert oid(pg_url, target) == same_oid  # TRUNCATE keeps the identity
    # Read-only lookups already stop claiming files whose rows are not there.
    assert versions(warehouse, target) == set() and ledger_files(warehouse, target, "d2") == {}

    with caplog.at_level("WARNING"):
        res = load_files(warehouse, s3_resource, target, "d2", loaded["d2"])
    assert res.files_loaded == [f.key for f in loaded["d2"]] and res.rows_inserted == 200
    assert res.reloaded_reason == (
        f"{target.qualified} holds 0 rows but the load ledger says 5 file(s) with 500 rows "
        "were loaded into it and s3rs's last load left rows there (truncated or emptied by "
        "hand?)"
    )
    assert res.ledger_discarded == 5 and res.target_id == same_oid
    assert res.reload_partitions == ["d1", "d2"]
    assert res.reloaded_reason in caplog.text
    assert ledger_files(warehouse, target) == {f.key: 100 for f in loaded["d2"]}

    # d1's entries went with the rest: loading it again puts its rows back.
    res1 = load_files(warehouse, s3_resource, target, "d1", loaded["d1"])
    assert len(res1.files_loaded) == 3 and res1.reloaded_reason == ""
    assert counts(pg_url, target) == (500, 500)
    assert ledger_ids(pg_url, target) == [(same_oid, 5)]
    again = load_files(warehouse, s3_resource, target, "d1", loaded["d1"])
    assert again.files_loaded == [] and again.reloaded_reason == ""


def test_a_target_s3rs_emptied_itself_is_not_taken_for_a_truncated_one(
    warehouse, s3_resource, s3_client, bucket, pg_url, target, loaded
):
    """Issue 16 item 3: reconcile deletes every row (all were deleted in MySQL) in a load
    transaction of its own; a later load must not read the empty target as a TRUNCATE and
    bring the deleted rows back from the old files."""
    t = f'"{target.schema}"."orders"'

    def delete_all(conn) -> None:  # what reconcile's repair does, in the same transaction
        conn.execute(f"DELETE FROM {t}")

    empty = put_rows(s3_client, bucket, target, "_repair", "r0", demo_rows(0, 0))
    res = load_files(warehouse, s3_resource, target, "_repair", [empty], before_merge=delete_all)
    assert res.files_loaded == [empty.key] and counts(pg_url, target) == (0, 0)
    every = {(f.key, f.md5) for fs in loaded.values() for f in fs}
    # read-only lookups trust the ledger: s3rs emptied it
    assert every <= versions(warehouse, target)
    # a later load of new rows does not discard the ledger and reload the deleted rows
    new = put_rows(s3_client, bucket, target, "d3", "p0", demo_rows(1, 9_000))
    res = load_files(warehouse, s3_resource, target, "d3", [new])
    assert res.reloaded_reason == "" and res.ledger_discarded == 0
    for key, fs in loaded.items():
        again = load_files(warehouse, s3_resource, target, key, fs)
        assert again.files_loaded == [] and again.reloaded_reason == ""
    assert counts(pg_url, target) == (1, 1)
    # ...while a TRUNCATE behind s3rs's back after that load is noticed again
    run(pg_url, f"TRUNCATE {t}")
    assert versions(warehouse, target) == {(empty.key, empty.md5)}  # only rowless files
    res = load_files(warehouse, s3_resource, target, "d1", loaded["d1"])
    assert "truncated or emptied by hand" in res.reloaded_reason


def test_truncate_with_racing_loaders_loads_every_row_once(
    warehouse, s3_resource, pg_url, target, loaded
):
    run(pg_url, f'TRUNCATE "{target.schema}"."orders"')
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}

    def go(key: str) -> None:
        barrier.wait()
        try:
            results[key] = load_files(
                warehouse, s3_resource, target, key, loaded[key], backoff_seconds=0.05
            )
        except BaseException as e:  # noqa: BLE001
            results[key] = e

    threads = [threading.Thread(target=go, args=(k,)) for k in loaded]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert all(not isinstance(r, BaseException) for r in results.values()), results
    assert counts(pg_url, target) == (500, 500)
    assert ledger_ids(pg_url, target) == [(oid(pg_url, target), 5)]
    for key, fs in loaded.items():  # and the ledger claims exactly what is there
        assert load_files(warehouse, s3_resource, target, key, fs).files_loaded == []


def test_partial_delete_is_not_guessed_at(warehouse, s3_resource, pg_url, target, loaded):
    """Rows deleted by hand (not all): the ledger is kept; verify/reconcile find it."""
    run(pg_url, f'DELETE FROM "{target.schema}"."orders" WHERE id < 450')
    res = load_files(warehouse, s3_resource, target, "d1", loaded["d1"])
    assert res.files_loaded == [] and res.reloaded_reason == ""
    assert counts(pg_url, target) == (50, 50)


# ------------------------------------------------------------------ old-format ledger


def _make_old_format(pg_url: str, target) -> None:
    """The ledger as s3rs wrote it before entries carried the target's identity."""
    run(pg_url, f'ALTER TABLE "{target.schema}"."{LEDGER_TABLE}" DROP COLUMN target_id')


def test_old_ledger_is_migrated_and_adopted_while_the_target_holds_rows(
    warehouse, s3_resource, pg_url, target, loaded
):
    _make_old_format(pg_url, target)
    every = {(f.key, f.md5) for fs in loaded.values() for f in fs}
    assert versions(warehouse, target) == every  # read before any migration: all trusted

    assert ensure_target(warehouse, target) == [
        f'ALTER TABLE "{target.schema}"."{LEDGER_TABLE}" ADD COLUMN "target_id" BIGINT'
    ]
    assert ledger_ids(pg_url, target) == [(None, 5)]
    assert versions(warehouse, target) == every  # not adopted yet, still trusted
    res = load_files(warehouse, s3_resource, target, "d1", loaded["d1"])
    assert res.files_loaded == [] and len(res.files_skipped) == 3 and res.ledger_rows == 300
    assert res.reloaded_reason == "" and res.ddl == []
    assert ledger_ids(pg_url, target) == [(oid(pg_url, target), 5)]  # adopted, all of them
    assert counts(pg_url, target) == (500, 500)


def test_old_ledger_with_an_empty_target_reloads(
    warehouse, s3_resource, pg_url, target, loaded
):
    _make_old_format(pg_url, target)
    run(pg_url, f'TRUNCATE "{target.schema}"."orders"')
    assert versions(warehouse, target) == set()
    res = load_files(warehouse, s3_resource, target, "d1", loaded["d1"])
    assert res.ddl == [
        f'ALTER TABLE "{target.schema}"."{LEDGER_TABLE}" ADD COLUMN "target_id" BIGINT'
    ]
    assert len(res.files_loaded) == 3 and "holds 0 rows" in res.reloaded_reason
    assert ledger_ids(pg_url, target) == [(oid(pg_url, target), 3)]
    assert counts(pg_url, target) == (300, 300)


# ------------------------------------------------------------------ through Dagster


def test_sync_after_drop_reloads_every_partition(mysql_conn, mysql_db, mysql_url, pg_url,
                                                 s3_resource, spark_resource):
    """The issue's story: a sync after the target was re-created said "already in the
    ledger" and loaded 0 rows. Now the load reloads, and the watermark's mirror forgets
    the other partitions; the planner, asking the ledger, finds all of them to load."""
    from s3rs_assets.io_manager import store_for
    from s3rs_assets.load import ledger_versions
    from s3rs_assets.warehouse import WarehouseResource
    from s3rs_assets.work import unloaded
    from s3rs_assets_tests.helpers import make_ties_table, resources, sync, table_cfg, ties

    days = ("2025-03-01", "2025-03-02", "2025-03-03")
    rows = [r for i, d in enumerate(days)
            for r in ties(40, datetime.fromisoformat(d), 4, first_id=1 + 100 * i)]
    make_ties_table(mysql_conn, "ledger_drop", rows)
    schema = f"dw_{uuid.uuid4().hex[:8]}"
    cfg = table_cfg(mysql_db, "ledger_drop", target=f"{schema}.ledger_drop")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    with dg.instance_for_test() as instance:
        assert sync(cfg, res, start=days[0], end=days[-1], instance=instance).success
        t = f'"{schema}"."ledger_drop"'
        assert pg(pg_url, f"SELECT count(*) FROM {t}") == [(120,)]
        run(pg_url, f"DROP TABLE {t}")

        last = sync(cfg, res, partition=days[-1], instance=instance, stages=("redshift_table",))
        md = metadata_facts(last.get_asset_materialization_events()[0].materialization.metadata)
        assert "dropped and re-created since" in md["reloaded_reason"]
        assert md["partitions_to_reload"] == 3 and md["rows_inserted"] == 40
        rec = store_for(s3_resource).read(cfg.name)
        assert days[0] not in rec.loaded_partitions and days[1] not in rec.loaded_partitions
        wh = WarehouseResource(url=pg_url)
        assert sorted(unloaded(rec, ledger_versions(wh, schema, "ledger_drop"))) == list(
            days[:2])

        assert sync(cfg, res, start=days[0], end=days[-1], instance=instance,
                    stages=("redshift_table",)).success
        assert pg(pg_url, f"SELECT count(*), count(DISTINCT id) FROM {t}") == [(120, 120)]
        rec = store_for(s3_resource).read(cfg.name)
        assert not unloaded(rec, ledger_versions(wh, schema, "ledger_drop"))  # none left
        assert rec.redshift_rows_loaded == 120
    run(pg_url, f'DROP SCHEMA "{schema}" CASCADE')
