"""Both stages through Dagster: MySQL -> S3 -> PostgreSQL (the Redshift stand-in), exactly."""

from __future__ import annotations

from datetime import datetime, timedelta

import dagster as dg
import psycopg
import pymysql
import pytest

from s3rs_assets import demo_data, load_stage
from s3rs_assets.io_manager import store_for
from s3rs_assets.names import CHECK_NAME, metadata_facts
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import resources, sync, table_cfg

END = datetime(2025, 5, 2, 20, 0)
DAYS = ("2025-05-01", "2025-05-02")


@pytest.fixture(scope="module")
def demo(mysql_db):
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True,
                           charset="utf8mb4")
    demo_data.create_table(conn, mysql_db, "sync_demo", drop=True)
    demo_data.seed(conn, mysql_db, "sync_demo", 4000, end=END, span=timedelta(hours=30))
    yield conn
    conn.close()


def _pg_rows(pg_url: str, schema: str, table: str) -> dict[int, dict]:
    with psycopg.connect(pg_url.replace("postgresql://postgres:@", "postgresql://postgres@")) as c:
        cur = c.execute(f'SELECT * FROM "{schema}"."{table}" ORDER BY id')
        names = [d.name for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def _mysql_rows(conn, table: str) -> dict[int, dict]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT *, CAST(delivery_window AS CHAR) AS dw FROM `{table}` ORDER BY id")
        rows = cur.fetchall()
    out = {}
    for r in rows:
        r["delivery_window"] = r.pop("dw")
        r["is_paid"] = bool(r["is_paid"])
        out[r["id"]] = r
    return out


def _normalize_pg(row: dict) -> dict:
    row = dict(row)
    if row.get("partner_ref") is not None:
        row["partner_ref"] = int(row["partner_ref"])
    return row


def _check(conn, pg_url, schema, table):
    expected = _mysql_rows(conn, table)
    got = {k: _normalize_pg(v) for k, v in _pg_rows(pg_url, schema, table).items()}
    assert got.keys() == expected.keys(), "same primary keys, none twice"
    for key, row in expected.items():
        assert got[key] == row, f"row {key} differs"


def _check_result(result):
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == CHECK_NAME]
    return check


def _check_alone(cfg, res, instance=None):
    """matches_mysql executed alone: every partition the watermark knows."""
    from s3rs_assets.assets import build_table_assets
    from s3rs_assets.names import asset_key

    key = dg.AssetCheckKey(asset_key(cfg, "redshift_table"), CHECK_NAME)
    alone = dg.materialize(build_table_assets(cfg), resources=res, instance=instance,
                           selection=dg.AssetSelection.checks(key), raise_on_error=False)
    return _check_result(alone)


def test_end_to_end_equals_mysql_row_for_row(demo, mysql_db, mysql_url, pg_url, s3_resource,
                                             spark_resource):
    cfg = table_cfg(mysql_db, "sync_demo", chunk_rows=1500, target="dw_e2e.sync_demo")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    with dg.instance_for_test() as instance:
        result = sync(cfg, res, start=DAYS[0], end=DAYS[1], instance=instance)
        assert _check_result(result).passed
        _check(demo, pg_url, "dw_e2e", "sync_demo")
        rec = store_for(s3_resource).read(cfg.name)
        assert rec.redshift_status == "success" and rec.mysql_status == "success"
        assert rec.redshift_rows_loaded == rec.mysql_rows_extracted == 4000
        assert set(rec.processed_s3_files) == {
            f.key for p in rec.partitions.values() for f in p.files}
        # redshift-only again: every file is already in the ledger, nothing changes
        again = sync(cfg, res, start=DAYS[0], end=DAYS[1], instance=instance,
                     stages=("redshift_table",))
        md = metadata_facts(again.get_asset_materialization_events()[0].materialization.metadata)
        assert md["files_loaded"] == 0 and md["files_skipped"] > 0
        _check(demo, pg_url, "dw_e2e", "sync_demo")


