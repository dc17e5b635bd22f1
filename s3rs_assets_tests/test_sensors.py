"""The three sensors, evaluated with `build_sensor_context` on a real Dagster instance,
real MariaDB tables and a moto S3 server.

Only the module fixture `backed_up` runs Spark (one single-run backfill of two partitions),
to have real `s3_parquet` materializations in the event log. The sensors themselves are also
evaluated once in a fresh interpreter that refuses to start a SparkSession or a JVM.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import dagster as dg
import pytest

from s3rs_assets.cursor import position_token
from s3rs_assets.io_manager import store_for
from s3rs_assets.names import (
    NEW_DATA,
    RANGE_END_TAG,
    RANGE_START_TAG,
    STAGE_CHAIN,
    TABLE_TAG,
    WATERMARK_GUARD,
    asset_key,
    job_name,
    sync_check_keys,
)
from s3rs_assets.partitions import partitions_def, window
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.sensors import build_sensors
from s3rs_assets.sensors.guard import WatermarkRestored
from s3rs_assets.watermark import PartitionState, Position, WatermarkRecord
from s3rs_assets.watermark_eventlog import event_log_watermark
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT, REPO
from s3rs_assets_tests.helpers import (
    backup,
    insert_rows,
    list_keys,
    make_ties_table,
    resources,
    table_cfg,
    ties,
)

D = datetime(2025, 3, 4)
PREFIX = "s3rs"


# ----------------------------------------------------------------------------- helpers


def stand_in_assets(cfg, *, fail_load: bool = False) -> list[dg.AssetsDefinition]:
    """Assets with the real keys and partitions, bodies that need no service.

    The sensors only need the asset graph (keys, partitions) to resolve their run requests;
    the real assets are exercised by test_extract / test_load.
    """
    pdef = partitions_def(cfg)
    backup_key = asset_key(cfg, "s3_parquet")

    @dg.asset(key=backup_key, partitions_def=pdef, backfill_policy=dg.BackfillPolicy.single_run())
    def s3_parquet() -> None:
        return None

    @dg.asset(
        key=asset_key(cfg, "redshift_table"),
        deps=[backup_key],
        partitions_def=pdef,
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def redshift_table() -> None:
        if fail_load:
            raise RuntimeError("load failed (test)")

    checks = [
        dg.asset_check(asset=key.asset_key, name=key.name)(lambda: dg.AssetCheckResult(passed=True))
        for key in sync_check_keys(cfg)
    ]
    return [s3_parquet, redshift_table, *checks]


class Sensors:
    """build_sensors(cfgs) inside a Definitions, evaluated like the daemon does."""

    def __init__(self, cfgs, instance, res: dict):
        self.instance = instance
        self.res = res
        self.sensors = {s.name: s for s in build_sensors(cfgs)}
        self.defs = dg.Definitions(
            assets=[a for c in cfgs for a in stand_in_assets(c)],
            sensors=list(self.sensors.values()),
            resources=res,
        )

    def tick(self, name: str, cursor: str | None = None):
        with dg.build_sensor_context(
            instance=self.instance, resources=self.res, cursor=cursor, definitions=self.defs
        ) as context:  # a context manager: the MySQL resource closes its connection
            return self.sensors[name].evaluate_tick(context)


def restoring_tick(s: Sensors, key: dg.AssetKey) -> tuple[str, list[dg.AssetObservation]]:
    """A guard tick that restores a watermark fails (so that Dagster does not file it as
    SKIPPED): its error message, and the observations it recorded on `key` itself."""
    with pytest.raises(WatermarkRestored) as failed:  # the daemon wraps it: a FAILURE tick
        s.tick(WATERMARK_GUARD)
    records = s.instance.fetch_observations(key, limit=10).records
    return str(failed.value), [r.asset_observation for r in records if r.asset_observation]


def res_for(mysql_url: str, s3: S3Resource) -> dict:
    return {"mysql": MySQLResource(url=mysql_url), "s3": s3}


def last_row(conn, table: str, lo: datetime, hi: datetime) -> Position:
    with conn.cursor() as cur:
        cur.execute(
            f"SELECT update_at, id FROM `{table}` WHERE update_at >= %s AND update_at < %s "
            "ORDER BY update_at DESC, id DESC LIMIT 1",
            (lo, hi),
        )
        c, pk = cur.fetchone()
    return Position(c=c, pk=[pk])


def write_record(store, cfg, conn, *, complete=(), partial=()) -> WatermarkRecord:
    """A valid watermark whose partitions end at the last row of their window."""
    pdef = partitions_def(cfg)

    def change(rec: WatermarkRecord) -> None:
        for status, keys in (("complete", complete), ("partial", partial)):
            for key in keys:
                lo, hi = window(pdef, key)
                rec.partitions[key] = PartitionState(
                    status=status,
                    window_start=lo,
                    window_end=hi,
                    cursor=last_row(conn, cfg.table, lo, hi),
                )

    record = store.update(cfg.name, change).record
    store.write_copies(cfg.name)  # as at a run's end
    return record


def server_now(conn) -> datetime:
    with conn.cursor() as cur:
        cur.execute("SELECT NOW(6)")
        return cur.fetchone()[0]


def key_at(cfg, ts: datetime) -> str:
    """The partition holding a naive source-clock time (the source time zone is UTC here)."""
    pdef = partitions_def(cfg)
    key = pdef.get_partition_key_for_timestamp(ts.replace(tzinfo=UTC).timestamp())
    return min(key, pdef.get_last_partition_key())


def wm_keys(s3_client, bucket: str) -> list[str]:
    return list_keys(s3_client, bucket, f"{PREFIX}/watermarks/")


def delete_all(s3_client, bucket: str, keys: list[str]) -> None:
    for k in keys:
        s3_client.delete_object(Bucket=bucket, Key=k)


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


# ------------------------------------------------------------------ one real backfill


@pytest.fixture(scope="module")
def backed_up(mysql_db, mysql_url, moto_endpoint, spark_resource):
    """`s3_parquet` of a 2-partition table materialized by one single-run backfill."""
    import pymysql

    bucket = f"s3rs-sensors-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    s3 = S3Resource(bucket=bucket, prefix=PREFIX)
    conn = pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root",
                           database=mysql_db, autocommit=True)
    make_ties_table(conn, "sen_backed", ties(30, D, 3) + ties(12, D + timedelta(days=1), 2, 101))
    cfg = table_cfg(mysql_db, "sen_backed", chunk_rows=50)
    with dg.instance_for_test() as inst:
        result = backup(
            cfg,
            resources(mysql_url, s3, spark_resource),
            start="2025-03-04",
            end="2025-03-05",
            instance=inst,
        )
        assert result.success
        yield cfg, inst, s3, conn
    conn.close()


# ----------------------------------------------------------------------- watermark guard


def test_guard_reports_valid_and_never_synced(
    instance, mysql_db, mysql_url, mysql_conn, s3_resource
):
    make_ties_table(mysql_conn, "sen_g1", ties(6, D, 2))
    synced = table_cfg(mysql_db, "sen_g1")
    never = table_cfg(mysql_db, "sen_g_never")
    write_record(store_for(s3_resource), synced, mysql_conn, complete=["2025-03-04"])
    s = Sensors([synced, never], instance, res_for(mysql_url, s3_resource))

    tick = s.tick(WATERMARK_GUARD)

    assert not tick.run_requests and not tick.asset_events
    assert tick.skip_message.startswith(
        f"checked 2 tables' primary watermarks in s3://{s3_resource.bucket}/{PREFIX}: "
        "1 valid, 1 never synced, 0 recovered, 0 need a person"
    )


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_guard_restores_primary_from_daily_backup(
    instance, mysql_db, mysql_url, mysql_conn, s3_resource, s3_client, damage
):
    make_ties_table(mysql_conn, "sen_g2", ties(6, D, 2))
    cfg = table_cfg(mysql_db, "sen_g2")
    store = store_for(s3_resource)
    saved = write_record(store, cfg, mysql_conn, complete=["2025-03-04"])
    primary, bucket = s3_resource.layout.watermark_primary(cfg.name), s3_resource.bucket
    daily = s3_resource.layout.watermark_daily(cfg.name, datetime.now(UTC).date())
    if damage == "deleted":
        s3_client.delete_object(Bucket=bucket, Key=primary)
        why = "primary missing"
    else:
        body = s3_client.get_object(Bucket=bucket, Key=primary)["Body"].read()
        s3_client.put_object(Bucket=bucket, Key=primary, Body=body[: len(body) // 2])
        why = f"primary watermark of {cfg.name} is not valid JSON"
    s = Sensors([cfg], instance, res_for(mysql_url, s3_resource))

    message, observed = restoring_tick(s, asset_key(cfg, "s3_parquet"))

    restored = WatermarkRecord.from_json(
        s3_client.get_object(Bucket=bucket, Key=primary)["Body"].read()
    )
    assert restored.partitions == saved.partitions
    assert restored.backup_metadata.recovered_from == "daily"
    assert "1 recovered" in message
    assert f"RECOVERED {cfg.name}: {why}" in message
    assert f"recovered from daily s3://{bucket}/{daily}" in message
    (obs,) = observed
    assert isinstance(obs, dg.AssetObservation)
    assert obs.asset_key == asset_key(cfg, "s3_parquet")
    assert obs.metadata["recovered_from"].value == "daily"
    assert obs.metadata["key"].value == daily

    again = s.tick(WATERMARK_GUARD)
    assert "1 valid" in again.skip_message and not again.asset_events


def test_guard_restores_from_event_log_when_every_s3_copy_is_gone(backed_up, mysql_url, s3_client):
    cfg, inst, s3, _ = backed_up
    store = store_for(s3)
    before = store.read(cfg.name)
    text = event_log_watermark(inst, cfg)
    assert text is not None
    logged = WatermarkRecord.from_json(text, table_name=cfg.name)
    assert set(logged.partitions) == {"2025-03-04", "2025-03-05"}
    delete_all(s3_client, s3.bucket, wm_keys(s3_client, s3.bucket))
    assert wm_keys(s3_client, s3.bucket) == []
    s = Sensors([cfg], inst, res_for(mysql_url, s3))

    message, observed = restoring_tick(s, asset_key(cfg, "s3_parquet"))

    assert f"RECOVERED {cfg.name}: primary missing; recovered from event_log" in message
    (obs,) = observed
    assert obs.metadata["recovered_from"].value == "event_log"
    restored = store.read(cfg.name, fresh=True)  # the guard restored it since
    assert restored.backup_metadata.recovered_from == "event_log"
    assert restored.partitions == before.partitions
    assert restored.mysql_rows_extracted == 42
    assert s3.layout.watermark_primary(cfg.name) in wm_keys(s3_client, s3.bucket)


def test_guard_names_the_table_that_needs_watermark_set(
    instance, mysql_db, mysql_url, s3_resource, s3_client
):
    cfg = table_cfg(mysql_db, "sen_g_lost")
    primary = s3_resource.layout.watermark_primary(cfg.name)
    s3_client.put_object(Bucket=s3_resource.bucket, Key=primary, Body=b'{"table_name": "sen')
    s = Sensors([cfg], instance, res_for(mysql_url, s3_resource))

    tick = s.tick(WATERMARK_GUARD)  # raises nothing

    assert "1 need a person" in tick.skip_message
    assert f"NEEDS `s3rs watermark set -t {cfg.name}`" in tick.skip_message
    assert "no valid copy is left" in tick.skip_message
    (obs,) = tick.asset_events
    assert obs.metadata["action"].value.startswith(f"s3rs watermark set -t {cfg.name}")
    # nothing was written: the corrupt primary is left for the operator
    assert wm_keys(s3_client, s3_resource.bucket) == [primary]

    # the same problem is reported in every skip message but observed only once
    again = s.tick(WATERMARK_GUARD, tick.cursor)
    assert f"NEEDS `s3rs watermark set -t {cfg.name}`" in again.skip_message
    assert not again.asset_events


# ------------------------------------------------------------------------ stage chaining


def test_chain_loads_every_partition_of_a_single_run_backfill(backed_up, mysql_url):
    cfg, inst, s3, _ = backed_up
    events = inst.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key(cfg, "s3_parquet")), 10, ascending=True
    ).records
    assert [e.partition_key for e in events] == ["2025-03-04", "2025-03-05"]
    assert len({e.run_id for e in events}) == 1, "one run, one event per partition"
    s = Sensors([cfg], inst, res_for(mysql_url, s3))

    tick = s.tick(STAGE_CHAIN)

    (req,) = tick.run_requests
    assert req.job_name == job_name(cfg)
    assert req.asset_selection == [asset_key(cfg, "redshift_table")]
    # the load's sync check only: not `reconciled`, which Dagster adds unless told
    assert req.asset_check_keys == [dg.AssetCheckKey(asset_key(cfg, "redshift_table"),
                                                     "matches_mysql")]
    assert (req.tags[RANGE_START_TAG], req.tags[RANGE_END_TAG]) == ("2025-03-04", "2025-03-05")
    assert req.tags[TABLE_TAG] == cfg.name
    assert req.run_key == f"{cfg.name}:2025-03-04..2025-03-05:{events[-1].storage_id}"
    assert json.loads(tick.cursor) == {cfg.name: events[-1].storage_id}

    again = s.tick(STAGE_CHAIN, tick.cursor)
    assert not again.run_requests
    assert f"{cfg.name}: no new s3_parquet materialization" in again.skip_message
    assert again.cursor == tick.cursor


def test_chain_single_partition_and_already_loaded(instance, mysql_db, mysql_url, s3_resource):
    cfg = table_cfg(mysql_db, "sen_chain")
    s = Sensors([cfg], instance, res_for(mysql_url, s3_resource))
    backup_key, load_key = asset_key(cfg, "s3_parquet"), asset_key(cfg, "redshift_table")
    instance.report_runless_asset_event(dg.AssetMaterialization(backup_key, partition="2025-03-06"))
    first = s.tick(STAGE_CHAIN)
    (req,) = first.run_requests
    event = instance.fetch_materializations(backup_key, 1).records[0]
    assert req.partition_key == "2025-03-06"
    assert req.run_key == f"{cfg.name}:2025-03-06:{event.storage_id}"
    assert req.asset_selection == [load_key]

    # a partition loaded after its backup needs no second load
    instance.report_runless_asset_event(dg.AssetMaterialization(backup_key, partition="2025-03-07"))
    instance.report_runless_asset_event(dg.AssetMaterialization(load_key, partition="2025-03-07"))
    second = s.tick(STAGE_CHAIN, first.cursor)
    assert not second.run_requests
    assert "1 already loaded since" in second.skip_message
    assert json.loads(second.cursor)[cfg.name] > json.loads(first.cursor)[cfg.name]


def test_chain_leaves_the_load_to_a_sync_run_that_planned_it(
    instance, mysql_db, mysql_url, s3_resource
):
    cfg = table_cfg(mysql_db, "sen_chain_sync")
    # the sync job's shape: both assets in one run; its load step fails here, so no later
    # redshift_table materialization exists and only the plan says the run owns the load
    result = dg.materialize(
        stand_in_assets(cfg, fail_load=True),
        partition_key="2025-03-06",
        instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    s = Sensors([cfg], instance, res_for(mysql_url, s3_resource))

    tick = s.tick(STAGE_CHAIN)

    assert not tick.run_requests
    assert "1 loaded by the same run" in tick.skip_message


# ------------------------------------------------------------------------------ new data


@pytest.fixture
def new_table(mysql_db, mysql_conn, s3_resource):
    """30 rows on 2025-03-04, 12 on 2025-03-05; the watermark at the last row of each."""
    name = f"sen_new_{uuid.uuid4().hex[:6]}"
    make_ties_table(mysql_conn, name, ties(30, D, 3) + ties(12, D + timedelta(days=1), 2, 101))
    cfg = table_cfg(mysql_db, name, lag="1h")
    store = store_for(s3_resource)
    write_record(store, cfg, mysql_conn, complete=["2025-03-04"], partial=["2025-03-05"])
    return cfg, store


def test_new_data_requests_a_range_sync_once_per_change(
    new_table, instance, mysql_url, mysql_conn, s3_resource
):
    cfg, store = new_table
    s = Sensors([cfg], instance, res_for(mysql_url, s3_resource))

    quiet = s.tick(NEW_DATA)
    assert not quiet.run_requests
    assert quiet.skip_message.startswith("checked 1 tables for MySQL rows past the watermark: ")
    assert f"{cfg.name}: no rows past the watermark below the safety bound" in quiet.skip_message
    assert "1 complete partition(s) skipped" in quiet.skip_message

    # a row sharing the partial partition's stored timestamp with a larger id (a plain
    # `c > watermark` would never see it) and one in the next, never synced, partition
    cursor = store.read(cfg.name).partitions["2025-03-05"].cursor
    day_after = datetime(2025, 3, 6, 10)
    insert_rows(mysql_conn, cfg.table, [(cursor.pk[0] + 1000, cursor.c), (7000, day_after)])

    tick = s.tick(NEW_DATA)

    (req,) = tick.run_requests
    assert req.job_name == job_name(cfg)
    assert req.asset_selection == [asset_key(cfg, "s3_parquet"), asset_key(cfg, "redshift_table")]
    assert sorted(req.asset_check_keys, key=str) == sorted(sync_check_keys(cfg), key=str)
    assert (req.tags[RANGE_START_TAG], req.tags[RANGE_END_TAG]) == ("2025-03-05", "2025-03-06")
    assert req.tags[TABLE_TAG] == cfg.name
    first = position_token(Position(c=cursor.c, pk=[cursor.pk[0] + 1000]))
    newest = position_token(Position(c=day_after, pk=[7000]))
    assert req.run_key == f"{cfg.name}:2025-03-05..2025-03-06:{first}:{newest}"

    # same state, same key: Dagster launches a run key once
    assert [r.run_key for r in s.tick(NEW_DATA).run_requests] == [req.run_key]

    # another change, another key
    insert_rows(mysql_conn, cfg.table, [(7001, day_after)])
    (changed,) = s.tick(NEW_DATA).run_requests
    assert changed.run_key == req.run_key.replace(
        newest, position_token(Position(c=day_after, pk=[7001]))
    )

    # while a run of the table's assets is queued or running, MySQL is not even asked:
    # one launched like the UI's Materialize button (asset job, no s3rs tag) ...
    ui_run = instance.add_run(
        dg.DagsterRun(
            job_name="__ASSET_JOB", status=dg.DagsterRunStatus.STARTING,
            asset_selection=frozenset({asset_key(cfg, "redshift_table")}),
        )
    )
    busy = s.tick(NEW_DATA)
    assert not busy.run_requests
    assert f"{cfg.name}: run {ui_run.run_id[:8]} is STARTING, not checked" in busy.skip_message
    # ... and a whole-job run (`dagster job execute` of the sync job)
    instance.delete_run(ui_run.run_id)
    run = instance.add_run(
        dg.DagsterRun(job_name=job_name(cfg), status=dg.DagsterRunStatus.STARTED)
    )
    busy = s.tick(NEW_DATA)
    assert f"{cfg.name}: run {run.run_id[:8]} is STARTED, not checked" in busy.skip_message
    # another table's run does not hold this one back
    instance.delete_run(run.run_id)
    instance.add_run(dg.DagsterRun(
        job_name="__ASSET_JOB", status=dg.DagsterRunStatus.STARTED,
        asset_selection=frozenset({dg.AssetKey(["other", "table", "s3_parquet"])})))
    assert s.tick(NEW_DATA).run_requests


def test_new_data_ignores_rows_above_the_safety_bound(
    new_table, instance, mysql_url, mysql_conn, s3_resource
):
    cfg, _ = new_table
    now = server_now(mysql_conn)
    insert_rows(mysql_conn, cfg.table, [(5000, now), (5001, now)])
    s = Sensors([cfg], instance, res_for(mysql_url, s3_resource))

    tick = s.tick(NEW_DATA)

    assert not tick.run_requests
    assert f"{cfg.name}: no rows past the watermark below the safety bound" in tick.skip_message

    # the same rows are found once the bound passes them (lag 0): one partition, today's
    eager = table_cfg(cfg.schema, cfg.table, lag="0s")
    today = key_at(eager, server_now(mysql_conn))
    (req,) = Sensors([eager], instance, res_for(mysql_url, s3_resource)).tick(NEW_DATA).run_requests
    assert req.partition_key == today
    assert req.run_key.startswith(f"{cfg.name}:{today}:")


def test_new_data_on_a_never_synced_table_starts_at_its_first_row(
    instance, mysql_db, mysql_url, mysql_conn, s3_resource
):
    rows = ties(5, D + timedelta(days=1), 2) + [(50, datetime(2025, 3, 7, 8))]
    make_ties_table(mysql_conn, "sen_never", rows)
    cfg = table_cfg(mysql_db, "sen_never")
    s = Sensors([cfg], instance, res_for(mysql_url, s3_resource))

    (req,) = s.tick(NEW_DATA).run_requests

    # through the partition of the newest row, the empty 2025-03-06 included
    assert (req.tags[RANGE_START_TAG], req.tags[RANGE_END_TAG]) == ("2025-03-05", "2025-03-07")


# ------------------------------------------------------------------------------- no Spark

NO_SPARK_SCRIPT = textwrap.dedent(
    """
    import json, sys

    # The resources import dagster-pyspark (so pyspark's Python modules load); what must
    # never happen in a sensor is a SparkSession or a JVM: both are refused here.
    import pyspark.java_gateway
    from pyspark.sql import SparkSession

    attempts = []

    def refuse(what):
        def fail(*args, **kwargs):
            attempts.append(what)
            raise RuntimeError(f"sensors must not start Spark ({what})")
        return fail

    pyspark.java_gateway.launch_gateway = refuse("launch_gateway")
    SparkSession.Builder.getOrCreate = refuse("getOrCreate")

    import dagster as dg
    from s3rs_assets.config import TableConfig
    from s3rs_assets.resources import MySQLResource, S3Resource
    from s3rs_assets.sensors import build_sensors
    from s3rs_assets.sensors.guard import WatermarkRestored

    args = json.loads(sys.argv[1])
    cfg = TableConfig.from_dict(
        {"name": args["table"], "start": "2025-01-01", "lag": "0s"}
    )
    res = {"mysql": MySQLResource(url=args["mysql_url"]),
           "s3": S3Resource(bucket=args["bucket"], prefix="s3rs")}
    out = {}
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(
            dg.AssetMaterialization([cfg.schema, cfg.table, "s3_parquet"],
                                    partition="2025-03-05"))
        for sensor in build_sensors([cfg]):
            with dg.build_sensor_context(instance=instance, resources=res) as ctx:
                result = sensor(ctx)
            if isinstance(result, dg.SkipReason):
                out[sensor.name] = {"skip": result.skip_message, "runs": []}
            else:
                out[sensor.name] = {
                    "skip": result.skip_reason.skip_message if result.skip_reason else None,
                    "runs": [r.run_key for r in result.run_requests or []],
                }
    out["spark_attempts"] = attempts
    out["active_session"] = SparkSession.getActiveSession() is not None
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_sensors_never_start_spark(mysql_db, mysql_url, mysql_conn, s3_resource, moto_endpoint):
    make_ties_table(mysql_conn, "sen_nospark", ties(5, D + timedelta(days=1), 2))
    args = {
        "table": f"{mysql_db}.sen_nospark",
        "mysql_url": mysql_url,
        "bucket": s3_resource.bucket,
    }
    proc = subprocess.run(
        [sys.executable, "-c", NO_SPARK_SCRIPT, json.dumps(args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["spark_attempts"] == [] and out["active_session"] is False
    # and each sensor did its real work in that interpreter
    assert "1 never synced" in out[WATERMARK_GUARD]["skip"]
    assert out[STAGE_CHAIN]["runs"][0].startswith(f"{mysql_db}.sen_nospark:2025-03-05:")
    assert out[NEW_DATA]["runs"][0].startswith(f"{mysql_db}.sen_nospark:2025-03-05:")
