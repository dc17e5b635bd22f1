"""Sensor ticks over many tables cost queries per schema, not per table (issue 18, item 3).

Real MariaDB tables in two schemas, a moto S3 server, a real Dagster instance. MySQL
queries are counted at pymysql's `Cursor.execute` and S3 requests at botocore's
`_make_api_call`: count, don't time.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

import botocore.client
import dagster as dg
import pymysql
import pytest

from s3rs_assets.io_manager import store_for
from s3rs_assets.names import NEW_DATA, TABLE_TAG, WATERMARK_GUARD, asset_key
from s3rs_assets.watermark import Position
from s3rs_assets_tests.conftest import _mysql_root
from s3rs_assets_tests.helpers import insert_rows, make_ties_table, table_cfg, ties
from s3rs_assets_tests.test_sensors import Sensors, res_for, restoring_tick, write_record

D = datetime(2025, 3, 4)


class Calls:
    """MySQL statements, S3 requests and event-log searches (materializations fetched)
    made while `counting` (any connection, any client, any instance)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.on = False
        self.sql: list[str] = []
        self.s3: Counter[str] = Counter()
        self.searches = 0
        execute = pymysql.cursors.Cursor.execute
        api_call = botocore.client.BaseClient._make_api_call
        fetch = dg.DagsterInstance.fetch_materializations

        def counted_fetch(instance, *args, **kwargs):
            if self.on:
                self.searches += 1
            return fetch(instance, *args, **kwargs)

        def counted_execute(cur, query, args=None):
            if self.on:
                self.sql.append(query)
            return execute(cur, query, args)

        def counted_call(client, operation, params):
            if self.on:
                self.s3[operation] += 1
            return api_call(client, operation, params)

        monkeypatch.setattr(pymysql.cursors.Cursor, "execute", counted_execute)
        monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counted_call)
        monkeypatch.setattr(dg.DagsterInstance, "fetch_materializations", counted_fetch)

    def run(self, fn):
        self.sql, self.s3, self.searches, self.on = [], Counter(), 0, True
        try:
            return fn()
        finally:
            self.on = False


@pytest.fixture
def second_schema(mysql_db: str) -> Iterator[str]:
    name = f"{mysql_db}_b"
    with _mysql_root() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")
    yield name
    with _mysql_root() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def make_fleet(schemas: list[str], n: int, store) -> list:
    """`n` tables over `schemas`, each synced up to its last row (a partial 2025-03-04),
    and one empty, never-synced table per schema."""
    tag = uuid.uuid4().hex[:4]
    cfgs = []
    for i in range(n):
        schema = schemas[i % len(schemas)]
        with _mysql_root(schema) as conn:
            name = f"fl_{tag}_{i}"
            make_ties_table(conn, name, ties(6, D, 2))
            cfg = table_cfg(schema, name, start="2025-03-04")
            write_record(store, cfg, conn, partial=["2025-03-04"])
        cfgs.append(cfg)
    for schema in schemas:
        with _mysql_root(schema) as conn:
            make_ties_table(conn, f"fl_{tag}_empty", [])
        cfgs.append(table_cfg(schema, f"fl_{tag}_empty", start="2025-03-04"))
    return cfgs


def steady_tick(calls: Calls, cfgs, mysql_url, s3_resource) -> tuple[list[str], Counter]:
    with dg.instance_for_test() as instance:
        s = Sensors(cfgs, instance, res_for(mysql_url, s3_resource))
        first = calls.run(lambda: s.tick(NEW_DATA))
        assert not first.run_requests, first.skip_message
        # records are read once per table on the first tick, and only for tables with rows
        assert calls.s3["GetObject"] == len(cfgs) - 2
        tick = calls.run(lambda: s.tick(NEW_DATA))
        assert not tick.run_requests
        assert "[2 empty below the bound]" in tick.skip_message
        return calls.sql, calls.s3


def test_a_tick_costs_the_same_for_5_and_40_tables(
    monkeypatch, mysql_db, second_schema, mysql_url, s3_resource
):
    calls = Calls(monkeypatch)
    store = store_for(s3_resource)
    schemas = [mysql_db, second_schema]
    small_sql, small_s3 = steady_tick(calls, make_fleet(schemas, 5, store), mysql_url, s3_resource)
    big_sql, big_s3 = steady_tick(calls, make_fleet(schemas, 40, store), mysql_url, s3_resource)

    assert len(big_sql) == len(small_sql), (small_sql, big_sql)
    # catalog 2 + newest 1 + regions 1 per schema, and the safety bound's clock and blockers
    assert len(big_sql) <= 4 * len(schemas) + 4
    # unchanged records are known by their ETag: one LIST, no GET
    assert big_s3 == small_s3 == Counter({"ListObjectsV2": 1})


def test_one_changed_table_among_many_is_the_one_requested(
    monkeypatch, mysql_db, second_schema, mysql_url, s3_resource
):
    calls = Calls(monkeypatch)
    store = store_for(s3_resource)
    cfgs = make_fleet([mysql_db, second_schema], 30, store)
    changed = cfgs[17]
    with dg.instance_for_test() as instance:
        s = Sensors(cfgs, instance, res_for(mysql_url, s3_resource))
        s.tick(NEW_DATA)
        quiet = calls.run(lambda: s.tick(NEW_DATA))
        baseline = len(calls.sql)
        assert not quiet.run_requests
        with _mysql_root(changed.schema) as conn:
            insert_rows(conn, changed.table, [(900, D + timedelta(hours=20))])

        tick = calls.run(lambda: s.tick(NEW_DATA))

        (req,) = tick.run_requests
        assert req.tags[TABLE_TAG] == changed.name
        assert req.run_key.startswith(f"{changed.name}:2025-03-04:")
        # the changed table's own probes (first row, newest row) on top of the quiet tick
        assert len(calls.sql) <= baseline + 3