def test_updates_flow_and_the_check_catches_hand_edits(demo, mysql_db, mysql_url, pg_url,
                                                       s3_resource, spark_resource):
    cfg = table_cfg(mysql_db, "sync_demo", chunk_rows=3000, target="dw_upd.sync_demo")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    sync(cfg, res, start=DAYS[0], end=DAYS[1])
    # a row of day 1 moves to day 2 with new values: old version (D) and new (D+1) both in S3
    with demo.cursor() as cur:
        cur.execute("SELECT id FROM sync_demo WHERE update_at < '2025-05-02' ORDER BY id LIMIT 1")
        moved = cur.fetchone()[0]
        cur.execute("UPDATE sync_demo SET amount = 42.4242, update_at = '2025-05-02 19:30:00' "
                    "WHERE id = %s", (moved,))
    sync(cfg, res, partition=DAYS[1])
    # re-extract and re-load the older partition D after D+1: the newer row must stay
    sync(cfg, res, partition=DAYS[0])
    _check(demo, pg_url, "dw_upd", "sync_demo")
    # hand edits in the warehouse are found by the asset check executed alone (a sync's
    # check compares only what the sync moved: nothing here)
    with psycopg.connect(pg_url.replace("postgres:@", "postgres@"), autocommit=True) as c:
        c.execute('DELETE FROM "dw_upd"."sync_demo" WHERE id = (SELECT MAX(id) FROM '
                  '"dw_upd"."sync_demo" WHERE update_at < %s)', (datetime(2025, 5, 2),))
        c.execute('UPDATE "dw_upd"."sync_demo" SET update_at = update_at + interval \'1 second\' '
                  'WHERE id = (SELECT MIN(id) FROM "dw_upd"."sync_demo" WHERE update_at >= %s)',
                  (datetime(2025, 5, 2),))
    quiet = _check_result(sync(cfg, res, start=DAYS[0], end=DAYS[1], stages=("redshift_table",)))
    assert quiet.passed and quiet.metadata["partitions_checked"].value == 0
    check = _check_alone(cfg, res)
    assert not check.passed
    assert "2025-05-01: MISMATCH" in check.description and "2025-05-02: MISMATCH" in (
        check.description)


def test_new_column_arrives_and_incompatible_change_stops_only_that_table(
        demo, mysql_db, mysql_url, pg_url, s3_resource, spark_resource):
    with demo.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS evolve")
        cur.execute(f"CREATE TABLE evolve LIKE `{mysql_db}`.sync_demo")
        cur.execute("INSERT INTO evolve SELECT * FROM sync_demo WHERE id <= 300")
    cfg = table_cfg(mysql_db, "evolve", chunk_rows=1000, target="dw_evo.evolve")
    other = table_cfg(mysql_db, "sync_demo", chunk_rows=5000, target="dw_evo.other")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    sync(cfg, res, start=DAYS[0], end=DAYS[1])
    with demo.cursor() as cur:
        cur.execute("ALTER TABLE evolve ADD COLUMN channel VARCHAR(20) NULL")
        cur.execute("INSERT INTO evolve SELECT s.*, 'web' FROM sync_demo s WHERE id BETWEEN 301 "
                    "AND 400")
        cur.execute("UPDATE evolve SET update_at = '2025-05-02 19:00:00' WHERE id > 300")
    sync(cfg, res, partition=DAYS[1])
    rows = _pg_rows(pg_url, "dw_evo", "evolve")
    assert len(rows) == 400
    assert {rows[i]["channel"] for i in range(301, 401)} == {"web"}
    assert rows[1]["channel"] is None
    # DECIMAL(18,4) -> VARCHAR cannot be widened: this table stops, with a clear error
    with demo.cursor() as cur:
        cur.execute("ALTER TABLE evolve MODIFY amount VARCHAR(40) NOT NULL")
        cur.execute("UPDATE evolve SET update_at = '2025-05-02 19:10:00' WHERE id = 400")
    failed = sync(cfg, res, partition=DAYS[1], raise_on_error=False)
    assert not failed.success
    error = failed.get_step_failure_events()[0].event_specific_data.error
    text = str(error.cause or error)
    assert "amount" in text and "evolve" in text
    assert store_for(s3_resource).read(cfg.name).redshift_status == "failed"
    # ... while another table keeps syncing
    assert sync(other, res, partition=DAYS[1]).success


