"""Stage 1 end to end on real MariaDB, moto S3, Spark and Dagster: nothing lost, nothing twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta

import dagster as dg
import pytest

from s3rs_assets.io_manager import store_for
from s3rs_assets.names import metadata_facts
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT, REPO
from s3rs_assets_tests.helpers import (
    backup,
    insert_rows,
    list_keys,
    make_ties_table,
    manifest_keys,
    mysql_ids,
    read_manifest_ids,
    read_parquet,
    resources,
    table_cfg,
    ties,
)

D = datetime(2025, 3, 4)


@pytest.fixture(scope="module")
def ties_tables(mysql_db):
    import pymysql

    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True)
    # 10,000 rows on 5 timestamps on day D, 40 rows on 3 timestamps on day D+1
    make_ties_table(
        conn, "ext_ties", ties(10_000, D, 5) + ties(40, D + timedelta(days=1), 3, 20_001)
    )
    yield conn
    conn.close()


def _check_partition(conn, store, s3_client, bucket, cfg, partition, where):
    keys = manifest_keys(store, cfg.name, partition)
    assert len(keys) == len(set(keys))
    ids = read_manifest_ids(s3_client, bucket, keys)
    assert len(ids) == len(set(ids)), "no primary key twice in the manifest"
    assert sorted(ids) == mysql_ids(conn, cfg.table, where)
    rec = store.read(cfg.name)
    assert rec.partitions[partition].status == "complete"
    assert rec.partitions[partition].rows == len(ids)
    return keys


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_small_partition_any_chunk(
    ties_tables, mysql_db, mysql_url, s3_resource, s3_client, spark_resource, chunk
):
    cfg = table_cfg(mysql_db, "ext_ties", chunk_rows=chunk, parallelism=2)
    res = resources(mysql_url, s3_resource, spark_resource)
    backup(cfg, res, partition="2025-03-05")
    store = store_for(s3_resource)
    _check_partition(
        ties_tables, store, s3_client, s3_resource.bucket, cfg, "2025-03-05", "id > 20000"
    )


@pytest.mark.parametrize(("chunk", "parallelism"), [(1000, 2), (3333, 3)])
def test_ten_thousand_rows_on_five_timestamps(
    ties_tables, mysql_db, mysql_url, s3_resource, s3_client, spark_resource, chunk, parallelism
):
    cfg = table_cfg(mysql_db, "ext_ties", chunk_rows=chunk, parallelism=parallelism)
    result = backup(cfg, resources(mysql_url, s3_resource, spark_resource), partition="2025-03-04")
    store = store_for(s3_resource)
    keys = _check_partition(
        ties_tables, store, s3_client, s3_resource.bucket, cfg, "2025-03-04", "id <= 20000"
    )
    # what was written is exactly what the manifest lists: no stray or duplicate object
    prefix = s3_resource.key("data", mysql_db, "ext_ties", "2025-03-04")
    assert sorted(list_keys(s3_client, s3_resource.bucket, prefix)) == sorted(keys)
    md = metadata_facts(
        result.asset_materializations_for_node(f"{mysql_db}__ext_ties__s3_parquet")[0].metadata
    )
    assert md["rows"] == 10_000
    assert md["files"] == len(keys)
    assert md["status"] == "complete"
    rec = store.read(cfg.name)
    assert rec.mysql_rows_extracted == 10_000 and rec.s3_file_count == len(keys)
    assert rec.mysql_status == "success"


def test_range_run_and_recompute(
    ties_tables, mysql_db, mysql_url, s3_resource, s3_client, spark_resource
):
    """One run over a range; re-materializing a complete partition reads its window again."""
    cfg = table_cfg(mysql_db, "ext_ties", chunk_rows=4000)
    res = resources(mysql_url, s3_resource, spark_resource)
    with dg.instance_for_test() as instance:
        backup(cfg, res, start="2025-03-03", end="2025-03-05", instance=instance)
        store = store_for(s3_resource)
        rec = store.read(cfg.name)
        assert {k: p.status for k, p in rec.partitions.items()} == {
            "2025-03-04": "complete",
            "2025-03-05": "complete",
        }
        # the empty day is a closed range, not an entry
        assert [(r.start, r.end) for r in rec.closed] == [(datetime(2025, 3, 3),
                                                           datetime(2025, 3, 4))]
        assert rec.is_complete("2025-03-03", datetime(2025, 3, 3), datetime(2025, 3, 4))
        assert rec.mysql_rows_extracted == 10_040
        mats = instance.get_materialized_partitions(
            dg.AssetKey([mysql_db, "ext_ties", "s3_parquet"])
        )
        assert mats == {"2025-03-03", "2025-03-04", "2025-03-05"}
        # a row of D changes; the complete partition is recomputed, not appended to
        with ties_tables.cursor() as cur:
            cur.execute("UPDATE ext_ties SET amount = 1.5 WHERE id = 20001")
        backup(cfg, res, partition="2025-03-05", instance=instance)
        rec2 = store.read(cfg.name, fresh=True)  # written by the second run
        assert rec2.partitions["2025-03-05"].recomputes == 1
        keys = manifest_keys(store, cfg.name, "2025-03-05")
        table = read_parquet(s3_client, s3_resource.bucket, keys)
        assert sorted(table.column("id").to_pylist()) == list(range(20_001, 20_041))
        amounts = dict(
            zip(table.column("id").to_pylist(), table.column("amount").to_pylist(), strict=True)
        )
        assert str(amounts[20001]) == "1.5000"
        assert rec2.mysql_rows_extracted == 10_040


def test_limit_stops_early_and_resumes(
    ties_tables, mysql_db, mysql_url, s3_resource, s3_client, spark_resource
):
    cfg = table_cfg(mysql_db, "ext_ties", chunk_rows=1500)
    res = resources(mysql_url, s3_resource, spark_resource)
    backup(cfg, res, start="2025-03-04", end="2025-03-05", limit=2000)
    store = store_for(s3_resource)
    rec = store.read(cfg.name)
    assert rec.partitions["2025-03-04"].status == "partial"
    assert rec.partitions["2025-03-04"].rows == 2000
    assert "2025-03-05" not in rec.partitions
    backup(cfg, res, start="2025-03-04", end="2025-03-05")
    _check_partition(
        ties_tables, store, s3_client, s3_resource.bucket, cfg, "2025-03-04", "id <= 20000"
    )


KILL_SCRIPT = textwrap.dedent(
    """
    import sys
    from s3rs_assets.backup import run
    from s3rs_assets.resources import S3Resource, SparkResource, spark_defaults
    from s3rs_assets_tests.helpers import backup, resources, table_cfg
    run.LOG_EVERY = 0.0  # a log entry per checkpoint: the test kills at the third
    mysql_db, mysql_url, bucket = sys.argv[1:4]
    cfg = table_cfg(mysql_db, "ext_kill", chunk_rows=500, parallelism=2)
    spark = SparkResource(spark_config=spark_defaults("local[2]"))
    res = resources(mysql_url, S3Resource(bucket=bucket), spark)
    backup(cfg, res, partition="2025-03-04")
    """
)


def test_sigkill_after_k_chunks_then_rerun(
    ties_tables, mysql_db, mysql_url, s3_resource, s3_client, spark_resource, tmp_path
):
    """A run killed with SIGKILL after k checkpoints; the rerun loses and duplicates nothing."""
    make_ties_table(ties_tables, "ext_kill", ties(6000, D, 4))
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, str(script), mysql_db, mysql_url, s3_resource.bucket],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
        start_new_session=True,
    )
    killed_at = None
    deadline = time.monotonic() + 240
    for line in proc.stdout:
        if ": chunk 3 " in line:
            os.killpg(proc.pid, signal.SIGKILL)
            killed_at = line
            break
        assert time.monotonic() < deadline
    proc.wait(timeout=30)
    assert killed_at, "the run never reached its third chunk"
    assert proc.returncode == -signal.SIGKILL
    cfg = table_cfg(mysql_db, "ext_kill", chunk_rows=500, parallelism=2)
    store = store_for(s3_resource)
    before = store.read(cfg.name).partitions["2025-03-04"]
    assert before.status == "partial" and 1500 <= before.rows < 6000
    backup(cfg, resources(mysql_url, s3_resource, spark_resource), partition="2025-03-04")
    keys = _check_partition(
        ties_tables, store, s3_client, s3_resource.bucket, cfg, "2025-03-04", "1=1"
    )
    prefix = s3_resource.key("data", mysql_db, "ext_kill", "2025-03-04")
    assert sorted(list_keys(s3_client, s3_resource.bucket, prefix)) == sorted(keys), (
        "the chunk in flight was re-read into the same keys: no duplicate file"
    )


def _now(conn) -> datetime:
    with conn.cursor() as cur:
        cur.execute("SELECT NOW(6)")
        return cur.fetchone()[0]


def _day_range(cfg, first: datetime, last: datetime) -> tuple[str, str]:
    return f"{first:%Y-%m-%d}", f"{last:%Y-%m-%d}"


def test_rows_inserted_updated_and_hidden_by_the_bound(
    ties_tables, mysql_db, mysql_url, s3_resource, s3_client, spark_resource
):
    conn = ties_tables
    now = _now(conn)
    old = now - timedelta(hours=3)
    recent = now - timedelta(minutes=20)
    rows = [(i, old) for i in range(1, 301)] + [(i, recent) for i in range(301, 351)]
    make_ties_table(conn, "ext_incr", rows)
    res = resources(mysql_url, s3_resource, spark_resource)
    start, end = _day_range(None, old, now)
    # run 1: a 1-hour lag hides the 50 recent rows (the safety bound is on MySQL's clock)
    cfg_lag = table_cfg(mysql_db, "ext_incr", chunk_rows=120, lag="1h", start=f"{old:%Y-%m-%d}")
    backup(cfg_lag, res, start=start, end=end)
    store = store_for(s3_resource)
    got = read_manifest_ids(s3_client, s3_resource.bucket, manifest_keys(store, cfg_lag.name))
    assert sorted(got) == list(range(1, 301))
    # between runs: new rows, and an already-copied row updated
    insert_rows(conn, "ext_incr", [(i, now - timedelta(minutes=5)) for i in range(351, 361)])
    with conn.cursor() as cur:
        cur.execute(
            "UPDATE ext_incr SET amount = 7, update_at = %s WHERE id = 5",
            (now - timedelta(minutes=2),),
        )
    # run 2: time has passed beyond the bound (lag 0 now): every row arrives, none twice.
    # It asks for the partitions a sync would read on: from the recent rows' day. Before 03:00
    # `old` lies on the day before, and asking for that complete day again re-reads it by design
    # (a re-materialization replaces its files, so row 5's old version would leave with them).
    cfg = table_cfg(mysql_db, "ext_incr", chunk_rows=120, lag="0s", start=f"{old:%Y-%m-%d}")
    backup(cfg, res, start=f"{recent:%Y-%m-%d}", end=end)
    table = read_parquet(s3_client, s3_resource.bucket, manifest_keys(store, cfg.name))
    ids = table.column("id").to_pylist()
    assert sorted(set(ids)) == list(range(1, 361))
    assert ids.count(5) == 2, "the update is a new version of row 5; the old one stays too"
    newest = max((r for r in table.to_pylist() if r["id"] == 5), key=lambda r: r["update_at"])
    assert str(newest["amount"]) == "7.0000"
    assert len(ids) == 361


def test_open_transaction_holding_an_older_timestamp_is_not_skipped(
    ties_tables, mysql_db, mysql_url, s3_resource, s3_client, spark_resource
):
    import pymysql

    conn = ties_tables
    first_row = _now(conn) - timedelta(minutes=10)
    make_ties_table(conn, "ext_trx", [(1, first_row)])
    writer = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", database=mysql_db)
    try:
        with writer.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute("INSERT INTO ext_trx (id, update_at, amount) VALUES (2, NOW(6), 1)")
        time.sleep(1.2)
        insert_rows(conn, "ext_trx", [(3, _now(conn))])  # committed, later timestamp
        cfg = table_cfg(
            mysql_db,
            "ext_trx",
            chunk_rows=100,
            lag="0s",
            start=f"{first_row - timedelta(days=1):%Y-%m-%d}",
        )
        res = resources(mysql_url, s3_resource, spark_resource)
        # from row 1's own day: a later "now - 10 min" may lie after a midnight row 1 is before
        start, end = _day_range(cfg, first_row, _now(conn))
        result = backup(cfg, res, start=start, end=end)
        # the partition the bound cut carries it (across midnight the run has two)
        facts = [metadata_facts(e.materialization.metadata)
                 for e in result.get_asset_materialization_events()]
        bounds = [md["safety_bound"] for md in facts if "safety_bound" in md]
        assert bounds and bounds[-1]["oldest_open_write_trx"] is not None
        store = store_for(s3_resource)
        first = read_manifest_ids(s3_client, s3_resource.bucket, manifest_keys(store, cfg.name))
        assert first == [1], "row 3 is newer than the open transaction: not read yet"
        writer.commit()
    finally:
        writer.close()
    backup(cfg, res, start=start, end=end)
    ids = read_manifest_ids(s3_client, s3_resource.bucket, manifest_keys(store, cfg.name))
    assert sorted(ids) == [1, 2, 3]


def test_two_runs_of_one_partition_at_once(
    ties_tables, mysql_db, mysql_url, s3_resource, s3_client, spark_resource
):
    """Started together: each either merges with the other's identical progress or stops
    with a WatermarkConflict; progress is never lost or overwritten, no key twice."""
    import threading

    make_ties_table(ties_tables, "ext_race", ties(3000, D, 3))
    cfg = table_cfg(mysql_db, "ext_race", chunk_rows=400, parallelism=2)
    res = resources(mysql_url, s3_resource, spark_resource)
    results: list = []
    barrier = threading.Barrier(2)

    def run() -> None:
        barrier.wait()
        results.append(backup(cfg, res, partition="2025-03-04", raise_on_error=False))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(results) == 2 and any(r.success for r in results)
    for r in results:
        if not r.success:
            error = r.get_step_failure_events()[0].event_specific_data.error
            assert error.cause.cls_name == "WatermarkConflict"
    store = store_for(s3_resource)
    _check_partition(ties_tables, store, s3_client, s3_resource.bucket, cfg, "2025-03-04", "1=1")
