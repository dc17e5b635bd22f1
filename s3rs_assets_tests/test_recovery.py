"""A lost or corrupt watermark costs neither re-extraction nor skipped rows."""

from __future__ import annotations

from datetime import datetime

import dagster as dg
import pytest

from s3rs_assets.io_manager import store_for
from s3rs_assets.names import WATERMARK_LOCATION_METADATA_KEY, metadata_facts
from s3rs_assets.resources import S3Resource
from s3rs_assets.work import plan_sync
from s3rs_assets_tests.helpers import (
    backup,
    list_keys,
    make_ties_table,
    manifest_keys,
    mysql_ids,
    read_manifest_ids,
    resources,
    table_cfg,
    ties,
)


def _damage(kind: str, s3_client, bucket: str, layout, table: str) -> None:
    primary = layout.watermark_primary(table)
    if kind == "deleted":
        s3_client.delete_object(Bucket=bucket, Key=primary)
    elif kind == "truncated":
        body = s3_client.get_object(Bucket=bucket, Key=primary)["Body"].read()
        s3_client.put_object(Bucket=bucket, Key=primary, Body=body[: len(body) // 2])
    elif kind == "primary_and_daily":
        s3_client.delete_object(Bucket=bucket, Key=primary)
        for k in list_keys(s3_client, bucket, "s3rs/watermarks/backups/daily/"):
            s3_client.delete_object(Bucket=bucket, Key=k)
    elif kind == "everything_but_the_event_log":
        for k in list_keys(s3_client, bucket, "s3rs/watermarks/"):
            s3_client.delete_object(Bucket=bucket, Key=k)


@pytest.mark.parametrize(
    "kind", ["deleted", "truncated", "primary_and_daily", "everything_but_the_event_log"]
)
def test_sync_after_losing_the_watermark(kind, mysql_conn, mysql_db, mysql_url, s3_resource,
                                         s3_client, spark_resource):
    table = f"rec_{kind[:8]}"
    make_ties_table(mysql_conn, table, ties(900, datetime(2025, 3, 3), 3)
                    + ties(900, datetime(2025, 3, 4), 3, 1001))
    cfg = table_cfg(mysql_db, table, chunk_rows=250, start="2025-03-03", lag="0s")
    res = resources(mysql_url, s3_resource, spark_resource)
    store = store_for(s3_resource)
    with dg.instance_for_test() as instance:
        # day 1 complete, day 2 half done
        backup(cfg, res, start="2025-03-03", end="2025-03-04", limit=1400, instance=instance)
        before = store.read(cfg.name)
        assert before.partitions["2025-03-03"].status == "complete"
        assert before.partitions["2025-03-04"].status == "partial"
        cursor = before.partitions["2025-03-04"].cursor
        _damage(kind, s3_client, s3_resource.bucket, s3_resource.layout, cfg.name)
        if kind == "deleted":
            # the run itself finds the primary gone and restores it before reading
            result = backup(cfg, res, partition="2025-03-04", instance=instance)
            md = result.get_asset_materialization_events()[0].materialization.metadata
            assert md["watermark_recovery"].value["source"] == "daily", sorted(md)
        else:
            # `s3rs sync` plans from the recovered record: day 1 is not read again
            recovered = store_for(s3_resource, instance=instance).recover(cfg.name).record
            expected = "event_log" if kind == "everything_but_the_event_log" else (
                "session" if kind == "primary_and_daily" else "daily")
            assert recovered.backup_metadata.recovered_from == expected
            assert recovered.partitions["2025-03-04"].cursor == cursor
            plan = plan_sync(cfg, recovered)
            assert plan.start == "2025-03-04"
            result = backup(cfg, res, start=plan.start, end="2025-03-04", instance=instance)
            md = result.get_asset_materialization_events()[0].materialization.metadata
        assert metadata_facts(md)["rows"] == 1800 - 1400, "only what was left is read"
    ids = read_manifest_ids(s3_client, s3_resource.bucket, manifest_keys(store, cfg.name))
    assert sorted(ids) == mysql_ids(mysql_conn, table) and len(ids) == len(set(ids))


def test_a_new_prefix_does_not_take_the_old_prefixs_record_from_the_event_log(
        mysql_conn, mysql_db, mysql_url, s3_resource, s3_client, spark_resource):
    """The Dagster instance outlives a change of S3RS_S3_PREFIX (or of the bucket): the
    snapshots its event log holds for the old place are not a copy of the new place's
    record. The new place starts as a new table, every row read again into files of its
    own (before, it took the old place's record and read nothing: its record named the old
    prefix's files, gone once the old place is cleaned or dropped); the old place still
    recovers from its own snapshots, not from the newer ones of the new place."""
    table = "rec_moved"
    make_ties_table(mysql_conn, table, ties(900, datetime(2025, 3, 3), 3)
                    + ties(900, datetime(2025, 3, 4), 3, 1001))
    cfg = table_cfg(mysql_db, table, chunk_rows=250, start="2025-03-03", lag="0s")
    bucket = s3_resource.bucket
    moved = S3Resource(bucket=bucket, prefix="moved")
    days = {"start": "2025-03-03", "end": "2025-03-04"}
    with dg.instance_for_test() as instance:
        backup(cfg, resources(mysql_url, s3_resource, spark_resource), **days, instance=instance)
        report = store_for(moved, instance=instance).recover(cfg.name)
        assert report.source is None and report.record is None, report
        result = backup(cfg, resources(mysql_url, moved, spark_resource), **days,
                        instance=instance)
        md = result.get_asset_materialization_events()[-1].materialization.metadata
        assert md[WATERMARK_LOCATION_METADATA_KEY].value == f"s3://{bucket}/moved"
        keys = manifest_keys(store_for(moved), cfg.name)
        assert keys and all(k.startswith("moved/data/") for k in keys), keys
        ids = read_manifest_ids(s3_client, bucket, keys)
        assert sorted(ids) == mysql_ids(mysql_conn, table) and len(ids) == len(set(ids))
        # the old place loses every S3 copy: its own snapshot, older than the new place's
        for k in list_keys(s3_client, bucket, "s3rs/watermarks/"):
            s3_client.delete_object(Bucket=bucket, Key=k)
        report = store_for(s3_resource, instance=instance).recover(cfg.name)
        assert report.source == "event_log", report
        old = [f.key for p in report.record.partitions.values() for f in p.files]
        assert old and all(k.startswith("s3rs/data/") for k in old), old