def test_each_partition_shows_its_own_figures_and_the_checks_run_alone(
        demo, mysql_db, mysql_url, pg_url, s3_resource, spark_resource):
    """A range run records one materialization per partition with that partition's own
    rows; the run summary and the record snapshot sit on the last partition only; each
    check can be executed without materializing anything."""
    from s3rs_assets.assets import build_table_assets
    from s3rs_assets.names import (
        BACKUP_CHECK_NAME,
        WATERMARK_BACKUP_METADATA_KEY,
        WATERMARK_METADATA_KEY,
        asset_key,
    )

    cfg = table_cfg(mysql_db, "sync_demo", chunk_rows=1500, target="dw_parts.sync_demo")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    with dg.instance_for_test() as instance:
        result = sync(cfg, res, start=DAYS[0], end=DAYS[1], instance=instance)
        backups = {e.partition: metadata_facts(e.materialization.metadata)
                   for e in result.get_asset_materialization_events()
                   if e.asset_key == asset_key(cfg, "s3_parquet")}
        loads = {e.partition: metadata_facts(e.materialization.metadata)
                 for e in result.get_asset_materialization_events()
                 if e.asset_key == asset_key(cfg, "redshift_table")}
        rec = store_for(s3_resource).read(cfg.name, fresh=True)
        for day in DAYS:
            assert backups[day]["rows"] == rec.partitions[day].rows > 0
            assert loads[day]["ledger_rows"] == rec.loaded_partitions[day].rows
        assert sum(md["rows"] for md in backups.values()) == 4000
        assert backups[DAYS[1]]["run_rows"] == 4000
        assert "run_rows" not in backups[DAYS[0]]
        assert WATERMARK_BACKUP_METADATA_KEY in backups[DAYS[1]]
        assert WATERMARK_BACKUP_METADATA_KEY not in backups[DAYS[0]]
        snapshot = backups[DAYS[1]][WATERMARK_BACKUP_METADATA_KEY]
        assert "redshift_status" not in snapshot and "loaded_partitions" not in snapshot
        assert loads[DAYS[1]][WATERMARK_METADATA_KEY]["redshift_status"] == "success"

        # the checks alone, from the same definitions, without a materialization
        everything = build_table_assets(cfg)
        for check in (CHECK_NAME, BACKUP_CHECK_NAME):
            stage = "redshift_table" if check == CHECK_NAME else "s3_parquet"
            alone = dg.materialize(
                everything, resources=res, instance=instance,
                selection=dg.AssetSelection.checks(dg.AssetCheckKey(asset_key(cfg, stage), check)),
            )
            assert not alone.get_asset_materialization_events()
            (evaluation,) = alone.get_asset_check_evaluations()
            assert evaluation.passed, evaluation.description
            assert evaluation.metadata["partitions_checked"].value == 2


def test_a_run_describes_its_table_once(demo, mysql_db, mysql_url, pg_url, s3_resource,
                                        spark_resource, monkeypatch):
    """The backup, the load and matches_mysql of one run share one description of the
    MySQL table (issue 16: it was asked four times per run). Counted, not timed."""
    from s3rs_assets import load_stage

    calls: list[str] = []
    real = load_stage.describe

    def counting(conn, cfg):
        calls.append(cfg.name)
        return real(conn, cfg)

    monkeypatch.setattr(load_stage, "describe", counting)
    cfg = table_cfg(mysql_db, "sync_demo", chunk_rows=5000, target="dw_once.sync_demo")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    result = sync(cfg, res, start=DAYS[0], end=DAYS[1])
    assert result.success and _check_result(result).passed
    assert calls == [cfg.name]


def test_the_check_of_a_sync_compares_only_what_the_run_moved(
        demo, mysql_db, mysql_url, pg_url, s3_resource, spark_resource):
    """Issue 19: a sync's check costs in proportion to what it moved. Counted: partitions
    and rows compared. A run that loads only a third day compares only that day, and still
    fails when it differs; a run that loads nothing compares nothing; the check executed
    alone (like `s3rs verify`) still compares everything."""
    with demo.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS touched")
        cur.execute(f"CREATE TABLE touched LIKE `{mysql_db}`.sync_demo")
        cur.execute("INSERT INTO touched SELECT * FROM sync_demo WHERE id <= 300")
        # rows in both days whatever earlier tests did to sync_demo (alone, ids <= 300
        # all lie in the first day)
        cur.execute("UPDATE touched SET update_at = '2025-05-02 09:00:00' "
                    "WHERE id BETWEEN 200 AND 209")
    cfg = table_cfg(mysql_db, "touched", chunk_rows=1000, target="dw_touch.touched")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    first = _check_result(sync(cfg, res, start=DAYS[0], end=DAYS[1]))
    assert first.passed and first.metadata["partitions_checked"].value == 2
    assert first.metadata["mysql_rows"].value.startswith("300 in ")
    nothing = _check_result(sync(cfg, res, start=DAYS[0], end=DAYS[1],
                                 stages=("redshift_table",)))
    assert nothing.passed and nothing.metadata["partitions_checked"].value == 0
    with demo.cursor() as cur:  # one row moves to a third day
        cur.execute("UPDATE touched SET update_at = '2025-05-03 10:00:00' WHERE id = 5")
    with psycopg.connect(pg_url.replace("postgres:@", "postgres@"), autocommit=True) as c:
        # an untouched partition differs (a full check's finding, not this run's) ...
        c.execute('DELETE FROM "dw_touch"."touched" WHERE id = (SELECT MAX(id) FROM '
                  '"dw_touch"."touched" WHERE update_at < %s)', (datetime(2025, 5, 2),))
        # ... and so does the partition the run loads: a row MySQL does not have
        c.execute('CREATE TEMP TABLE extra AS SELECT * FROM "dw_touch"."touched" WHERE id = 6')
        c.execute("UPDATE extra SET id = 999999, update_at = '2025-05-03 11:00:00'")
        c.execute('INSERT INTO "dw_touch"."touched" SELECT * FROM extra')
    check = _check_result(sync(cfg, res, partition="2025-05-03", raise_on_error=False))
    assert not check.passed
    assert check.metadata["partitions_checked"].value == 1
    assert check.metadata["mysql_rows"].value == "1 in partition(s) 2025-05-03 .. 2025-05-03"
    assert "2025-05-03: MISMATCH" in check.description
    assert "2025-05-01" not in check.description
    full = _check_alone(cfg, res)
    assert full.metadata["partitions_checked"].value == 3
    assert "2025-05-01: MISMATCH" in full.description and "2025-05-03: MISMATCH" in (
        full.description)


