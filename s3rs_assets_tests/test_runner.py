"""Planning a sync (work.py): runs follow the partitions that hold rows, not the calendar.

Real MariaDB tables and the moto S3 server; no Spark and no Dagster run: `prepare` only
probes MySQL and writes the watermark's closed ranges.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from s3rs_assets import work
from s3rs_assets.io_manager import store_for
from s3rs_assets.partitions import partitions_def, windows
from s3rs_assets.resources import MySQLResource
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets.watermark import FileEntry, PartitionState, Position, WatermarkRecord
from s3rs_assets_tests.helpers import make_ties_table, table_cfg

NOW = TODAY = RECENT = datetime.min  # set per test by _clock


@pytest.fixture(autouse=True)
def _clock() -> None:
    """Today per test, not per import: a suite crossing midnight runs a test collected the
    day before (autouse: set before `sparse` and the other fixtures use it)."""
    global NOW, TODAY, RECENT
    NOW = datetime.now().replace(microsecond=0)
    TODAY = NOW.replace(hour=0, minute=0, second=0)
    RECENT = TODAY + (NOW - TODAY) / 2  # today's, in the past, even in the first hour of a day


def day(n: int) -> datetime:
    return TODAY - timedelta(days=n)


@pytest.fixture
def sparse(mysql_conn, mysql_db):
    """Three years of daily partitions; rows on three old days and today."""
    rows = [(1, day(1000) + timedelta(hours=1)), (2, day(999) + timedelta(hours=2)),
            (3, day(400) + timedelta(hours=3)), (4, RECENT)]
    make_ties_table(mysql_conn, "plan_sparse", rows)
    return table_cfg(mysql_db, "plan_sparse", start=f"{day(1100):%Y-%m-%d}", lag="0s")


def key(d: datetime) -> str:
    return f"{d:%Y-%m-%d}"


def test_runs_cover_the_days_with_rows_and_empty_stretches_close_without_one(
    sparse, mysql_url, pg_url, s3_resource
):
    store = store_for(s3_resource)
    mysql = MySQLResource(url=mysql_url)
    wh = WarehouseResource(url=pg_url)
    prepared = work.prepare(sparse, mysql, wh, s3_resource, store, ("backup", "load"))
    # two adjacent old days are one range, the lonely day another, today a third: three
    # range runs, so one catch-up run over the four days with rows instead (catchup.py)
    days = [key(day(n)) for n in (1000, 999, 400, 0)]
    [plan] = prepared.plans
    assert plan.catchup and plan.backup_keys == tuple(days) and not plan.load_keys
    assert (plan.start, plan.end, plan.stages) == (days[0], days[-1], ("backup", "load"))
    rec = store.read(sparse.name, fresh=True)
    ranges = work.plan_work(sparse, rec, ("backup", "load"), days, [], catchup=False)
    assert [(p.start, p.end) for p in ranges] == [
        (key(day(1000)), key(day(999))),
        (key(day(400)), key(day(400))),
        (key(day(0)), key(day(0))),
    ]
    # a handful of probes for 1,100 days; the empty days are closed ranges, one write
    assert prepared.probes <= 8
    rec = store.read(sparse.name, fresh=True)
    pdef = partitions_def(sparse)
    empty = [w for w in windows(pdef) if w[0] not in {key(day(n)) for n in (1000, 999, 400, 0)}]
    assert prepared.closed == len(empty) and all(rec.is_complete(*w) for w in empty)
    assert len(rec.closed) == 3 and not rec.partitions
    mysql.teardown_after_execution(None)


def test_a_table_with_nothing_new_gets_no_run(sparse, mysql_url, pg_url, s3_resource,
                                              mysql_conn):
    store = store_for(s3_resource)
    pdef = partitions_def(sparse)
    with mysql_conn.cursor() as cur:
        cur.execute("SELECT MAX(update_at), MAX(id) FROM plan_sparse")
        newest, top = cur.fetchone()

    def synced(rec: WatermarkRecord) -> None:
        """Every old day closed; today read up to its newest row, nothing arrived since."""
        for k, s, e in windows(pdef)[:-1]:
            rec.close_empty(k, s, e)
        rec.partitions[key(day(0))] = PartitionState(
            window_start=TODAY, window_end=TODAY + timedelta(days=1),
            cursor=Position(c=newest, pk=[top]))

    store.update(sparse.name, synced)
    mysql = MySQLResource(url=mysql_url)
    wh = WarehouseResource(url=pg_url)
    prepared = work.prepare(sparse, mysql, wh, s3_resource, store, ("backup", "load"))
    assert prepared.plans == [] and prepared.closed == 0
    mysql.teardown_after_execution(None)


def _files(n: int) -> list[FileEntry]:
    return [FileEntry(key=f"k{n}", rows=1, bytes=1, md5="0" * 32)]


def test_load_backlog_and_backup_work_plan_separately(sparse):
    """Load-only runs for partitions with unloaded files the backup does not touch; a
    backup range never joins across a complete partition holding rows (it would be read
    again)."""
    pdef = partitions_def(sparse)
    all_w = windows(pdef)
    rec = WatermarkRecord.new(sparse.name)
    for k, s, e in all_w[:-1]:
        rec.close_empty(k, s, e)
    for n, (k, s, e) in ((n, all_w[n]) for n in (10, 20, 30)):
        rec.reopen(s, e)
        rec.partitions[k] = PartitionState(window_start=s, window_end=e, status="complete",
                                           files=_files(n))
    loaded = {("k20", "0" * 32)}
    load_work = list(work.unloaded(rec, loaded))
    plans = work.plan_work(sparse, rec, ("backup", "load"), [all_w[5][0], all_w[40][0]],
                           load_work, catchup=False)
    assert [(p.stages, p.start, p.end) for p in plans] == [
        (("backup", "load"), all_w[5][0], all_w[5][0]),   # 10 holds rows: not joined
        (("load",), all_w[10][0], all_w[30][0]),          # 10 and 30 unloaded; one run
        (("backup", "load"), all_w[40][0], all_w[40][0]),
    ]
    # three range runs: one catch-up run instead, over the partitions with work only
    [plan] = work.plan_work(sparse, rec, ("backup", "load"), [all_w[5][0], all_w[40][0]],
                            load_work)
    assert plan.backup_keys == (all_w[5][0], all_w[40][0])
    assert plan.load_keys == (all_w[10][0], all_w[30][0])
    # across closed (empty) days only, close work joins into one run
    plans = work.plan_work(sparse, rec, ("backup",), [all_w[31][0], all_w[40][0]], [])
    assert [(p.start, p.end) for p in plans] == [(all_w[31][0], all_w[40][0])]


def test_catchup_plans_follow_the_stages(sparse):
    """--redshift-only: scattered unloaded partitions are one catch-up load; --backup-only
    keeps its range runs (the catch-up job always loads what it backs up)."""
    all_w = windows(partitions_def(sparse))
    rec = WatermarkRecord.new(sparse.name)
    far = [all_w[n][0] for n in (10, 200, 900)]
    [plan] = work.plan_work(sparse, rec, ("load",), [], far)
    assert plan.catchup and plan.load_keys == tuple(far) and not plan.backup_keys
    assert plan.stages == ("load",)
    plans = work.plan_work(sparse, rec, ("backup",), far, [])
    assert len(plans) == 3 and not any(p.catchup for p in plans)
    # work that fits one range run stays one
    [plan] = work.plan_work(sparse, rec, ("load",), [], [all_w[10][0], all_w[12][0]])
    assert not plan.catchup and (plan.start, plan.end) == (all_w[10][0], all_w[12][0])
