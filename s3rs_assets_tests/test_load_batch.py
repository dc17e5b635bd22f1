"""Several partitions in one load transaction (`load_partitions`, issue 18 item 7): what a
catch-up over scattered days uses instead of one transaction per partition.

Real PostgreSQL and moto S3 (test_load.py's helpers). The batched load must leave exactly
the rows, ledger entries and per-partition counts that one `load_files` per partition
leaves, pay one DDL check and one commit, and a crash anywhere inside it must leave
nothing of any of its partitions (the retry then loads each row once).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from s3rs_assets.connections import WarehouseConnection
from s3rs_assets.load import LEDGER_TABLE, LoadTarget, load_files, load_partitions, transaction
from s3rs_assets.load_stage import load_batches
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets_tests.compose import crash_at
from s3rs_assets_tests.test_load import DEMO_COLUMNS, T0, demo_rows, pg, put_rows, row


class Crash(RuntimeError):
    pass


def fresh_target() -> LoadTarget:
    return LoadTarget(f"wh_{uuid.uuid4().hex[:10]}", "orders", list(DEMO_COLUMNS), ("id",),
                      "update_at", "shop.orders")


@pytest.fixture(name="warehouse")
def _warehouse(pg_url: str) -> WarehouseResource:
    return WarehouseResource(url=pg_url)


def scattered(s3_client: Any, bucket: str, target: LoadTarget) -> dict[str, list]:
    """Six data days years apart, oldest first: two files on most, one on d4; key 105 has
    a newer version on d5 (so d5's direct COPY is refused and it stages and merges), and d6
    repeats d2's first five keys at a later time (a merge that replaces rows)."""
    out: dict[str, list] = {}
    for n in range(1, 7):
        t = T0 + timedelta(days=400 * n)
        rows = demo_rows(10, n * 100, t)
        if n == 5:
            rows.append(row(105, t, name="moved"))  # key 105 was loaded with d1
        if n == 6:
            rows = demo_rows(5, 200, t) + demo_rows(10, 600, t)
        chunks = [rows[:6], rows[6:]] if n != 4 else [rows]
        out[f"d{n}"] = [put_rows(s3_client, bucket, target, f"d{n}", f"c{i}", c)
                        for i, c in enumerate(chunks)]
    return out


def ledger_entries(pg_url: str, target: LoadTarget) -> list[tuple]:
    """The ledger without what differs by nature between two loads (ids, times)."""
    return pg(pg_url, f'SELECT file_key, file_md5, partition_key, source_name, row_count, '
              f'byte_count, cursor_min, cursor_max FROM "{target.schema}"."{LEDGER_TABLE}" '
              "WHERE table_name = %s ORDER BY file_key", (target.table,))


def rows_of(pg_url: str, target: LoadTarget) -> list[tuple]:
    return pg(pg_url, f'SELECT * FROM "{target.schema}"."{target.table}" ORDER BY id')


COUNTS = ("files_loaded", "files_skipped", "rows_staged", "rows_inserted", "rows_deleted",
          "rows_not_inserted", "ledger_rows", "bytes_loaded", "direct")


class Counter:
    """ensure_target calls and commits of warehouse connections, counted on the real ones."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ddl = self.commits = 0
        real_ddl, real_commit = transaction.ensure_target, WarehouseConnection.commit

        def ddl(*a: Any, **kw: Any) -> Any:
            self.ddl += 1
            return real_ddl(*a, **kw)

        def commit(conn: WarehouseConnection) -> None:
            self.commits += 1
            real_commit(conn)

        monkeypatch.setattr(transaction, "ensure_target", ddl)
        monkeypatch.setattr(WarehouseConnection, "commit", commit)


def test_one_transaction_leaves_what_one_per_partition_leaves(
        warehouse, s3_resource, s3_client, bucket, pg_url, monkeypatch):
    one, batch = fresh_target(), fresh_target()
    files = scattered(s3_client, bucket, one)  # the same objects load into both targets
    # d3 loaded before (as an earlier run would): skipped by both
    load_files(warehouse, s3_resource, one, "d3", files["d3"])
    load_files(warehouse, s3_resource, batch, "d3", files["d3"])
    count = Counter(monkeypatch)
    each = {k: load_files(warehouse, s3_resource, one, k, fs) for k, fs in files.items()}
    assert (count.ddl, count.commits) == (6, 5)  # d3: nothing to commit
    count.ddl = count.commits = 0
    together = load_partitions(warehouse, s3_resource, batch, files)
    assert (count.ddl, count.commits) == (1, 1)
    assert rows_of(pg_url, batch) == rows_of(pg_url, one)
    assert len(rows_of(pg_url, one)) == 60
    assert ledger_entries(pg_url, batch) == ledger_entries(pg_url, one)
    for k in files:
        a, b = each[k].metadata(), together[k].metadata()
        assert {c: a[c] for c in COUNTS} == {c: b[c] for c in COUNTS}, k
    assert together["d5"].direct_refused == "23505" and together["d1"].direct
    assert together["d6"].rows_deleted == 5
    # each partition keeps its own load id (one ledger entry set per partition)
    ids = pg(pg_url, f'SELECT partition_key, count(DISTINCT load_id) FROM "{batch.schema}".'
             f'"{LEDGER_TABLE}" GROUP BY partition_key ORDER BY 1')
    assert ids == [(f"d{n}", 1) for n in range(1, 7)]
    # again: everything skipped, nothing committed
    count.commits = 0
    again = load_partitions(warehouse, s3_resource, batch, files)
    assert count.commits == 0
    assert all(not r.files_loaded and len(r.files_skipped) == len(files[k])
               for k, r in again.items())


@pytest.mark.parametrize(("attr", "after"), [
    ("_copy_direct", 3),   # the compose crash "load_direct_before_commit", 4th partition
    ("_stage", 0),         # "load_before_commit": d5 stages (d1..d4 copied in before it)
])
def test_a_crash_inside_the_batch_leaves_nothing_and_the_retry_loads_once(
        attr, after, warehouse, s3_resource, s3_client, bucket, pg_url, monkeypatch):
    target = fresh_target()
    files = scattered(s3_client, bucket, target)
    with crash_at(monkeypatch, transaction, attr, Crash, after) as calls, \
            pytest.raises(Crash):
        load_partitions(warehouse, s3_resource, target, files)
    assert calls[0] == after + 1
    # the partitions before the crash point were in the same transaction: rolled back too
    assert rows_of(pg_url, target) == [] and ledger_entries(pg_url, target) == []
    retry = load_partitions(warehouse, s3_resource, target, files)
    assert sum(len(r.files_loaded) for r in retry.values()) == 11
    assert pg(pg_url, f'SELECT count(*), count(DISTINCT id) FROM "{target.schema}".orders') \
        == [(60, 60)]
    assert len(ledger_entries(pg_url, target)) == 11


def test_a_crash_at_a_checkpoint_of_a_later_partition_rolls_back_the_earlier_ones(
        warehouse, s3_resource, s3_client, bucket, pg_url):
    target = fresh_target()
    files = scattered(s3_client, bucket, target)
    seen: list[str] = []

    def crash(name: str) -> None:
        seen.append(name)
        if name == "before_commit":
            raise Crash(name)

    with pytest.raises(Crash):
        load_partitions(warehouse, s3_resource, target, files, checkpoint=crash)
    # per partition the load's checkpoints, then one before_commit
    assert seen == ["after_ledger", "after_copy", "after_merge"] * 6 + ["before_commit"]
    assert rows_of(pg_url, target) == [] and ledger_entries(pg_url, target) == []


def test_load_batches_bound_a_transaction():
    class F:
        def __init__(self, rows: int) -> None:
            self.rows = rows

    files = {f"d{i}": [F(10)] * 3 for i in range(4)}
    assert load_batches(list(files), files) == [files]
    import s3rs_assets.load_stage as ls

    old = ls.LOAD_BATCH_FILES
    try:
        ls.LOAD_BATCH_FILES = 5
        got = load_batches(list(files), files)
    finally:
        ls.LOAD_BATCH_FILES = old
    assert [list(b) for b in got] == [["d0"], ["d1"], ["d2"], ["d3"]]
    big = {"a": [F(3_000_000)], "b": [F(1)], "c": []}
    assert [list(b) for b in load_batches(["a", "b", "c"], big)] == [["a"], ["b", "c"]]