def test_guard_reads_every_record_once(
    monkeypatch, mysql_db, second_schema, mysql_url, s3_resource
):
    calls = Calls(monkeypatch)
    store = store_for(s3_resource)
    cfgs = make_fleet([mysql_db, second_schema], 20, store)
    with dg.instance_for_test() as instance:
        s = Sensors(cfgs, instance, res_for(mysql_url, s3_resource))
        tick = calls.run(lambda: s.tick(WATERMARK_GUARD))
        assert "20 valid, 2 never synced" in tick.skip_message
        # never-synced tables cost no request of their own: the primaries and the (daily
        # and session) copies are each listed once for the whole fleet
        assert calls.s3["GetObject"] == 20
        assert calls.s3["ListObjectsV2"] == 2
        # nor an event-log search: the event log's asset index answered for all at once
        assert calls.searches == 0

        # the next tick: the primaries validated by their ETag are not read again
        again = calls.run(lambda: s.tick(WATERMARK_GUARD))
        assert "20 valid, 2 never synced" in again.skip_message
        assert calls.s3["GetObject"] == 0 and calls.s3["ListObjectsV2"] == 2

        # a deleted primary is not listed, but its copies are: recovered from one
        lost = cfgs[3]
        primary = store.layout.watermark_primary(lost.name)
        store.client.delete_object(Bucket=store.bucket, Key=primary)
        message, _ = restoring_tick(s, asset_key(lost, "s3_parquet"))
        assert f"RECOVERED {lost.name}" in message and "19 valid, 2 never synced" in message
        assert store.read(lost.name, fresh=True) is not None

        # a primary damaged between ticks has another ETag: read, and restored
        broken = cfgs[7]
        key = store.layout.watermark_primary(broken.name)
        store.client.put_object(Bucket=store.bucket, Key=key, Body=b'{"not": "a record"}')
        message, _ = restoring_tick(s, asset_key(broken, "s3_parquet"))
        assert f"RECOVERED {broken.name}" in message and "19 valid" in message
        assert store.read(broken.name, fresh=True) is not None


def never_synced_tick(calls: Calls, schemas, n: int, mysql_url, s3_resource):
    """A tick over `n` never-synced tables with rows (and one synced, quiet table per
    schema): its MySQL statements, and the run requests by table."""
    store = store_for(s3_resource)
    cfgs = make_fleet(schemas, len(schemas), store)  # synced and quiet, plus the empty ones
    tag = uuid.uuid4().hex[:4]
    for i in range(n):
        schema = schemas[i % len(schemas)]
        with _mysql_root(schema) as conn:
            name = f"nv_{tag}_{i}"
            # the rows of table i: two on 2025-03-04 (a tie), the newest on 2025-03-05
            make_ties_table(
                conn, name, ties(2, D, 1) + [(40 + i, D + timedelta(days=1, hours=i % 5))]
            )
        cfgs.append(table_cfg(schema, name, start="2025-03-04"))
    with dg.instance_for_test() as instance:
        s = Sensors(cfgs, instance, res_for(mysql_url, s3_resource))
        tick = calls.run(lambda: s.tick(NEW_DATA))
    # nor an event-log search of its own: the asset index answered for all of them at once
    assert calls.searches == 0
    return calls.sql, calls.s3, {r.tags[TABLE_TAG]: r for r in tick.run_requests}, cfgs[-n:]


def test_never_synced_tables_cost_no_statements_of_their_own(
    monkeypatch, mysql_db, second_schema, mysql_url, s3_resource
):
    """Issue 18: the first and newest rows of the tables with new rows are asked in one
    UNION ALL per schema and key shape, not two probes per table, and a table with no
    primary and no copy costs no S3 request (the copies are listed once for the fleet) and
    no event-log search (the asset index is asked once for the fleet);
    the requests are those the per-table probes (source.first_row, last_row) give."""
    from s3rs_assets.cursor import position_token
    from s3rs_assets.source import describe, first_row, last_row

    calls = Calls(monkeypatch)
    schemas = [mysql_db, second_schema]
    few_sql, few_s3, few, _ = never_synced_tick(calls, schemas, 2, mysql_url, s3_resource)
    many_sql, many_s3, many, cfgs = never_synced_tick(calls, schemas, 12, mysql_url, s3_resource)
    assert len(few) == 2 and len(many) == 12
    assert len(many_sql) == len(few_sql), (few_sql, many_sql)
    # the synced tables' records, one LIST of the primaries and one of every copy (daily
    # and session copies share one prefix: Copies.tables_with_copies)
    assert many_s3 == few_s3 == Counter({"GetObject": len(schemas), "ListObjectsV2": 2})
    for cfg in cfgs:
        req = many[cfg.name]
        with _mysql_root(cfg.schema) as conn:
            src = describe(conn, cfg)
            upper = datetime(2100, 1, 1)
            first = first_row(conn, src, Position(c=D, pk=None), upper)
            newest = last_row(conn, src, first.c, upper)
        assert first is not None and newest is not None
        assert position_token(first) in req.run_key and position_token(newest) in req.run_key
        assert req.run_key.startswith(f"{cfg.name}:2025-03-04..2025-03-05:")
