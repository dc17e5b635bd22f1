"""The direct load (issue 19): a partition the warehouse ledger never saw is copied straight
into the target (no staging, no merge), its ledger rows in the same transaction. Real
PostgreSQL and moto S3; the same files through the staging path must leave the same rows.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from s3rs_assets.connections import WarehouseConnection, WarehouseConnector
from s3rs_assets.load import LoadTarget, load_files
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets_tests.test_load import (
    DEMO_COLUMNS,
    T0,
    demo_rows,
    ledger,
    pg,
    put_rows,
    row,
    target_rows,
)


class Crash(Exception):
    pass


def twin(_: LoadTarget | None = None) -> LoadTarget:
    """test_load's demo table in a fresh schema (ledgers never meet)."""
    return LoadTarget(f"wh_{uuid.uuid4().hex[:10]}", "orders", list(DEMO_COLUMNS), ("id",),
                      "update_at", "shop.orders")


@pytest.fixture(name="warehouse")
def _warehouse(pg_url: str) -> WarehouseResource:
    return WarehouseResource(url=pg_url)


@pytest.fixture(name="target")
def _target() -> LoadTarget:
    return twin()


def tied_files(s3_client, bucket, target: LoadTarget, partition: str = "d") -> list:
    """Three chunks whose boundaries fall inside runs of equal cursors: 30 rows share T0 + 1 h
    across the first boundary, 20 share T0 + 2 h across the second; ids interleave."""
    t1, t2 = T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    rows = ([row(i * 3, t1, name=f"a{i}") for i in range(30)]
            + [row(i * 3 + 1, t2, name=f"b{i}", qty=i) for i in range(20)]
            + demo_rows(25, 1000, T0 + timedelta(hours=3)))
    chunks = [rows[:15], rows[15:40], rows[40:]]
    return [put_rows(s3_client, bucket, target, partition, f"part-{n}", c)
            for n, c in enumerate(chunks)]


def test_direct_load_leaves_the_rows_the_staging_path_leaves(
        warehouse, s3_resource, s3_client, bucket, pg_url, target):
    files = tied_files(s3_client, bucket, target)
    fast = load_files(warehouse, s3_resource, target, "d", files)
    assert fast.direct and fast.direct_refused == ""
    assert (fast.rows_staged, fast.rows_inserted, fast.rows_deleted) == (75, 75, 0)
    slow_target = twin(target)
    slow = load_files(warehouse, s3_resource, slow_target, "d", files, direct=False)
    assert not slow.direct and slow.rows_inserted == 75
    assert target_rows(pg_url, target) == target_rows(pg_url, slow_target)
    assert len(target_rows(pg_url, target)) == 75
    assert ledger(pg_url, target) == [(f.key, f.rows, "d") for f in files]
    assert fast.ledger_rows == slow.ledger_rows == 75
    assert fast.metadata()["direct"] is True


def test_a_reload_of_the_same_partition_goes_through_the_merge(
        warehouse, s3_resource, s3_client, bucket, pg_url, target):
    first = put_rows(s3_client, bucket, target, "d", "first", [row(1, T0, name="old")])
    assert load_files(warehouse, s3_resource, target, "d", [first]).direct
    newer = put_rows(s3_client, bucket, target, "d", "newer",
                     [row(1, T0 + timedelta(seconds=1), name="new"), row(2, T0)])
    res = load_files(warehouse, s3_resource, target, "d", [first, newer])
    assert not res.direct and res.direct_refused == ""  # never tried: the ledger knows d
    assert (res.rows_staged, res.rows_inserted, res.rows_deleted) == (2, 2, 1)
    assert target_rows(pg_url, target, "id, name") == [(1, "new"), (2, None)]
    assert res.ledger_rows == 3


def test_a_key_the_target_holds_from_another_partition_is_merged_not_doubled(
        warehouse, s3_resource, s3_client, bucket, pg_url, target):
    """A row that moved from day 1 to day 2: day 2 was never loaded, but its key is in the
    target; the primary key refuses the direct COPY and the merge keeps the newer row."""
    d1 = put_rows(s3_client, bucket, target, "d1", "x", [row(1, T0, name="day1"), row(2, T0)])
    assert load_files(warehouse, s3_resource, target, "d1", [d1]).direct
    d2 = put_rows(s3_client, bucket, target, "d2", "x",
                  [row(1, T0 + timedelta(days=1), name="day2"), row(3, T0 + timedelta(days=1))])
    res = load_files(warehouse, s3_resource, target, "d2", [d2])
    assert not res.direct and res.direct_refused == "23505"
    assert target_rows(pg_url, target, "id, name") == [(1, "day2"), (2, None), (3, None)]
    assert ledger(pg_url, target) == [(d1.key, 2, "d1"), (d2.key, 2, "d2")]