def test_the_check_of_a_sync_takes_mysqls_side_computed_while_the_run_loads(
        demo, mysql_db, mysql_url, pg_url, s3_resource, spark_resource, monkeypatch):
    """Issue 19: the load step computes MySQL's side of its run's check beside the load
    (check_ahead.py), for the partitions it loads files into; the check compares that with
    the warehouse and asks MySQL nothing more. Counted: MySQL checksum queries and the
    thread each ran in. A run without the check computes nothing ahead; a partition whose
    files were all loaded is not computed; a row the warehouse lost is still found."""
    import threading

    from s3rs_assets import verify
    from s3rs_assets.assets import build_table_assets
    from s3rs_assets.names import asset_key

    calls: list[str] = []
    real = verify._mysql_batch

    def counted(conn, source, target, windows, params):
        calls.append(f"{threading.current_thread().name}: {len(windows)}")
        return real(conn, source, target, windows, params)

    monkeypatch.setattr(verify, "_mysql_batch", counted)
    with demo.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS ahead")
        cur.execute(f"CREATE TABLE ahead LIKE `{mysql_db}`.sync_demo")
        cur.execute("INSERT INTO ahead SELECT * FROM sync_demo WHERE update_at < "
                    "'2025-05-02' LIMIT 300")
        cur.execute("INSERT INTO ahead SELECT * FROM sync_demo WHERE update_at >= "
                    "'2025-05-02' AND update_at < '2025-05-02 12:00' LIMIT 100")
    cfg = table_cfg(mysql_db, "ahead", chunk_rows=1000, target="dw_ahead.ahead")
    res = resources(mysql_url, s3_resource, spark_resource, pg_url)
    stages = dg.AssetSelection.assets(*[asset_key(cfg, s) for s in ("s3_parquet",
                                                                    "redshift_table")])
    plain = dg.materialize(build_table_assets(cfg), selection=stages.without_checks(),
                           resources=res, partition_key=DAYS[0])
    assert plain.success and calls == []  # no check in the run: nothing computed ahead

    # both days in one run: day 1's files are all loaded, day 2's are new
    first = _check_result(sync(cfg, res, start=DAYS[0], end=DAYS[1], reconcile_check=False))
    assert first.passed and first.metadata["partitions_checked"].value == 1
    assert calls == ["s3rs-check-ahead: 1"]  # day 2 only, and only in the load's thread

    calls.clear()
    with demo.cursor() as cur:  # new rows on day 2
        cur.execute("INSERT INTO ahead SELECT * FROM sync_demo WHERE update_at >= "
                    "'2025-05-02 12:00' AND update_at < '2025-05-03' LIMIT 50")
        assert cur.rowcount > 0
    lost = []
    real_load = load_stage.load_partitions

    def losing_a_row(warehouse, s3, target, parts, **kw):
        out = real_load(warehouse, s3, target, parts, **kw)
        with psycopg.connect(pg_url.replace("postgres:@", "postgres@"), autocommit=True) as c:
            lost.append(c.execute('DELETE FROM "dw_ahead"."ahead" WHERE id = (SELECT MAX(id) '
                                  'FROM "dw_ahead"."ahead" WHERE update_at >= %s) '
                                  'RETURNING id', (datetime(2025, 5, 2),)).fetchone())
        return out

    monkeypatch.setattr(load_stage, "load_partitions", losing_a_row)
    check = _check_result(sync(cfg, res, partition=DAYS[1], raise_on_error=False,
                               reconcile_check=False))
    assert lost and not check.passed
    assert "2025-05-02: MISMATCH" in check.description
    assert calls == ["s3rs-check-ahead: 1"]


def test_moved_windows_are_the_whole_windows_of_the_partitions_the_run_loaded():
    from s3rs_assets.checks import moved_windows

    d1, d2, d3 = datetime(2025, 5, 1), datetime(2025, 5, 2), datetime(2025, 5, 3)
    windows = [("a", d1, d2), ("b", d2, d3), ("c", d3, d3 + timedelta(hours=5))]
    assert moved_windows(windows, {"b", "c", "z"}) == windows[1:]
    assert moved_windows(windows, set()) == []
