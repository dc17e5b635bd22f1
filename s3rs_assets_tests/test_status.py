"""`s3rs status` (issue 18, item 4): lag per table from the record against MySQL's newest
cursor, sorted, `--json`, exit codes; costs counted per schema, not per table."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import uuid
from collections import Counter
from datetime import datetime, timedelta

import pytest
import yaml
from click.testing import CliRunner

from s3rs_assets import cli
from s3rs_assets.body_cache import BodyCache
from s3rs_assets.connections import MySQLConnector
from s3rs_assets.io_manager import store_for
from s3rs_assets.partitions import partitions_def, window
from s3rs_assets.status import LIST_AT, fleet_status
from s3rs_assets.watermark import FileEntry, PartitionState, Position
from s3rs_assets.watermark.record import LoadState
from s3rs_assets_tests.conftest import _mysql_root
from s3rs_assets_tests.helpers import make_ties_table, table_cfg, ties
from s3rs_assets_tests.test_fleet_scan import Calls, make_fleet

D = datetime(2025, 3, 4)


def loaded_record(store, cfg, up_to: datetime, *, failed: bool = False) -> None:
    """A record whose 2025-03-04 partition is extracted and loaded up to `up_to`."""
    pdef = partitions_def(cfg)
    lo, hi = window(pdef, "2025-03-04")
    key = f"s3rs/data/{cfg.table}/2025-03-04/f.parquet"

    def change(rec):
        rec.partitions["2025-03-04"] = PartitionState(
            status="partial",
            window_start=lo,
            window_end=hi,
            run_id="run-1",
            cursor=Position(c=up_to, pk=[99]),
            files=[FileEntry(key=key, rows=6, bytes=10, md5="0" * 32, cursor_max=up_to)],
        )
        rec.loaded_partitions["2025-03-04"] = LoadState(files=[key], rows=6)
        rec.mysql_status, rec.redshift_status = "success", "failed" if failed else "success"
        rec.last_redshift_load_time = datetime(2025, 3, 5)
        if failed:
            rec.last_error = "COPY refused (test)"

    store.update(cfg.name, change)


@pytest.fixture
def fleet(mysql_db, mysql_url, s3_resource):
    """ok (loaded to its newest row), behind (a day), failed, never synced, empty."""
    tag = uuid.uuid4().hex[:4]
    store = store_for(s3_resource)
    cfgs = {}
    with _mysql_root(mysql_db) as conn:
        for what in ("ok", "behind", "failed", "never", "empty"):
            name = f"st_{tag}_{what}"
            rows = [] if what == "empty" else ties(6, D, 2)
            if what == "behind":
                rows += [(50, D + timedelta(days=1, hours=5))]
            make_ties_table(conn, name, rows)
            cfgs[what] = table_cfg(mysql_db, name, start="2025-03-04")
    newest = D + timedelta(hours=2, microseconds=1)  # ties(6, D, 2): the second stamp
    for what in ("ok", "behind", "failed"):
        loaded_record(store, cfgs[what], newest, failed=what == "failed")
    return cfgs, store


def test_status_of_each_kind_of_table(fleet, mysql_url):
    cfgs, store = fleet
    with MySQLConnector(url=mysql_url).connect() as conn:
        got = {s.table: s for s in fleet_status(list(cfgs.values()), conn, store)}
    state = {what: got[cfg.name].state for what, cfg in cfgs.items()}
    assert state == {
        "ok": "ok",
        "behind": "behind",
        "failed": "failed",
        "never": "never_synced",
        "empty": "empty",
    }
    ok, behind = got[cfgs["ok"].name], got[cfgs["behind"].name]
    assert ok.lag_seconds == 0 and ok.needs is None
    assert ok.last_run == "run-1" and ok.last_result == "extract success, load success"
    assert behind.lag_seconds == timedelta(hours=27, microseconds=-1).total_seconds()
    assert "s3rs sync -t" in behind.needs
    assert "COPY refused" in got[cfgs["failed"].name].needs
    order = [s.table for s in fleet_status_sorted(cfgs, mysql_url, store)]
    assert order[-1] == cfgs["empty"].name
    assert order.index(cfgs["behind"].name) < order.index(cfgs["ok"].name)


def fleet_status_sorted(cfgs, mysql_url, store):
    with MySQLConnector(url=mysql_url).connect() as conn:
        return fleet_status(list(cfgs.values()), conn, store)


@pytest.fixture
def env(monkeypatch, tmp_path, mysql_url, bucket):
    def configure(cfgs) -> None:
        path = tmp_path / "tables.yaml"
        path.write_text(
            yaml.safe_dump(
                {"tables": [{"name": c.name, "start": "2025-03-04", "lag": "0s"} for c in cfgs]}
            )
        )
        monkeypatch.setenv("S3RS_TABLES", str(path))

    monkeypatch.setenv("S3RS_S3_BUCKET", bucket)
    monkeypatch.setenv("S3RS_S3_PREFIX", "s3rs")
    monkeypatch.setenv("S3RS_MYSQL_URL", mysql_url)
    for var in ("S3RS_LOG_FORMAT", "S3RS_SSH_HOST", "S3RS_SOURCE_TIMEZONE"):
        monkeypatch.delenv(var, raising=False)
    yield configure
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, "_s3rs_handler", False)]:
        root.removeHandler(h)


def invoke(*args: str):
    return CliRunner().invoke(cli.main, list(args), catch_exceptions=False)


def test_status_command_json_and_exit_codes(fleet, env, monkeypatch, mysql_db):
    cfgs, _ = fleet
    env(list(cfgs.values()))

    r = invoke("status", "--json")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.output)
    assert doc["exit_code"] == 1
    assert doc["tables"][-1]["state"] == "empty"
    assert {t["state"] for t in doc["tables"]} == {
        "ok",
        "behind",
        "failed",
        "never_synced",
        "empty",
    }

    r = invoke("status", "-t", cfgs["ok"].name, "-t", cfgs["empty"].name)
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[0].split()[:3] == ["TABLE", "STATE", "LAG"]
    assert "1 empty, 1 ok" in r.output

    r = invoke("status", "-t", cfgs["behind"].name)
    assert r.exit_code == 1 and "need a person" in r.output

    monkeypatch.setenv("S3RS_MYSQL_URL", f"mysql://root:pw@127.0.0.1:1/{mysql_db}")
    r = invoke("status")
    assert r.exit_code == 2 and ":pw@" not in r.output


def test_status_costs_per_schema_not_per_table(
    monkeypatch, mysql_db, mysql_url, s3_resource, tmp_path
):
    calls = Calls(monkeypatch)
    store = store_for(s3_resource)
    cache = BodyCache(tmp_path)  # below LIST_AT there is no listed ETag: neither read nor kept
    counts = []
    for n in (4, 30):
        cfgs = make_fleet([mysql_db], n, store)
        assert len(cfgs) < LIST_AT
        with MySQLConnector(url=mysql_url).connect() as conn:
            statuses = calls.run(
                lambda cfgs=cfgs, conn=conn: fleet_status(cfgs, conn, store, cache=cache)
            )
        assert len(statuses) == n + 1
        # the fleet's records were written without a load: every table is behind
        assert {s.state for s in statuses} == {"behind", "empty"}
        counts.append((len(calls.sql), calls.s3["ListObjectsV2"], calls.s3["GetObject"]))
    (sql4, lists4, gets4), (sql30, lists30, gets30) = counts
    assert sql4 == sql30 <= 4  # clock, catalog (2), newest cursors (1)
    assert lists4 == lists30 == 0  # no listing, and no recovery search for the never synced
    assert (gets4, gets30) == (4 + 1, 30 + 1)  # one GET per table (the empty one's: 404)
    assert not tmp_path.joinpath("watermarks").exists()


def test_caught_up_check_warns_for_the_tables_behind(fleet, mysql_url, s3_resource):
    import dagster as dg

    from s3rs_assets.freshness import build_freshness_checks, build_freshness_schedule
    from s3rs_assets.names import asset_key
    from s3rs_assets.resources import MySQLResource
    from s3rs_assets_tests.test_sensors import stand_in_assets

    cfgs, _ = fleet
    tables = list(cfgs.values())
    checks = build_freshness_checks(tables)
    assert len(checks) == 1  # one op for every table
    (schedule,) = build_freshness_schedule(tables)
    defs = dg.Definitions(
        assets=[a for c in tables for a in stand_in_assets(c)],
        asset_checks=checks,
        schedules=[schedule],
        resources={"mysql": MySQLResource(url=mysql_url), "s3": s3_resource},
    )
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(schedule.job_name).execute_in_process(instance=instance)
    evals = {e.asset_key: e for e in result.get_asset_check_evaluations()}
    passed = {what: evals[asset_key(c, "redshift_table")].passed for what, c in cfgs.items()}
    assert passed == {"ok": True, "behind": False, "failed": False, "never": False, "empty": True}
    behind = evals[asset_key(cfgs["behind"], "redshift_table")]
    assert behind.severity == dg.AssetCheckSeverity.WARN
    assert behind.metadata["lag_seconds"].value > 3600


@pytest.fixture
def cached_fleet(monkeypatch, tmp_path, env, mysql_db, s3_resource):
    """LIST_AT + 8 tables (and one empty) configured for `s3rs status`, a record cache in
    tmp_path, and `look()`: one `s3rs status --json` with its S3 requests counted."""
    calls = Calls(monkeypatch)
    store = store_for(s3_resource)
    cfgs = make_fleet([mysql_db], LIST_AT + 8, store)
    env(cfgs)
    cache = tmp_path / "cache"
    monkeypatch.setenv("S3RS_CACHE_DIR", str(cache))

    def look() -> tuple[dict, Counter]:
        r = calls.run(lambda: invoke("status", "--json"))
        assert r.exit_code == 1, r.output  # the fleet's records were written without a load
        return {t["table"]: t for t in json.loads(r.output)["tables"]}, calls.s3

    return cfgs, store, cache, look


def test_a_second_status_reads_only_the_changed_record(cached_fleet):
    cfgs, store, _, look = cached_fleet
    synced = len(cfgs) - 1
    cold, s3 = look()
    # one LIST finds the records (the empty table's is missing: no GET, no 404)
    assert s3 == Counter({"HeadBucket": 1, "ListObjectsV2": 1, "GetObject": synced})
    assert {t["state"] for t in cold.values()} == {"behind", "empty"}

    warm, s3 = look()
    assert s3 == Counter({"HeadBucket": 1, "ListObjectsV2": 1})  # every body from the cache
    assert warm == cold

    changed = cfgs[17]
    loaded_record(store, changed, D + timedelta(hours=2, microseconds=1))
    after, s3 = look()
    assert s3 == Counter({"HeadBucket": 1, "ListObjectsV2": 1, "GetObject": 1})
    assert after[changed.name]["state"] == "ok"
    assert {k: v for k, v in after.items() if k != changed.name} == {
        k: v for k, v in cold.items() if k != changed.name
    }

    # changed behind the cache to a body of the same size: its ETag (MD5) differs
    other = cfgs[3]
    key = store.layout.watermark_primary(other.name)
    body = store.client.get_object(Bucket=store.bucket, Key=key)["Body"].read()
    was = re.search(rb'"mysql_status":"(\w+)"', body).group(1)
    assert len(was) == 7  # pending, running, partial, success: swap for another of 7
    now = b"running" if was != b"running" else b"pending"
    same_size = body.replace(b'"mysql_status":"' + was, b'"mysql_status":"' + now)
    assert len(same_size) == len(body) and same_size != body
    store.client.put_object(Bucket=store.bucket, Key=key, Body=same_size)
    seen, s3 = look()
    assert s3["GetObject"] == 1
    assert seen[other.name]["last_result"].startswith(f"extract {now.decode()},")


def test_a_damaged_or_unusable_cache_is_a_miss_and_holds_no_secret(
    cached_fleet, monkeypatch, tmp_path, mysql_url
):
    cfgs, store, cache, look = cached_fleet
    synced = len(cfgs) - 1
    secret = f"sk-{uuid.uuid4().hex}"  # moto takes any key: a secret we can search for
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    cold, _ = look()
    (pack,) = (cache / "watermarks").iterdir()  # one file for the listed prefix
    assert re.fullmatch(r"[0-9a-f]{64}\.pack", pack.name)  # no bucket, key or credential
    assert stat.S_IMODE((cache / "watermarks").stat().st_mode) == 0o700
    assert stat.S_IMODE(pack.stat().st_mode) == 0o600
    data = pack.read_bytes()
    for text in (secret, os.environ["AWS_ACCESS_KEY_ID"], mysql_url, store.bucket):
        assert text.encode() not in data

    def damaged(content: bytes) -> tuple[int, int]:
        """GETs of the look after the pack was replaced by `content`, and of the next."""
        pack.write_bytes(content)
        seen, s3 = look()
        assert seen == cold
        gets = s3["GetObject"]
        seen, s3 = look()  # the look before saved a whole pack again
        assert seen == cold
        return gets, s3["GetObject"]

    flipped = bytearray(data)
    flipped[-10] ^= 0x01  # one bit of the last body
    assert damaged(bytes(flipped)) == (1, 0)
    half, after = damaged(data[: len(data) // 2])  # truncated: the bodies cut off are read
    assert 0 < half < synced and after == 0
    assert damaged(b"not a pack") == (synced, 0)
    assert damaged(b'{"entries": [["x", -1]]}\n') == (synced, 0)

    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache directory should be")
    monkeypatch.setenv("S3RS_CACHE_DIR", str(blocked))
    unusable, s3 = look()
    assert s3["GetObject"] == synced and unusable == cold
    monkeypatch.setenv("S3RS_CACHE_DIR", "off")
    off, s3 = look()
    assert s3["GetObject"] == synced and off == cold
