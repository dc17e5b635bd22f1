"""Issue 16's reproductions, each as the issue tells it, through the `s3rs` command run
in-process against the real MariaDB, PostgreSQL, moto S3, Spark and Dagster (compose.py).

Covered elsewhere, not repeated here:
* item 4 (a row repaired, deleted again, repaired again) and item 5 (reconcile --apply on a
  DATE cursor): `test_reconcile_regressions.py`;
* item 11 (the key hash's blind spot at 2^31-1 us): `test_reconcile_hash.py`;
* items 6, 7, 10 (zero-in-date cursors, typed keys, small DECIMALs): the `types` work;
* suspected (c), s3clean with the warehouse unreachable: refuted — there is no fallback to
  the record's list: `test_cli.py::test_s3clean_refuses_when_the_warehouse_is_down` (and
  `test_secrets.py`, `test_exit_codes.py`) show it exits 2 and deletes nothing;
* the planner's own decisions from the ledger: `test_load_ledger.py`.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal

import dagster as dg
import pytest

from s3rs_assets_tests import compose
from s3rs_assets_tests.cli_stack import ensure_definitions
from s3rs_assets_tests.compose import World, invoke, midnight
from s3rs_assets_tests.conftest import free_port

SET_T, TARGET_T, REMAT_T = "rg_set", "rg_target", "rg_remat"


@pytest.fixture(scope="session")
def cli_tables_file(tmp_path_factory, mysql_db):
    common = {"lag": "0s", "partition": "daily", "start": f"{midnight(3):%Y-%m-%d}"}
    return compose.tables_file(
        tmp_path_factory.mktemp("compose_rg"), mysql_db, start_days_ago=2,
        extra=[
            {"name": f"{mysql_db}.{SET_T}", "chunk_rows": 1000, **common},
            {"name": f"{mysql_db}.{TARGET_T}", "chunk_rows": 7, **common},
            {"name": f"{mysql_db}.{REMAT_T}", "chunk_rows": 4, **common},
        ],
    )


@pytest.fixture
def world(monkeypatch, mysql_db, mysql_url, pg_url, s3_client, tmp_path, cli_tables_file
          ) -> World:
    monkeypatch.setenv("S3RS_TABLES", str(cli_tables_file))
    monkeypatch.setenv("S3RS_S3_PREFIX", compose.PREFIX)
    monkeypatch.setenv("S3RS_MYSQL_URL", mysql_url)
    monkeypatch.setenv("S3RS_REDSHIFT_URL", pg_url)
    for var in ("S3RS_LOG_FORMAT", "S3RS_SSH_HOST", "S3RS_SOURCE_TIMEZONE"):
        monkeypatch.delenv(var, raising=False)
    ensure_definitions(cli_tables_file)
    return World(mysql_db, pg_url, s3_client, monkeypatch, tmp_path)


def table(world: World, name: str, rows: dict[int, compose.Row]) -> World:
    world.table = name
    world.fresh(rows)
    return world


def row(i: int, ts: datetime) -> compose.Row:
    return (ts, Decimal(f"{i}.2500"), f"row {i}")


def sync(w: World, *flags: str):
    return invoke("sync", "-t", w.name, "--no-progress", *flags)


# ------------------------------------------------------------------------------ item 1


def test_watermark_set_inside_a_file_loses_no_row(world):
    """One file of 24 rows, 10:00-13:59 of one day; `watermark set` to 12:00 of that day;
    sync: every row is in the warehouse (the file that straddles 12:00 is kept and loaded;
    its rows from 12:00 on are read again and merged by key), the next sync has nothing to
    do, and the straddling file is not an orphan `s3clean` may delete."""
    day = midnight(2)
    w = table(world, SET_T, {i: row(i, day + timedelta(hours=10, minutes=10 * i))
                             for i in range(24)})
    r = sync(w, "--backup-only")
    assert r.exit_code == 0, r.output
    (straddling,) = w.record().partitions[f"{day:%Y-%m-%d}"].files
    assert straddling.rows == 24

    r = invoke("watermark", "set", "-t", w.name, "--timestamp", f"{day:%Y-%m-%d} 12:00:00",
               "--yes")
    assert r.exit_code == 0, r.output
    r = sync(w)
    assert r.exit_code == 0, r.output
    assert w.warehouse_rows() == w.mysql_rows() and len(w.mysql_rows()) == 24

    again = sync(w)
    assert again.exit_code == 0 and "nothing new" in again.output, again.output
    listed = json.loads(invoke("s3clean", "list", "-t", w.name, "--json").stdout)
    state = {f["key"]: f["state"] for f in listed["files"]}
    assert state[straddling.key] == "loaded"
    assert "orphan" not in {state[f.key] for p in w.record().partitions.values()
                            for f in p.files}


# ------------------------------------------------------------------------------ item 2


def _thirty(world: World) -> World:
    return table(world, TARGET_T, {i: row(i, midnight(1 + i % 2) + timedelta(hours=i % 5))
                                   for i in range(1, 31)})


@pytest.mark.parametrize("damage", ["TRUNCATE {t}", "DROP TABLE {t}"])
@pytest.mark.parametrize("flags", [(), ("--redshift-only",)])
def test_an_emptied_or_dropped_target_is_not_in_sync(world, damage, flags):
    """After TRUNCATE or DROP of the target neither `sync` nor `sync --redshift-only` says
    "nothing to do": the planner asks the warehouse and reloads every file, at once."""
    w = _thirty(world)
    assert sync(w).exit_code == 0
    w.target_sql(damage)
    r = sync(w, *flags)
    assert r.exit_code == 0, r.output
    assert "nothing" not in r.output.split("\n")[0], r.output
    assert w.warehouse_rows() == w.mysql_rows() and len(w.mysql_rows()) == 30


def _backup_only_reads_every_row(w: World) -> None:
    """`sync --backup-only` exits 0 with every MySQL row in a manifest file S3 holds."""
    r = sync(w, "--backup-only")
    assert r.exit_code == 0, r.output
    there = w.objects()
    keys = [f.key for p in w.record().partitions.values() for f in p.files
            if there.get(f.key) == f.md5]
    assert {i for i, _ in w.file_rows(keys)} == set(w.mysql_rows()), r.output


def test_files_of_an_emptied_target_deleted_by_force_are_read_again_by_a_backup(world):
    """Found by the state machine (stop 25): sync, TRUNCATE the target, `s3clean --force`
    (the ledger calls every file unloaded: all deleted), then `sync --backup-only`, which
    asks no warehouse and whose record still called the files loaded: it read nothing, and
    the rows were neither in S3 nor in the warehouse until the next full sync. Now the
    forced delete drops those partitions from the record at once: the backup-only sync
    reads them again, and the full sync after it loads every row."""
    w = _thirty(world)
    assert sync(w).exit_code == 0
    w.target_sql("TRUNCATE {t}")
    r = invoke("s3clean", "clean", "-t", w.name, "--force")
    assert r.exit_code == 0, r.output
    assert not w.objects()
    _backup_only_reads_every_row(w)
    assert sync(w).exit_code == 0
    assert w.warehouse_rows() == w.mysql_rows() and len(w.mysql_rows()) == 30


def test_a_recreated_target_s_deleted_files_are_read_again_by_a_backup(world, monkeypatch):
    """Found by the state machine (stop 27, example 49): every file loaded, `s3clean
    --force` deletes them (the ledger had them: safe then), then the target is dropped and
    re-created empty. `sync --backup-only` took the record's load mirror (every file
    loaded) for the truth and read nothing: the rows were in neither S3 nor the warehouse.
    It now asks the ledger when there is a warehouse; with the warehouse unreachable it
    still backs up (the mirror stands in) and exits 0."""
    w = _thirty(world)
    assert sync(w).exit_code == 0
    r = invoke("s3clean", "clean", "-t", w.name, "--force")
    assert r.exit_code == 0, r.output
    assert not w.objects()
    w.drop_target()
    w.target_sql("CREATE TABLE {t} (id BIGINT PRIMARY KEY)")  # a restore's empty table
    with monkeypatch.context() as m:  # the warehouse down: nothing to learn, backup goes on
        m.setenv("S3RS_REDSHIFT_URL", f"postgresql://postgres:@127.0.0.1:{free_port()}/{w.db}")
        r = sync(w, "--backup-only")
        assert r.exit_code == 0, r.output
        assert not w.objects(), "the mirror says loaded: nothing read without the ledger"
    _backup_only_reads_every_row(w)
    w.drop_target()
    assert sync(w).exit_code == 0
    assert w.warehouse_rows() == w.mysql_rows() and len(w.mysql_rows()) == 30


# ------------------------------------------------------------------------------ item 3


def test_rows_deleted_in_mysql_stay_deleted(world):
    """Every row deleted in MySQL, `reconcile --apply` deletes them in the warehouse; one
    new row synced: the warehouse s3rs emptied itself is not taken for a truncated one, so
    the old files are not loaded again (warehouse 1 row, MySQL 1), now or at the next sync."""
    w = _thirty(world)
    assert sync(w).exit_code == 0
    w.delete(list(w.mysql_rows()))
    r = invoke("reconcile", "-t", w.name, "--apply")
    assert r.exit_code == 0, r.output
    assert w.warehouse_rows() == {}
    w.put({99: row(99, w.mysql_now() - timedelta(milliseconds=1))})
    for _ in range(2):
        r = sync(w)
        assert r.exit_code == 0, r.output
        assert w.warehouse_rows() == w.mysql_rows() and list(w.mysql_rows()) == [99]


# ------------------------------------------------------------------------------ item 8


def _remat_world(world: World) -> World:
    """Three days of 10 rows (ties, chunks of 4), synced."""
    w = table(world, REMAT_T, {i: row(i, midnight(3 - i % 3) + timedelta(hours=i % 2))
                               for i in range(1, 31)})
    r = sync(w)
    assert r.exit_code == 0, r.output
    return w


def _assert_counters_match(w: World) -> None:
    rec = w.record()
    files = [f for p in rec.partitions.values() for f in p.files]
    n = len(w.mysql_rows())
    assert rec.mysql_rows_extracted == sum(f.rows for f in files) == n
    assert rec.redshift_rows_loaded == n and rec.s3_file_count == len(files)
    assert {(f.key, f.md5) for f in files} <= w.ledger()
    assert w.warehouse_rows() == w.mysql_rows()


def test_rematerializing_old_partitions_replaces_their_files_and_counts(world):
    """The UI's Materialize of one old partition, then a backfill of three: the record's
    counters stay those of the rows the warehouse holds, each file counted once."""
    from s3rs_assets.definitions import sync_job
    from s3rs_assets.names import RANGE_END_TAG, RANGE_START_TAG

    w = _remat_world(world)
    _assert_counters_match(w)
    with dg.DagsterInstance.get() as instance:
        one = sync_job(w.name).execute_in_process(partition_key=f"{midnight(2):%Y-%m-%d}",
                                                  instance=instance)
        assert one.success
        _assert_counters_match(w)
        three = sync_job(w.name).execute_in_process(
            instance=instance,
            tags={RANGE_START_TAG: f"{midnight(3):%Y-%m-%d}",
                  RANGE_END_TAG: f"{midnight(1):%Y-%m-%d}"},
        )
        assert three.success
        _assert_counters_match(w)


def test_reconcile_without_apply_writes_nothing(world):
    """`s3rs reconcile` only reads: the primary record and its copies are untouched, so
    `watermark backup-status` does not show the copies older than the primary."""
    w = _remat_world(world)
    before = {k: v for k, v in _listing(w).items()}
    r = invoke("reconcile", "-t", w.name)
    assert r.exit_code == 0, r.output
    assert _listing(w) == before
    w.target_sql("DELETE FROM {t} WHERE id = 4")
    r = invoke("reconcile", "-t", w.name)
    assert r.exit_code == 1, r.output  # a difference, reported
    assert _listing(w) == before


def _listing(w: World) -> dict[str, str]:
    out = {}
    for page in w.s3.get_paginator("list_objects_v2").paginate(Bucket=w.bucket):
        out.update({o["Key"]: o["ETag"] for o in page.get("Contents", [])})
    return out


# ------------------------------------------------------------------------------ item 9


def test_redshift_only_with_a_refused_login_exits_2(world, monkeypatch):
    """A warehouse that refuses the login (unknown role) is a connection error: exit 2 with
    the reason, never "nothing to load" and 0."""
    w = _thirty(world)
    assert sync(w, "--backup-only").exit_code == 0
    before = _listing(w)
    for url in (f"postgresql://no_such_role_s3rs:pw@127.0.0.1:5432/{w.db}",
                f"postgresql://postgres:@127.0.0.1:{free_port()}/{w.db}"):
        monkeypatch.setenv("S3RS_REDSHIFT_URL", url)
        r = sync(w, "--redshift-only")
        assert r.exit_code == 2, r.output
        assert "cannot connect to the warehouse" in r.output, r.output
        assert "nothing to load" not in r.output and "pw@" not in r.output
        assert _listing(w) == before


# ------------------------------------------------------------------------ suspected (b)


def test_limit_gives_partitions_it_never_reached_no_complete_metadata(world):
    """`sync --limit 5` over three partitions of 10 rows: the partitions the run did not
    reach are materialized as "not reached", never as complete with 0 rows."""
    from s3rs_assets.config import load_tables
    from s3rs_assets.names import asset_key, metadata_facts
    from s3rs_assets.stage_results import NOT_REACHED

    w = table(world, REMAT_T, {i: row(i, midnight(3 - i % 3) + timedelta(hours=i % 2))
                               for i in range(1, 31)})
    r = sync(w, "--backup-only", "--limit", "5")
    assert r.exit_code == 0, r.output
    rec = w.record()
    cfg = next(t for t in load_tables() if t.name == w.name)
    with dg.DagsterInstance.get() as instance:
        for days in (3, 2, 1):
            key = f"{midnight(days):%Y-%m-%d}"
            (ev,) = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset_key(cfg, "s3_parquet"),
                                      asset_partitions=[key]), limit=1).records
            md = ev.asset_materialization.metadata
            state = rec.partitions.get(key)
            if state is None or not state.files:
                assert md["status"].value == NOT_REACHED, (key, md)
                assert "rows" not in md
            else:
                assert metadata_facts(md)["rows"] == sum(f.rows for f in state.files)


# ------------------------------------------------------------------------ suspected (a)


def test_new_data_sensor_retries_after_a_failed_run(mysql_db, mysql_url, mysql_conn,
                                                    s3_resource):
    """After a failed run MySQL and the watermark are as they were, so the sensor finds the
    same rows again; Dagster launches a run key once (a run with that key exists, failed or
    not), so the request must carry a new key — a bounded number of times — or nothing
    retries until new rows arrive."""
    import uuid

    from s3rs_assets.io_manager import store_for
    from s3rs_assets.names import NEW_DATA
    from s3rs_assets.sensors.new_data import RETRIES_AFTER_FAILURE
    from s3rs_assets_tests.helpers import insert_rows, make_ties_table, table_cfg, ties
    from s3rs_assets_tests.test_sensors import D, Sensors, res_for, write_record

    name = f"rg_sensor_{uuid.uuid4().hex[:6]}"
    make_ties_table(mysql_conn, name, ties(30, D, 3) + ties(12, D + timedelta(days=1), 2, 101))
    cfg = table_cfg(mysql_db, name, lag="1h")
    write_record(store_for(s3_resource), cfg, mysql_conn, complete=["2025-03-04"])
    with dg.instance_for_test() as instance:
        s = Sensors([cfg], instance, res_for(mysql_url, s3_resource))
        keys = []
        for _ in range(RETRIES_AFTER_FAILURE + 1):
            (req,) = s.tick(NEW_DATA).run_requests
            assert req.run_key not in keys  # a key Dagster would launch
            keys.append(req.run_key)
            instance.add_run(dg.DagsterRun(  # as the daemon records the run, then it fails
                job_name=req.job_name, status=dg.DagsterRunStatus.FAILURE,
                tags={"dagster/run_key": req.run_key, "dagster/sensor_name": NEW_DATA}))
        # bounded: after so many failures it waits for new rows (or a person)
        gave_up = s.tick(NEW_DATA)
        assert not gave_up.run_requests
        assert f"{RETRIES_AFTER_FAILURE + 1} failed run(s)" in gave_up.skip_message
        assert keys[1:] == [f"{keys[0]}:retry-{n}" for n in range(1, len(keys))]
        # new rows: a new key, tried afresh
        insert_rows(mysql_conn, name, [(9000, D + timedelta(days=1, hours=5))])
        (req,) = s.tick(NEW_DATA).run_requests
        assert req.run_key not in keys and ":retry-" not in req.run_key