def test_a_key_twice_in_the_files_is_merged_newest_first(
        warehouse, s3_resource, s3_client, bucket, pg_url, target):
    """Two versions of a key in one partition's files (read in two runs, the first not
    loaded): the direct COPY is refused, the merge keeps the newest, ties included."""
    a = put_rows(s3_client, bucket, target, "d", "a", [row(1, T0, name="old"), row(2, T0)])
    b = put_rows(s3_client, bucket, target, "d", "b",
                 [row(1, T0 + timedelta(microseconds=1), name="new"), row(3, T0)])
    res = load_files(warehouse, s3_resource, target, "d", [a, b])
    assert not res.direct and res.direct_refused == "23505"
    assert target_rows(pg_url, target, "id, name") == [(1, "new"), (2, None), (3, None)]
    assert res.ledger_rows == 4 and len(ledger(pg_url, target)) == 2


@pytest.mark.parametrize("point", ["after_copy", "after_merge", "before_commit"])
def test_a_crash_between_the_direct_copy_and_the_commit_then_a_retry(
        point, warehouse, s3_resource, s3_client, bucket, pg_url, target):
    files = tied_files(s3_client, bucket, target)

    def crash(name: str) -> None:
        if name == point:
            raise Crash(name)

    with pytest.raises(Crash):
        load_files(warehouse, s3_resource, target, "d", files, checkpoint=crash)
    assert target_rows(pg_url, target) == [] and ledger(pg_url, target) == []
    retry = load_files(warehouse, s3_resource, target, "d", files)
    assert retry.direct and retry.rows_inserted == 75
    assert pg(pg_url, f'SELECT count(*), count(DISTINCT id) FROM "{target.schema}".orders') \
        == [(75, 75)]
    again = load_files(warehouse, s3_resource, target, "d", files)
    assert again.files_loaded == [] and again.files_skipped == [f.key for f in files]


def test_statements_per_load(warehouse, s3_resource, s3_client, bucket, pg_url, target,
                             monkeypatch):
    """Count, don't time: the statements each path sends inside the load transaction."""
    sent: list[str] = []
    for name in ("execute", "query", "copy_from_stdin"):
        real = getattr(WarehouseConnection, name)

        def counted(self, sql, *args, _real=real, **kw):
            sent.append(" ".join(sql.split())[:40])
            return _real(self, sql, *args, **kw)

        monkeypatch.setattr(WarehouseConnection, name, counted)
    files = tied_files(s3_client, bucket, target)
    load_files(warehouse, s3_resource, target, "d", files)  # creates the target too
    sent.clear()
    direct_target = twin(target)
    load_files(warehouse, s3_resource, direct_target, "d", files)
    ddl = len(sent)
    sent.clear()
    slow_target = twin(target)
    load_files(warehouse, s3_resource, slow_target, "d", files)  # the DDL alike
    assert len(sent) == ddl
    sent.clear()
    fresh = put_rows(s3_client, bucket, direct_target, "e", "one", [row(99, T0)])
    load_files(warehouse, s3_resource, direct_target, "e", [fresh])
    direct_statements = list(sent)
    sent.clear()
    load_files(warehouse, s3_resource, slow_target, "e", [fresh], direct=False)
    staged_statements = list(sent)
    copies = [s for s in direct_statements if s.startswith("COPY")]
    assert len(copies) == 1 and f'"{direct_target.schema}"' in copies[0]
    assert not any("s3rs_stage" in s for s in direct_statements)
    # the staging path's CREATE TEMP, staged stats, DELETE, INSERT and DROP become a
    # SAVEPOINT and its RELEASE around the one COPY
    assert len(staged_statements) - len(direct_statements) == 3
    assert sum("s3rs_load_ledger" in s for s in direct_statements) == sum(
        "s3rs_load_ledger" in s for s in staged_statements)


def test_a_dropped_connection_is_retried_on_a_new_one_and_none_is_left_open(
        warehouse, s3_resource, s3_client, bucket, pg_url, target, monkeypatch):
    """The first attempt runs on the connection of the DDL check (connections.FirstAttempt);
    when the server drops it mid-transaction, the retry opens a new one, the rows land once,
    and both connections are closed."""
    files = tied_files(s3_client, bucket, target)
    opened: list[WarehouseConnection] = []
    closed: list[int] = []
    real_connect, real_close = WarehouseConnector.connect, WarehouseConnection.close

    def connect(self, *args, **kw):
        conn = real_connect(self, *args, **kw)
        opened.append(conn)
        return conn

    def close(self) -> None:
        closed.append(id(self))
        real_close(self)

    monkeypatch.setattr(WarehouseConnector, "connect", connect)
    monkeypatch.setattr(WarehouseConnection, "close", close)
    dropped: list[int] = []

    def drop(name: str) -> None:
        if name == "after_ledger" and not dropped:
            dropped.extend(r[0] for r in pg(
                pg_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND state LIKE 'idle in transaction%%'"))

    result = load_files(warehouse, s3_resource, target, "d", files, checkpoint=drop,
                        backoff_seconds=0.0)
    assert dropped == [True]  # the loader's own backend, inside its transaction
    assert result.attempts == 2 and result.rows_inserted == 75
    assert pg(pg_url, f'SELECT count(*), count(DISTINCT id) FROM "{target.schema}".orders') \
        == [(75, 75)]
    assert len(opened) == 2 and {id(c) for c in opened} <= set(closed)
