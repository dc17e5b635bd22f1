"""The `s3rs` command line against the real local stack: MariaDB, moto S3, PostgreSQL, Dagster.

Watermark, s3clean, discover and verify tests need no Spark. The sync tests run a handful
of in-process Dagster runs on tiny tables (they share the test session's SparkSession).
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from s3rs_assets import cli, times
from s3rs_assets.config import TableConfig, load_tables
from s3rs_assets.load import ledger_versions
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets.watermark import Position
from s3rs_assets_tests.cli_stack import (
    PREFIX,
    Stack,
    day,
    empty_warehouse,
    invoke,
    key_of,
    mysql,
    pg,
    seed,
    today,
)
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import insert_rows, list_keys, make_ties_table

# ------------------------------------------------------------------------- watermark get


def test_get_without_watermark(stack):
    name = stack.name("cli_wm")
    result = invoke("watermark", "get", "-t", name)
    assert result.exit_code == 0
    assert f"No watermark for {name} yet: the first sync starts at {key_of(day(10))}" in (
        result.output)
    assert json.loads(invoke("watermark", "get", "-t", name, "--json").stdout) is None


def test_get_shows_both_stages_partitions_files_and_next_start(stack):
    seed(stack)
    name = stack.name("cli_wm")
    out = invoke("watermark", "get", "-t", name).output
    assert f"Watermark for {name}" in out
    assert "MySQL -> S3 backup stage" in out and "S3 -> Redshift load stage" in out
    assert "rows extracted:       190" in out  # 6 complete x (10 + 20) + 10 partial
    assert "S3 files:             13" in out
    assert "files loaded:         10" in out
    assert f"{key_of(day(4))}  partial " in out and f"{key_of(day(5))}  complete" in out
    cursor = Position(c=day(4) + timedelta(hours=6), pk=[400])
    assert f"Next sync starts from: partition {key_of(day(4))} at {cursor}" in out
    assert ".parquet" not in out
    files = invoke("watermark", "get", "-t", name, "--show-files").output
    assert f"{stack.db}/cli_wm/{key_of(day(6))}/part-1.parquet  (10 rows, " in files
    assert files.count("  loaded\n") + files.rstrip().endswith("loaded") >= 10
    doc = json.loads(invoke("watermark", "get", "-t", name, "--json").stdout)
    assert doc["table_name"] == name and doc["mysql_rows_extracted"] == 190
    assert set(doc["partitions"]) == {key_of(day(n)) for n in range(4, 11)}


# ------------------------------------------------------------------------- watermark set


def test_set_marks_before_complete_cuts_the_partition_and_drops_later_ones(stack):
    seed(stack)
    name = stack.name("cli_wm")
    ts = day(7) + timedelta(hours=12)
    before = stack.etag("cli_wm")
    result = invoke("watermark", "set", "-t", name, "--timestamp", f"{ts:%Y-%m-%d %H:%M:%S}",
                    "--yes")
    assert result.exit_code == 0, result.output
    assert stack.etag("cli_wm") != before
    out = result.output
    assert "backup_strategy: dagster -> manual_cli" in out
    assert f"manual_timestamp: - -> {ts:%Y-%m-%d %H:%M:%S}" in out
    assert f"{key_of(day(5))}: complete, 30 rows in 2 files" in out
    assert "-> absent (read again)" in out
    assert f"saved: next sync starts from partition {key_of(day(7))} at " in out
    rec = stack.store.read(name)
    assert rec.backup_strategy == "manual_cli" and rec.manual_timestamp == ts
    # before ts: complete; the seeded ones keep their files
    for n in (10, 9, 8):
        p = rec.partitions[key_of(day(n))]
        assert p.status == "complete" and len(p.files) == 2
    # the partition holding ts resumes at (ts, start), keeping only files wholly before ts
    p = rec.partitions[key_of(day(7))]
    assert p.status == "partial" and p.cursor == Position(c=ts, pk=None)
    assert [f.key.rsplit("/", 1)[1] for f in p.files] == ["part-1.parquet"]
    # later partitions are gone from the record: the next sync reads them again
    assert not {key_of(day(n)) for n in range(0, 7)} & set(rec.partitions)
    assert rec.mysql_rows_extracted == 3 * 30 + 10
    # the load mirror follows the manifests (the ledger is the truth for it)
    assert set(rec.loaded_partitions) == {key_of(day(n)) for n in range(7, 11)}
    got = invoke("watermark", "get", "-t", name).output
    assert f"Manual watermark: set by hand to {ts:%Y-%m-%d %H:%M:%S}" in got
    assert f"Next sync starts from: partition {key_of(day(7))} at ({ts.isoformat()}" in got


def test_set_inside_a_file_keeps_the_file_that_straddles_it(stack):
    """Issue 16 item 1: the rows of a file before the new position exist nowhere else."""
    seed(stack)
    name = stack.name("cli_wm")
    ts = day(7) + timedelta(hours=3)  # inside part-1 (01:00-06:00)
    r = invoke("watermark", "set", "-t", name, "--timestamp", f"{ts:%Y-%m-%d %H:%M:%S}", "-y")
    assert r.exit_code == 0, r.output
    p = stack.store.read(name).partitions[key_of(day(7))]
    assert [f.key.rsplit("/", 1)[1] for f in p.files] == ["part-1.parquet"]
    assert p.cursor == Position(c=ts, pk=None) and p.status == "partial"
    # and it is not an orphan: s3clean would never delete it as unneeded
    _ledger(stack, "cli_wm", [])
    doc = json.loads(invoke("s3clean", "list", "-t", name, "--json").stdout)
    states = {f["key"].rsplit("/", 2)[1] + "/" + f["key"].rsplit("/", 1)[1]: f["state"]
              for f in doc["files"]}
    assert states[f"{key_of(day(7))}/part-1.parquet"] == "unloaded"


def test_set_on_a_new_table_closes_earlier_partitions_as_one_range(stack):
    name = stack.name("cli_other")
    result = invoke("watermark", "set", "-t", name, "--timestamp", key_of(day(3)), "-y")
    assert result.exit_code == 0, result.output
    assert f"{key_of(day(10))} .. {key_of(day(4))}: 7 empty partitions closed" in result.output
    rec = stack.store.read(name)
    assert all(rec.is_complete(key_of(day(n)), day(n), day(n - 1)) for n in range(10, 3, -1))
    assert list(rec.partitions) == [key_of(day(3))] and len(rec.closed) == 1
    assert rec.partitions[key_of(day(3))].cursor == Position(c=day(3), pk=None)
    assert rec.partitions[key_of(day(3))].status == "partial"


def test_set_across_twenty_quiet_years_keeps_the_record_small(stack):
    """A 20-year daily table: `set` closes the 7,270 days before TS as one range (not one
    entry per day), `get` shows it as one line, and a later `set` to an earlier time
    re-opens what lies after it."""
    from s3rs_assets.partitions import partition_keys

    name = stack.name("cli_long")
    cfg = next(t for t in load_tables() if t.name == name)
    keys = partition_keys(cfg)
    held = keys.index(key_of(day(30)))
    r = invoke("watermark", "set", "-t", name, "--timestamp", key_of(day(30)), "--yes")
    assert r.exit_code == 0, r.output
    line = f"{keys[0]} .. {key_of(day(31))}: {held:,} empty partitions closed"
    assert line in r.output and held > 7200
    rec = stack.store.read(name)
    assert list(rec.partitions) == [key_of(day(30))] and len(rec.closed) == 1
    assert len(rec.to_json().encode()) < 4096
    got = invoke("watermark", "get", "-t", name).output
    assert "Closed (complete, empty) partitions" in got and line in got
    assert got.count(" empty partitions closed") == 1
    assert f"Next sync starts from: partition {key_of(day(30))} at " in got
    # back to an earlier point: the days after it are no longer closed
    r = invoke("watermark", "set", "-t", name, "--timestamp", key_of(day(400)), "--yes")
    assert r.exit_code == 0, r.output
    rec = stack.store.read(name)
    assert list(rec.partitions) == [key_of(day(400))] and len(rec.closed) == 1
    assert rec.closed[0].end == day(400)
    assert not rec.is_complete(key_of(day(100)), day(100), day(99))
    # reset drops the closed ranges too: every partition is read again
    assert invoke("watermark", "reset", "-t", name, "--yes").exit_code == 0
    rec = stack.store.read(name)
    assert rec.closed == [] and rec.partitions == {}


@pytest.mark.parametrize(("text", "delta"), [("2d", timedelta(days=2)),
                                             ("1week", timedelta(days=7)),
                                             ("36h", timedelta(hours=36))])
def test_set_relative_times(stack, text, delta):
    name = stack.name("cli_other")
    t0 = datetime.now()
    assert invoke("watermark", "set", "-t", name, "--timestamp", text, "--yes").exit_code == 0
    got = stack.store.read(name).manual_timestamp
    assert abs((t0 - delta) - got) < timedelta(seconds=30)


def test_relative_month_is_a_calendar_month():
    assert times.parse_relative("1month", datetime(2025, 3, 31, 8), "t") == datetime(2025, 2, 28, 8)
    assert times.parse_relative("2months", datetime(2025, 1, 15), "t") == datetime(2024, 11, 15)
    assert times.parse_age("1week", "--older-than") == timedelta(days=7)


def test_set_asks_before_writing_and_dry_run_writes_nothing(stack):
    seed(stack)
    name = stack.name("cli_wm")
    etag, listing = stack.etag("cli_wm"), stack.listing()
    ts = f"{day(5):%Y-%m-%d} 00:00:00"
    dry = invoke("watermark", "set", "-t", name, "--timestamp", ts, "--dry-run")
    assert dry.exit_code == 0 and "dry run: nothing written." in dry.output
    assert "next sync starts from: partition" in dry.output and " -> " in dry.output
    declined = invoke("watermark", "set", "-t", name, "--timestamp", ts, input="n\n")
    assert declined.exit_code == 1 and "Aborted" in declined.output
    no_tty = invoke("watermark", "set", "-t", name, "--timestamp", ts)  # EOF: not confirmed
    assert no_tty.exit_code == 1
    assert stack.etag("cli_wm") == etag and stack.listing() == listing
    accepted = invoke("watermark", "set", "-t", name, "--timestamp", ts, input="y\n")
    assert accepted.exit_code == 0 and "Apply this change?" in accepted.output
    assert stack.store.read(name).manual_timestamp == day(5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2024-02-30", "invalid timestamp '2024-02-30': day is out of range for month"),
        ("2024-02-30 10:00:00", "day is out of range for month"),
        ("2025-13-01", "invalid timestamp '2025-13-01'"),
        ("banana", "invalid timestamp 'banana': expected 'YYYY-MM-DD HH:MM:SS[.ffffff]'"),
        ("2999-01-01 00:00:00", "is in the future of the source clock"),
        ("3 fortnights", "unknown unit 'fortnights'"),
        ("1month", "is before"),  # before the table's first partition (start = 10 days ago)
    ],
)
def test_invalid_timestamps_change_nothing(stack, text, message):
    seed(stack)
    etag, listing = stack.etag("cli_wm"), stack.listing()
    result = invoke("watermark", "set", "-t", stack.name("cli_wm"), "--timestamp", text, "--yes")
    assert result.exit_code == 2, result.output
    assert message in result.output and "error:" in result.output
    assert stack.etag("cli_wm") == etag and stack.listing() == listing


def test_set_refuses_when_the_record_moved_since_it_was_shown(stack, monkeypatch):
    seed(stack)
    name = stack.name("cli_wm")

    def concurrent_run(*_a, **_k):  # a run checkpoints while the operator reads the diff
        def checkpoint(rec):
            rec.partitions[key_of(day(4))].cursor = Position(c=day(4) + timedelta(hours=7),
                                                             pk=[1])
        stack.store.update(name, checkpoint)
        return True

    monkeypatch.setattr(cli.click, "confirm", concurrent_run)
    result = invoke("watermark", "set", "-t", name, "--timestamp", key_of(day(6)))
    assert result.exit_code == 2
    assert "changed since it was shown" in result.output
    rec = stack.store.read(name)
    assert rec.backup_strategy != "manual_cli"  # the run's progress was not overwritten
    assert rec.partitions[key_of(day(4))].cursor.c == day(4) + timedelta(hours=7)


# ----------------------------------------------------------------------- watermark reset


def test_reset_variants(stack):
    seed(stack)
    name = stack.name("cli_wm")
    primary = stack.resource.layout.watermark_primary(name)
    r = invoke("watermark", "reset", "-t", name, "--mysql-only", "--yes")
    assert r.exit_code == 0, r.output
    assert f"read again from {key_of(day(10))}" in r.output
    assert "s3_file_count: 13 -> 0" in r.output
    rec = stack.store.read(name)
    assert rec.partitions == {} and rec.mysql_rows_extracted == 0
    # the load side summarises the manifests: no manifest, nothing counted as loaded
    assert rec.loaded_partitions == {} and rec.redshift_rows_loaded == 0
    assert rec.mysql_status == "pending"
    assert f"Next sync starts from: partition {key_of(day(10))} at ({key_of(day(10))} " in (
        invoke("watermark", "get", "-t", name).output)

    # --redshift-only asks the truth: the warehouse ledger forgets the table's files
    rec = seed(stack)
    loaded = sorted(rec.processed_s3_files)
    _ledger(stack, "cli_wm", loaded)
    wh = WarehouseResource(url=stack.pg_url)
    assert len(ledger_versions(wh, stack.db, "cli_wm")) == len(loaded) == 10
    dry = invoke("watermark", "reset", "-t", name, "--redshift-only", "--dry-run")
    assert dry.exit_code == 0 and "10 file version(s) -> 0" in dry.output
    assert len(ledger_versions(wh, stack.db, "cli_wm")) == 10
    r = invoke("watermark", "reset", "-t", name, "--redshift-only", "--yes")
    assert r.exit_code == 0, r.output
    assert "load mirror: 10 files -> 0 files" in r.output
    assert "load ledger: 10 entries of" in r.output
    assert ledger_versions(wh, stack.db, "cli_wm") == set()
    rec = stack.store.read(name)
    assert rec.loaded_partitions == {} and rec.redshift_status == "pending"
    # the primary is rewritten, never deleted (recovery would bring the old one back)
    assert stack.s3.head_object(Bucket=stack.bucket, Key=primary)

    seed(stack)
    r = invoke("watermark", "reset", "-t", name, "--yes")
    assert r.exit_code == 0 and "both stages" in r.output
    rec = stack.store.read(name)
    assert rec.partitions == {} and rec.loaded_partitions == {}
    again = invoke("watermark", "reset", "-t", name, "--yes")
    assert again.exit_code == 0 and "nothing to change." in again.output


def test_reset_of_the_load_side_with_the_warehouse_down_changes_nothing(stack, monkeypatch):
    seed(stack)
    etag = stack.etag("cli_wm")
    monkeypatch.setenv("S3RS_REDSHIFT_URL", "postgresql://postgres:pw@127.0.0.1:1/nowhere")
    r = invoke("watermark", "reset", "-t", stack.name("cli_wm"), "--redshift-only", "--yes")
    assert r.exit_code == 2 and "cannot connect" in r.output and ":pw@" not in r.output
    assert stack.etag("cli_wm") == etag


def test_reset_of_a_table_without_watermark_writes_nothing(stack):
    listing = stack.listing()
    r = invoke("watermark", "reset", "-t", stack.name("cli_other"), "--yes")
    assert r.exit_code == 0 and "nothing to change: " in r.output
    assert "has no watermark yet" in r.output
    assert stack.listing() == listing


def test_reset_dry_run_and_declined(stack):
    seed(stack)
    etag = stack.etag("cli_wm")
    r = invoke("watermark", "reset", "-t", stack.name("cli_wm"), "--dry-run")
    assert r.exit_code == 0 and "dry run: nothing written." in r.output
    r = invoke("watermark", "reset", "-t", stack.name("cli_wm"), input="no\n")
    assert r.exit_code == 1
    assert stack.etag("cli_wm") == etag


# ------------------------------------------------------------------------ watermark list


def test_list_text_and_json(stack):
    seed(stack)
    invoke("watermark", "set", "-t", stack.name("cli_other"), "--timestamp", "3d", "--yes")
    stack.store.update("elsewhere.stray", lambda rec: None)  # a watermark nobody configures
    out = invoke("watermark", "list").output
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert out.splitlines()[0].split()[:3] == ["TABLE", "BACKUP", "LOAD"]
    wm = lines[stack.name("cli_wm")]
    assert "success" in wm and "190" in wm and f"{key_of(day(4))} 06:00:00" in wm
    assert "(manual)" in lines[stack.name("cli_other")]
    assert "never" in lines[stack.name("cli_orders")]
    assert "not in tables.yaml" in lines["elsewhere.stray"]
    rows = {r["table"]: r for r in json.loads(invoke("watermark", "list", "--json").stdout)}
    w = rows[stack.name("cli_wm")]
    assert w["mysql_status"] == "success" and w["rows_extracted"] == 190
    assert w["next_partition"] == key_of(day(4))
    assert 4 * 86400 - 6 * 3600 - 600 < w["lag_seconds"] < 5 * 86400
    assert 0 <= w["age_seconds"] < 600
    assert rows[stack.name("cli_other")]["backup_strategy"] == "manual_cli"
    assert rows[stack.name("cli_orders")]["has_watermark"] is False
    assert rows["elsewhere.stray"]["configured"] is False


# ------------------------------------------------------- watermark backup status/cleanup


def test_backup_status_and_cleanup(stack):
    seed(stack)
    name = stack.name("cli_wm")
    out = invoke("watermark", "backup-status", "-t", name).output
    assert f"Watermark copies of {name}  (healthy)" in out
    assert "primary  valid" in out and "daily    valid" in out and "same as primary" in out
    doc = json.loads(invoke("watermark", "backup-status", "-t", name, "--json").stdout)
    assert doc["healthy"] and doc["primary"]["valid"] and doc["session"]["count"] >= 1
    primary = stack.resource.layout.watermark_primary(name)
    dry = invoke("watermark", "cleanup-backups", "--days-to-keep", "0", "--dry-run", "--json")
    report = json.loads(dry.stdout)
    assert report["dry_run"] and report["keys"] and primary not in report["keys"]
    listing = stack.listing()
    assert all(k in listing for k in report["keys"])
    real = invoke("watermark", "cleanup-backups", "--days-to-keep", "0")
    assert real.exit_code == 0 and "deleted" in real.output
    after = stack.listing()
    assert primary in after
    assert not any(k in after for k in report["keys"])
    assert stack.store.read(name).mysql_rows_extracted == 190
    bad = invoke("watermark", "cleanup-backups", "--days-to-keep", "-1")
    assert bad.exit_code == 2


# ------------------------------------------------------------ invalid input, everywhere


@pytest.mark.parametrize(
    "args",
    [
        ["watermark", "get", "-t", "{db}.nope"],
        ["watermark", "set", "-t", "{db}.nope", "--timestamp", "1d", "--yes"],
        ["watermark", "reset", "-t", "{db}.nope", "--yes"],
        ["watermark", "backup-status", "-t", "{db}.nope"],
        ["sync", "-t", "{db}.nope"],
        ["sync", "-t", "{db}.cli_orders", "-t", "{db}.nope"],
        ["s3clean", "list", "-t", "{db}.nope"],
        ["s3clean", "clean", "-t", "{db}.nope", "--force"],
        ["verify", "-t", "{db}.nope"],
    ],
)
def test_unknown_table_changes_nothing(stack, args):
    seed(stack)
    listing = stack.listing()
    result = invoke(*[a.format(db=stack.db) for a in args])
    assert result.exit_code == 2
    assert f"unknown table '{stack.db}.nope'" in result.output
    assert "Traceback" not in result.output
    assert stack.listing() == listing


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sync", "-t", "{db}.cli_orders", "--backup-only", "--redshift-only"],
         "--backup-only and --redshift-only exclude each other"),
        (["sync", "--all", "-t", "{db}.cli_orders"], "give either --all or -t/--table"),
        (["sync"], "name a table with -t"),
        (["sync", "-t", "{db}.cli_orders", "--redshift-only", "--limit", "5"],
         "--limit applies to the backup stage"),
        (["sync", "-t", "{db}.cli_orders", "--limit", "0"], "0 is not in the range x>=1"),
        (["watermark", "reset", "-t", "{db}.cli_wm", "--mysql-only", "--redshift-only"],
         "--mysql-only and --redshift-only exclude each other"),
        (["watermark", "set", "-t", "{db}.cli_wm"], "Missing option '--timestamp'"),
        (["s3clean", "clean", "-t", "{db}.cli_files", "--older-than", "banana"],
         "invalid --older-than 'banana'"),
        (["s3clean", "clean-all", "--older-than", "7 parsecs"], "unknown unit 'parsecs'"),
        (["s3clean", "clean-all"], "Missing option '--older-than'"),
        (["verify", "-t", "{db}.cli_verify", "--from", "1999-01-01"],
         "--from '1999-01-01' is not a partition"),
        (["watermark", "get", "-t", "not-a-table"], "invalid table 'not-a-table'"),
        (["watermark", "get", "-t", "a.b;drop"], "invalid table name"),
    ],
)
def test_bad_flags_change_nothing(stack, args, message):
    seed(stack)
    seed(stack, "cli_files")
    listing = stack.listing()
    result = invoke(*[a.format(db=stack.db) for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert stack.listing() == listing


def test_unreachable_mysql_is_a_clear_error(stack, monkeypatch):
    seed(stack)
    etag = stack.etag("cli_wm")
    monkeypatch.setenv("S3RS_MYSQL_URL", f"mysql://root:pw@127.0.0.1:1/{stack.db}")
    result = invoke("watermark", "set", "-t", stack.name("cli_wm"), "--timestamp", "1d", "-y")
    assert result.exit_code == 2
    assert "cannot connect to MySQL at mysql://root:***@127.0.0.1:1/" in result.output
    assert stack.etag("cli_wm") == etag


# -------------------------------------------------------------------------------- s3clean


def _ledger(stack: Stack, table: str, keys: list[str], md5: str | None = None) -> None:
    """Ledger rows for `keys`, with the md5 of their current S3 content unless given."""
    from s3rs_assets.load.sql import LEDGER_COLUMNS, create_ledger_sql, ledger_insert_sql

    schema = stack.db
    with pg(stack) as c:
        c.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        c.execute(create_ledger_sql(schema))
        c.execute(f'DELETE FROM "{schema}".s3rs_load_ledger WHERE table_name = %s', (table,))
        if keys:  # entries count only while their target exists and holds rows
            c.execute(f'CREATE TABLE IF NOT EXISTS "{schema}"."{table}" (id BIGINT)')
            c.execute(f'INSERT INTO "{schema}"."{table}" SELECT 1 WHERE NOT EXISTS '
                      f'(SELECT 1 FROM "{schema}"."{table}")')
        for k in keys:
            row = dict.fromkeys(LEDGER_COLUMNS)
            etag = md5 or stack.s3.head_object(Bucket=stack.bucket, Key=k)["ETag"].strip('"')
            row.update(table_name=table, file_key=k, file_md5=etag, partition_key="p",
                       source_name=f"{schema}.{table}", row_count=10, byte_count=1,
                       load_id="t", loaded_at=datetime.now())
            c.execute(ledger_insert_sql(schema, 1), [row[col] for col in LEDGER_COLUMNS])


@pytest.fixture
def files(stack):
    """cli_files: 13 files in manifests, 9 of them loaded per the ledger (the watermark's
    mirror claims 10), and 2 orphans in S3 that no manifest lists."""
    rec = seed(stack, "cli_files")
    keys = sorted(f.key for p in rec.partitions.values() for f in p.files)
    loaded = sorted(rec.processed_s3_files)
    extra = f"{PREFIX}/data/{stack.db}/cli_files/{key_of(day(4))}/part-orphan.parquet"
    stack.s3.put_object(Bucket=stack.bucket, Key=extra, Body=b"orphan")
    in_s3 = set(list_keys(stack.s3, stack.bucket, f"{PREFIX}/data/{stack.db}/cli_files/"))
    _ledger(stack, "cli_files", loaded[1:])
    out = {"loaded": loaded[1:], "unloaded": sorted(set(keys) - set(loaded[1:])),
           "orphans": sorted(in_s3 - set(keys)), "mirror": loaded}
    assert (len(out["loaded"]), len(out["unloaded"]), len(out["orphans"])) == (9, 4, 2)
    return out


def test_s3clean_list(stack, files):
    out = invoke("s3clean", "list", "-t", stack.name("cli_files")).output
    assert f"{stack.name('cli_files')}: 15 file(s)" in out
    assert "load state from warehouse load ledger (postgresql://postgres:***@" in out
    assert "9 loaded, 4 unloaded, 2 orphan" in out
    doc = json.loads(invoke("s3clean", "list", "-t", stack.name("cli_files"), "--json").stdout)
    states = {f["key"]: f["state"] for f in doc["files"]}
    assert {k for k, s in states.items() if s == "orphan"} == set(files["orphans"])
    assert {k for k, s in states.items() if s == "loaded"} == set(files["loaded"])
    assert not any("/watermarks/" in k for k in states)


def test_s3clean_clean_keeps_unloaded_force_deletes_them_dry_run_deletes_nothing(stack, files):
    name = stack.name("cli_files")
    wm = {k: v for k, v in stack.listing().items() if "/watermarks/" in k}
    assert wm
    before = stack.listing()
    young = invoke("s3clean", "clean", "-t", name, "--older-than", "7d")
    assert young.exit_code == 0 and "deleted 0 file(s) older than 7d" in young.output
    dry = invoke("s3clean", "clean", "-t", name, "--dry-run")
    assert dry.exit_code == 0 and "would delete 9 file(s)" in dry.output
    assert "kept 6 not yet loaded" in dry.output
    assert stack.listing() == before

    real = invoke("s3clean", "clean", "-t", name, "--older-than", "0s", "--json")
    assert real.exit_code == 0
    report = json.loads(real.stdout)
    assert sorted(report["deleted"]) == files["loaded"]
    assert set(report["kept_unloaded"]) == set(files["unloaded"]) | set(files["orphans"])
    after = stack.listing()
    assert not set(files["loaded"]) & set(after)
    assert set(files["unloaded"]) | set(files["orphans"]) <= set(after)
    # manifests still list the deleted files as loaded history
    assert stack.store.read(name).s3_file_count == 13

    forced = invoke("s3clean", "clean", "-t", name, "--force")
    assert forced.exit_code == 0
    assert "deleted 6 file(s)" in forced.output
    assert "note: 4 were in a partition manifest but not loaded yet" in forced.output
    left = stack.listing()
    assert not [k for k in left if "/data/" in k and "cli_files" in k]
    assert {k: v for k, v in left.items() if "/watermarks/" in k}.keys() >= wm.keys()


def test_s3clean_keeps_a_loaded_key_whose_content_changed(stack, files):
    # a chunk read again (after `watermark set`) overwrote a loaded key with new rows:
    # the ledger holds the old md5, so the new content is not loaded yet
    key = files["loaded"][0]
    stack.s3.put_object(Bucket=stack.bucket, Key=key, Body=b"re-extracted rows")
    doc = json.loads(invoke("s3clean", "list", "-t", stack.name("cli_files"), "--json").stdout)
    assert {f["key"]: f["state"] for f in doc["files"]}[key] == "unloaded"
    r = invoke("s3clean", "clean", "-t", stack.name("cli_files"), "--json")
    assert key in json.loads(r.stdout)["kept_unloaded"]
    assert key in stack.listing()


@pytest.mark.parametrize("command", ["list", "clean"])
def test_s3clean_refuses_when_the_warehouse_is_down(stack, files, monkeypatch, command):
    """The watermark's copy of the ledger claims one file more than the ledger holds:
    deciding from it would delete a file that was never loaded. No fallback: exit 2."""
    monkeypatch.setenv("S3RS_REDSHIFT_URL", "postgresql://postgres:pw@127.0.0.1:1/nowhere")
    before = stack.listing()
    r = invoke("s3clean", command, "-t", stack.name("cli_files"))
    assert r.exit_code == 2
    assert "cannot ask the warehouse's load ledger" in r.output
    assert "nothing was listed or deleted" in r.output
    assert "postgres:***@127.0.0.1:1" in r.output and ":pw@" not in r.output
    assert stack.listing() == before


def test_s3clean_clean_all(stack, files):
    seed(stack, "cli_wm")
    _ledger(stack, "cli_wm", [])
    dry = invoke("s3clean", "clean-all", "--older-than", "0d", "--dry-run", "--json")
    assert dry.exit_code == 0
    by_table = {r["table"]: r for r in json.loads(dry.stdout)}
    assert len(by_table[stack.name("cli_files")]["would_delete"]) == 9
    assert by_table[stack.name("cli_wm")]["would_delete"] == []
    assert len(by_table[stack.name("cli_wm")]["kept_unloaded"]) == 14
    real = invoke("s3clean", "clean-all", "--older-than", "0d")
    assert real.exit_code == 0
    assert f"{stack.name('cli_wm')}: deleted 0 file(s)" in real.output
    assert f"{stack.name('cli_files')}: deleted 9 file(s)" in real.output


# ------------------------------------------------------------------------ tables discover


@pytest.fixture
def disc_schema(mysql_db):
    name = f"{mysql_db}_disc"
    with mysql(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}`")
        cur.execute(f"USE `{name}`")
        cur.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, created_at DATETIME, "
                    "updated_at DATETIME(6) NOT NULL, modified_at DATETIME, "
                    "password_hash CHAR(60), api_key VARCHAR(40), tokens_used INT, "
                    "KEY (updated_at))")
        cur.execute("CREATE TABLE order_lines (order_id INT, line INT, modified_at TIMESTAMP NULL, "
                    "PRIMARY KEY (order_id, line))")
        cur.execute("CREATE TABLE audit (msg TEXT, update_time DATETIME)")
        cur.execute("CREATE TABLE events (id INT PRIMARY KEY, created_at DATETIME)")
        cur.execute("CREATE TABLE shapes (id INT PRIMARY KEY, g DECIMAL(65,30), "
                    "update_at DATETIME)")
        cur.execute("CREATE VIEW recent AS SELECT * FROM orders")
    yield name
    with mysql(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def test_tables_discover(stack, disc_schema):
    result = invoke("tables", "discover", "--schema", disc_schema)
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.output)
    entries = {e["name"]: e for e in doc["tables"]}
    assert set(entries) == {f"{disc_schema}.orders", f"{disc_schema}.order_lines"}
    assert entries[f"{disc_schema}.orders"]["cursor"] == "updated_at"  # indexed wins
    assert entries[f"{disc_schema}.orders"]["primary_key"] == ["id"]
    assert entries[f"{disc_schema}.order_lines"]["primary_key"] == ["order_id", "line"]
    assert entries[f"{disc_schema}.orders"]["exclude_columns"] == ["password_hash", "api_key"]
    assert "exclude_columns" not in entries[f"{disc_schema}.order_lines"]
    for e in doc["tables"]:
        TableConfig.from_dict(e)  # a ready stanza
    out = result.output
    assert "# other candidate cursors: modified_at" in out
    assert "modified_at has no index" in out and "modified_at is nullable" in out
    assert f"#   {disc_schema}.audit: no primary key" in out
    assert (f"#   {disc_schema}.events: no DATETIME/TIMESTAMP column named like updated_at "
            "(date/time columns: created_at)") in out
    assert f"#   {disc_schema}.shapes: column type(s) s3rs cannot carry: g (decimal(65,30))" in out
    assert f"#   {disc_schema}.recent: a view, not a table" in out


@pytest.fixture
def sized_schema(mysql_db):
    """Tables whose row counts and cursor spans call for different partition sizes, and one
    with secret-looking columns."""
    name = f"{mysql_db}_size"
    ddl = "(id BIGINT PRIMARY KEY, updated_at DATETIME(6) NOT NULL, KEY (updated_at)) "
    with mysql(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cur.execute(f"CREATE DATABASE `{name}`")
        cur.execute(f"USE `{name}`")
        for t in ("old_sample", "hot", "recent", "tiny", "blank"):
            cur.execute(f"CREATE TABLE {t} {ddl}")
        # 46,000 rows on 2006-02-14/15 (the sakila shape): 20 years of partitions to today
        cur.execute("INSERT INTO old_sample SELECT seq, '2006-02-14 20:00:00' + INTERVAL "
                    "(seq % 86400) SECOND FROM seq_1_to_46000")
        # 20,000 rows within the last 5 hours
        cur.execute("INSERT INTO hot SELECT seq, NOW() - INTERVAL (seq % 18000) SECOND "
                    "FROM seq_1_to_20000")
        # 30,000 rows over the last 3 days
        cur.execute("INSERT INTO recent SELECT seq, NOW() - INTERVAL (seq * 8) SECOND "
                    "FROM seq_1_to_30000")
        cur.execute("INSERT INTO tiny SELECT seq, NOW() - INTERVAL seq HOUR FROM seq_1_to_40")
        cur.execute("CREATE TABLE users (user_id INT PRIMARY KEY, email VARCHAR(100), "
                    "password VARCHAR(64), api_token VARCHAR(64), ssn CHAR(11), "
                    "credit_card_number VARCHAR(20), last_update TIMESTAMP NOT NULL)")
    yield name
    with mysql(mysql_db) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def test_tables_discover_proposes_partition_sizes_and_flags_secrets(stack, sized_schema):
    from s3rs_assets.discovery import MAX_PARTITIONS

    result = invoke("tables", "discover", "--schema", sized_schema)
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.output)
    sizes = {e["name"].split(".")[1]: e["partition"] for e in doc["tables"]}
    assert sizes == {"old_sample": "weekly", "hot": "hourly", "recent": "daily",
                     "tiny": "monthly", "blank": "daily", "users": "daily"}
    for e in doc["tables"]:
        TableConfig.from_dict(e)  # still a ready stanza
    out = result.output
    assert "# 46,000 rows over 2006-02-14..2006-02-15, ~46,000 rows per partition with data" in out
    weeks = next(line for line in out.splitlines() if "46,000 rows over" in line)
    assert weeks.endswith("weekly partitions up to today: weekly")
    assert int(weeks.split(" weekly partitions")[0].rsplit(" ", 1)[1].replace(",", "")) <= (
        MAX_PARTITIONS)
    assert "start: 2006-02-14  # the oldest row's day" in out
    assert "# 20,000 rows over " in out and "hourly partitions up to today: hourly" in out
    assert "# 30,000 rows over " in out and "daily partitions up to today: daily" in out
    assert "# 40 rows over " in out and "monthly partitions up to today: monthly" in out
    assert "# empty table (no dated row): daily, the default" in out
    # secrets are proposed as excluded (never read from MySQL), not as a comment to act on
    assert "    exclude_columns: [password, api_token, ssn, credit_card_number]" in out
    assert out.count("exclude_columns:") == 1  # only the users table


def test_tables_discover_unknown_schema(stack):
    result = invoke("tables", "discover", "--schema", "no_such_schema_xyz")
    assert result.exit_code == 2
    assert "schema 'no_such_schema_xyz' does not exist" in result.output
    bad = invoke("tables", "discover", "--schema", "x`; drop")
    assert bad.exit_code == 2 and "invalid schema" in bad.output


# --------------------------------------------------------------------------------- verify


@pytest.fixture
def verify_table(stack):
    from s3rs_assets.load import ensure_target
    from s3rs_assets.load_stage import load_target
    from s3rs_assets.resources import MySQLResource
    from s3rs_assets.warehouse import WarehouseResource

    rows = [(i, day(2) + timedelta(hours=i % 20)) for i in range(1, 41)]
    rows += [(i, day(1) + timedelta(minutes=i)) for i in range(41, 61)]
    with mysql(stack.db) as conn:
        make_ties_table(conn, "cli_verify", rows)
    cfg = next(t for t in load_tables() if t.name == stack.name("cli_verify"))
    target = load_target(cfg, MySQLResource(url=f"mysql://root:@{MYSQL_HOST}:{MYSQL_PORT}/"
                                                f"{stack.db}"))
    ensure_target(WarehouseResource(url=stack.pg_url), target)
    with pg(stack) as c:
        c.execute(f'TRUNCATE "{stack.db}"."cli_verify"')
        with c.cursor() as cur:
            cur.executemany(
                f'INSERT INTO "{stack.db}"."cli_verify" (id, update_at, amount, note) '
                "VALUES (%s, %s, %s, %s)",
                [(i, ts, f"{i}.0001", f"row {i} ✓") for i, ts in rows],
            )
    return rows


def test_verify_match_and_mismatch(stack, verify_table):
    name = stack.name("cli_verify")
    ok = invoke("verify", "-t", name)
    assert ok.exit_code == 0, ok.output
    assert f"{name} (MySQL) vs {stack.db}.cli_verify (postgres)" in ok.output
    assert f"{key_of(day(2))}" in ok.output and " 40         0  ok" in ok.output
    assert "all match" in ok.output and "empty on both sides not shown" in ok.output
    with pg(stack) as c:
        c.execute(f'DELETE FROM "{stack.db}"."cli_verify" WHERE id = 41')
        c.execute(f'UPDATE "{stack.db}"."cli_verify" SET update_at = update_at + interval '
                  "'1 second' WHERE id = 1")
    bad = invoke("verify", "-t", name)
    assert bad.exit_code == 1
    assert f"{key_of(day(1))}" in bad.output and "MISMATCH: rows differ" in bad.output
    assert "MISMATCH: checksum of (key, cursor) differs" in bad.output
    assert "2 MISMATCH" in bad.output
    doc = json.loads(invoke("verify", "-t", name, "--json").stdout)
    assert doc["ok"] is False
    parts = {p["partition"]: p for p in doc["partitions"]}
    assert parts[key_of(day(1))]["warehouse_rows"] == 19
    assert parts[key_of(day(2))]["checksum_match"] is False
    ranged = invoke("verify", "-t", name, "--from", key_of(day(3)), "--to", key_of(day(3)))
    assert ranged.exit_code == 0 and "1 partition(s) compared" in ranged.output


def test_verify_without_warehouse_is_a_clear_error(stack, verify_table, monkeypatch):
    monkeypatch.delenv("S3RS_REDSHIFT_URL")
    r = invoke("verify", "-t", stack.name("cli_verify"))
    assert r.exit_code == 2 and "S3RS_REDSHIFT_URL is not set" in r.output


# ----------------------------------------------------------------------------------- sync


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_sync_both_stages_failed_table_named_others_run(stack, orders, monkeypatch):
    name, broken = stack.name("cli_orders"), stack.name("cli_broken")
    r = invoke("--log-format", "json", "sync", "-t", broken, "-t", name)
    # the broken table is a configuration error that changed nothing of it: exit 2
    assert r.exit_code == 2, r.output
    assert f"{name}: backup + load, partitions {key_of(day(2))} .. {key_of(today())}" in r.stdout
    assert f"{name}: run " in r.stdout and "succeeded" in r.stdout
    assert f"{broken}: error before any run: " in r.stderr
    assert "does not exist in MySQL" in r.stderr  # the reason, not a traceback
    assert f"failed: {broken}" in r.stderr and name not in r.stderr.split("failed:")[-1]
    events = _json_lines(r.stderr)
    progress = [e for e in events if e["event"] == "progress" and e["table"] == name]
    assert progress and progress[-1]["rows"] == 60
    assert {"partition", "seconds", "run_id"} <= set(progress[-1])
    # the rate needs two readings of the record: a run over before the monitor's second one
    # has none (null fields are left out of a JSON line)
    assert all(isinstance(e.get("rows_per_second", 0.0), float | int) for e in progress)
    # Dagster's console logger is silenced: every log line is JSON
    assert all(line.startswith("{") or line.startswith(("error", " ", broken, "failed:"))
               for line in r.stderr.splitlines() if line.strip())
    assert any(e["event"] == "run_log" for e in events)  # the run's own messages
    assert not any(e["event"] == "step_start" for e in events)  # Dagster's: only with -v
    # the watermark and the warehouse
    rec = stack.store.read(name)
    assert rec.mysql_rows_extracted == 60 and rec.redshift_rows_loaded == 60
    assert rec.partitions[key_of(day(2))].status == "complete"
    assert rec.partitions[key_of(today())].status == "partial"
    assert invoke("verify", "-t", name).exit_code == 0
    # the runs are in the Dagster instance the UI reads
    import dagster as dg
    with dg.DagsterInstance.from_config(str(stack.home)) as inst:
        runs = inst.get_runs()
        assert {r.tags.get("s3rs/table") for r in runs} == {name}  # broken: no run
    # daily incremental with --all: every configured table, nothing new to copy
    only = stack.home / "tables.yaml"
    only.write_text(yaml.safe_dump({"tables": [
        t for t in yaml.safe_load(Path(os.environ["S3RS_TABLES"]).read_text())["tables"]
        if t["name"] == name]}))
    monkeypatch.setenv("S3RS_TABLES", str(only))
    r = invoke("sync", "--all", "--no-progress")
    assert r.exit_code == 0, r.output
    assert f"{name}: nothing new below the safety bound " in r.stdout
    assert "partitions" not in r.stdout and "run " not in r.stdout
    assert stack.store.read(name).mysql_rows_extracted == 60


def test_sync_backup_only_limit_progress_then_redshift_only(stack, orders):
    name = stack.name("cli_orders")
    r = invoke("sync", "-t", name, "--backup-only", "--limit", "25", "--progress")
    assert r.exit_code == 0, r.output
    assert f"{name}: backup, partitions {key_of(day(2))} .. {key_of(today())}" in r.stdout
    assert "\r\x1b[2K" in r.stderr and "rows/s" in r.stderr  # the live line
    rec = stack.store.read(name)
    assert rec.mysql_rows_extracted == 25 and rec.redshift_rows_loaded == 0
    assert rec.partitions[key_of(day(2))].status == "partial"

    r = invoke("sync", "-t", name, "--backup-only")
    assert r.exit_code == 0, r.output
    # not a TTY: plain log lines, never the live line's carriage return and erase; the first
    # progress line of a fast run has no rate yet (two points are needed), so none is asserted
    assert "\r\x1b[2K" not in r.stderr
    assert "s3rs.progress" not in r.stderr or "chunk" in r.stderr
    rec = stack.store.read(name)
    assert rec.mysql_rows_extracted == 60

    assert _last_run_checks() == {"backup_complete"}

    # staged loading: the load stage alone picks up everything extracted so far
    r = invoke("sync", "-t", name, "--redshift-only")
    assert r.exit_code == 0, r.output
    assert f"{name}: load, partitions {key_of(day(2))} .. {key_of(today())}" in r.stdout
    # its sync check only: never `reconciled`, a whole-table compare at a bound of its own
    assert _last_run_checks() == {"matches_mysql"}
    rec = stack.store.read(name)
    assert rec.redshift_rows_loaded == 60
    assert invoke("verify", "-t", name).exit_code == 0

    # catch-up from a date: set, then sync; earlier complete partitions are not re-read
    with mysql(stack.db) as conn:
        insert_rows(conn, "cli_orders", [(61, day(1) + timedelta(hours=9)),
                                         (62, datetime.now() - timedelta(minutes=5))])
    day2 = rec.partitions[key_of(day(2))].model_copy()
    ts = f"{day(1) + timedelta(hours=6):%Y-%m-%d %H:%M:%S}"
    assert invoke("watermark", "set", "-t", name, "--timestamp", ts, "--yes").exit_code == 0
    r = invoke("sync", "-t", name)
    assert r.exit_code == 0, r.output
    assert f"partitions {key_of(day(1))} .. {key_of(today())}" in r.stdout
    rec = stack.store.read(name)
    assert rec.partitions[key_of(day(2))].files == day2.files  # not recomputed
    assert rec.backup_strategy == "manual_cli"  # the manual setting stays visible
    part = rec.partitions[key_of(day(1))]
    assert part.cursor.c >= day(1) + timedelta(hours=9) and part.status == "complete"
    assert invoke("verify", "-t", name).exit_code == 0
    assert json.loads(invoke("watermark", "get", "-t", name, "--json").stdout)[
        "mysql_status"] == "success"


def _last_run_checks() -> set[str]:
    """The checks the newest run of the instance evaluated."""
    import dagster as dg

    inst = dg.DagsterInstance.get()
    run = inst.get_runs(limit=1)[0]
    events = inst.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
    ).records
    return {e.event_log_entry.dagster_event.asset_check_evaluation_data.check_name
            for e in events}


def test_sync_all_runs_every_table_and_names_failures(stack, monkeypatch):
    # Without DAGSTER_HOME nothing starts at all: a clear error, not a traceback.
    monkeypatch.delenv("DAGSTER_HOME")
    r = invoke("sync", "--all", "--backup-only")
    assert r.exit_code == 2 and "DAGSTER_HOME is not set" in r.output


def test_list_keys_helper_sanity(stack):
    # guards the helper the other tests rely on to prove "nothing changed"
    stack.s3.put_object(Bucket=stack.bucket, Key="x/y", Body=b"1")
    assert "x/y" in stack.listing() and list_keys(stack.s3, stack.bucket, "x/") == ["x/y"]


def test_log_format_from_the_environment(stack, monkeypatch):
    monkeypatch.setenv("S3RS_LOG_FORMAT", "json")
    r = invoke("--log-level", "DEBUG", "watermark", "set", "-t", stack.name("cli_other"),
               "--timestamp", "2d", "--yes")
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines and all(json.loads(line)["level"] for line in lines)
    assert any(json.loads(line)["logger"] == "s3rs.watermark" for line in lines)


def test_sync_json_lines_only_once_dagster_console_is_silenced(stack, orders, monkeypatch):
    """`runner.execute(..., loggers=...)` lets the CLI silence Dagster's own console logger;
    the monitor then re-emits the run's messages as s3rs log lines, so `--log-format json`
    output is JSON only. The CLI's call goes through unchanged; only its loggers are noted."""
    from s3rs_assets import runner

    real = runner.execute

    def execute(plan, inst, limit=None, extra_tags=None, loggers=None):
        calls.append(loggers)
        return real(plan, inst, limit=limit, extra_tags=extra_tags, loggers=loggers)

    calls: list = []
    monkeypatch.setattr(runner, "execute", execute)
    name = stack.name("cli_orders")
    r = invoke("--log-format", "json", "sync", "-t", name, "--backup-only")
    assert r.exit_code == 0, r.output
    assert calls == [{"console": {"config": {"log_level": "CRITICAL"}}}]
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line is JSON
    kinds = {e["event"] for e in events}
    assert {"run_log", "progress"} <= kinds and "step_start" not in kinds  # -v shows it
    assert any("chunk 1" in e["message"] for e in events if e["event"] == "run_log")
    assert all(e.get("table") == name for e in events if e["logger"] == "s3rs.run")


def _mysql_now(db: str) -> datetime:
    with mysql(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT NOW(6)")
        return cur.fetchone()[0]


def _insert_now(stack: Stack, row_id: int) -> None:
    """A row just below MySQL's clock (lag 0s): the next sync has something to read."""
    with mysql(stack.db) as conn:
        insert_rows(conn, "cli_orders", [(row_id, _mysql_now(stack.db) - timedelta(seconds=1))])


def test_sync_fails_when_its_check_fails(stack, orders):
    """A sync whose warehouse does not match MySQL afterwards has not succeeded."""
    name = stack.name("cli_orders")
    with mysql(stack.db) as conn:
        now = _mysql_now(stack.db)
        insert_rows(conn, "cli_orders", [(80, now - timedelta(seconds=2)),
                                         (81, now - timedelta(seconds=1))])
    assert invoke("sync", "-t", name, "--no-progress").exit_code == 0
    with pg(stack) as c:
        c.execute(f'DELETE FROM "{stack.db}"."cli_orders" WHERE id = 80')
    _insert_now(stack, 82)  # something new, or the sync launches no run (and no check)
    r = invoke("--log-format", "json", "sync", "-t", name)
    assert r.exit_code == 1, r.output
    failures = [e for e in _json_lines(r.stderr) if e.get("event") == "check_failed"]
    assert failures and failures[0]["table"] == name
    assert "MISMATCH" in failures[0]["error"]
    assert key_of(now - timedelta(seconds=2)) in failures[0]["error"]  # row 80's partition
    assert f"failed: {name}" in r.stderr
    _insert_now(stack, 83)
    text = invoke("sync", "-t", name, "--no-progress")
    assert text.exit_code == 1
    assert "FAILED its check matches_mysql (mysql_rows " in text.stderr
    assert "succeeded" not in text.stdout


def test_sync_reports_future_rows_and_copies_them_once_the_clock_passes(stack, orders):
    """Rows dated after MySQL's clock are counted and named on every run, never dropped."""
    name = stack.name("cli_orders")
    now = _mysql_now(stack.db)
    soon = now + timedelta(seconds=12)  # well past the sync's set-up time
    with mysql(stack.db) as conn:
        insert_rows(conn, "cli_orders", [(i, now + timedelta(days=2)) for i in (70, 71, 72)])
        insert_rows(conn, "cli_orders", [(73, soon), (74, soon)])
    r = invoke("sync", "-t", name, "--no-progress")
    assert r.exit_code == 0, r.output
    assert f"warning: {name}: 5 row(s) are dated after MySQL's clock" in r.stderr
    shown = invoke("watermark", "get", "-t", name)
    assert "dated in the future:    5" in shown.output
    assert json.loads(invoke("watermark", "get", "-t", name, "--json").stdout)[
        "source_counts"]["future"] == 5
    # rows 73, 74: not yet synced while verify's bound is below them (counted apart, exit
    # 0); once MySQL's clock passed them they are below it, unread by any sync: missing
    checked = invoke("verify", "-t", name, "--json")
    doc = json.loads(checked.stdout)
    if datetime.fromisoformat(doc["not_yet_synced"]["safety_bound"]) <= soon:
        assert checked.exit_code == 0 and doc["ok"], checked.output
        assert doc["not_yet_synced_per_partition"] == {key_of(soon): 2}
    else:
        assert checked.exit_code == 1 and not doc["ok"], checked.output
    assert doc["rows_outside_partitions"]["after_last_partition"] == 3
    assert doc["not_yet_synced"]["future_rows"] >= 3  # 5 while 73, 74 are in the future
    while _mysql_now(stack.db) <= soon:
        time.sleep(0.2)
    for _ in range(5):  # another session's open transaction may hold the bound back
        again = invoke("sync", "-t", name, "--no-progress")
        assert again.exit_code == 0, again.output
        if stack.store.read(name).source_counts.upper_bound > soon:
            break
        time.sleep(1)
    assert f"warning: {name}: 3 row(s) are dated after MySQL's clock" in again.stderr
    with pg(stack) as c:
        got = {r[0] for r in c.execute(
            f'SELECT id FROM "{stack.db}"."cli_orders" WHERE id >= 70').fetchall()}
    assert got == {73, 74}


@pytest.mark.slow
def test_sync_works_without_the_venv_on_path(stack, orders):
    """cron, systemd or a scheduler's shell step run `.venv/bin/s3rs` with a bare PATH and no
    PYSPARK_PYTHON: Spark's Python workers must still run the venv's interpreter."""
    import subprocess

    from s3rs_assets_tests.conftest import REPO

    env = {k: v for k, v in os.environ.items()
           if k.startswith(("S3RS_", "AWS_", "DAGSTER_")) or k in ("HOME", "LANG", "JAVA_HOME")}
    env["PATH"] = "/usr/bin:/bin"
    env["PYTHONPATH"] = str(REPO)  # this checkout, as the editable install would
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "s3rs"), "sync", "-t", stack.name("cli_orders"),
         "--backup-only", "--no-progress"],
        env=env, cwd="/", capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "No module named" not in proc.stderr
    assert stack.store.read(stack.name("cli_orders")).mysql_rows_extracted == 60


# --------------------------------------------------------- sync plans from MySQL probes


@pytest.fixture
def sparse(stack):
    """Three years of daily partitions (start 1,100 days ago); rows on two late days only."""
    rows = [(i, day(5) + timedelta(hours=2, microseconds=i % 4)) for i in range(1, 41)]
    rows += [(i, day(4) + timedelta(hours=7)) for i in range(41, 61)]
    with mysql(stack.db) as conn:
        make_ties_table(conn, "cli_sparse", rows)
    empty_warehouse(stack, "cli_sparse")
    return rows


def _runs(stack: Stack, name: str) -> int:
    """Runs of `name` recorded in the test's Dagster instance."""
    import dagster as dg

    with dg.DagsterInstance.from_config(str(stack.home)) as inst:
        return len(inst.get_runs(filters=dg.RunsFilter(tags={"s3rs/table": name})))


def test_sync_closes_the_empty_history_without_a_run_and_skips_when_nothing_is_new(
    stack, sparse
):
    import re

    name = stack.name("cli_sparse")
    r = invoke("sync", "-t", name, "--no-progress")
    assert r.exit_code == 0, r.output
    # the 1,095 empty days before the data (and the quiet days after it) need no run
    closed = re.search(rf"{re.escape(name)}: ([\d,]+) empty partition\(s\) closed without a run",
                       r.stdout)
    assert closed and int(closed.group(1).replace(",", "")) >= 1095, r.stdout
    assert f"{name}: backup + load, partitions {key_of(day(5))} .. {key_of(day(4))}" in r.stdout
    assert r.stdout.count(" succeeded") == 1 and _runs(stack, name) == 1
    rec = stack.store.read(name)
    assert set(rec.partitions) == {key_of(day(5)), key_of(day(4))}
    assert rec.is_complete(key_of(day(6)), day(6), day(5)) and len(rec.closed) <= 2
    assert rec.mysql_rows_extracted == 60 and rec.redshift_rows_loaded == 60
    # exact in the warehouse: every row, every value
    with mysql(stack.db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, update_at, amount, note FROM cli_sparse ORDER BY id")
        want = [tuple(row) for row in cur.fetchall()]
    with pg(stack) as c:
        got = [tuple(row) for row in c.execute(
            f'SELECT id, update_at, amount, note FROM "{stack.db}"."cli_sparse" ORDER BY id')]
    assert got == want and len(got) == 60
    # nothing new: no run at all, and the command says why, naming the bound
    again = invoke("sync", "-t", name, "--no-progress")
    assert again.exit_code == 0, again.output
    assert re.search(rf"{re.escape(name)}: nothing new below the safety bound "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", again.stdout), again.stdout
    assert _runs(stack, name) == 1
    assert stack.store.read(name).mysql_rows_extracted == 60


# ------------------------------------------------------------- tables side by side


PAR_TABLES = ("cli_par1", "cli_par2", "cli_par3")


@pytest.fixture
def par_tables(stack):
    """Three small tables (25, 50, 75 rows over three days), fresh in both databases; the
    source of cli_broken dropped."""
    with mysql(stack.db) as conn:
        for n, t in enumerate(PAR_TABLES, 1):
            rows = [(i, day(i % 3) + timedelta(hours=1 + i % 5)) for i in range(1, 25 * n + 1)]
            rows = [(i, ts if ts < datetime.now() - timedelta(minutes=1) else
                     datetime.now() - timedelta(minutes=2)) for i, ts in rows]
            make_ties_table(conn, t, rows)
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS cli_broken")
    empty_warehouse(stack, *PAR_TABLES)


def test_sync_parallel_runs_tables_side_by_side_and_a_broken_one_fails_alone(
    stack, par_tables, connect_server
):
    """A process of its own, its output a pipe (as cron or CI read it): the runs in threads
    leave the process's stdout and stderr alone (no compute-log capture, whose fd swaps
    two threads' runs would tangle), so every line reaches the caller and nothing holds
    the pipe open after the command."""
    import subprocess

    import dagster as dg

    from s3rs_assets.resources import spark_defaults
    from s3rs_assets_tests.conftest import spark_env

    assert spark_defaults("local[2]")["spark.scheduler.mode"] == "FAIR"
    names = [stack.name(t) for t in PAR_TABLES]
    broken = stack.name("cli_broken")
    args = [a for n in [names[0], broken, *names[1:]] for a in ("-t", n)]
    r = subprocess.run(
        [sys.executable, "-m", "s3rs_assets.cli", "sync", "--parallel", "3", "--no-progress",
         *args], env=spark_env(S3RS_SPARK_MASTER=connect_server[0]), capture_output=True,
        text=True, timeout=600,  # a pipe held open by a leftover process: a failure, not a hang
    )
    assert r.returncode == 2, r.stdout + r.stderr  # a configuration error (others synced)
    assert r.stderr.strip().splitlines()[-1] == f"failed: {broken}", r.stderr
    assert f"{broken}: error before any run: " in r.stderr
    # every line of the command's own output names its table
    for line in r.stdout.splitlines():
        assert line.split(":", 1)[0] in {*names, broken}, line
    assert not list(stack.home.glob("storage/*/compute_logs/*")), "a run captured the fds"
    for n, (name, t) in enumerate(zip(names, PAR_TABLES, strict=True), 1):
        assert f"{name}: run " in r.stdout and f"{name}: {25 * n} rows read" in r.stdout, (
            r.stdout)
        with mysql(stack.db) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT id, update_at, amount, note FROM `{t}` ORDER BY id")
            want = [tuple(row) for row in cur.fetchall()]
        with pg(stack) as c:
            got = [tuple(row) for row in c.execute(
                f'SELECT id, update_at, amount, note FROM "{stack.db}"."{t}" ORDER BY id')]
        assert got == want and len(got) == 25 * n
        assert stack.store.read(name).mysql_rows_extracted == 25 * n
    # one run per table, and they ran at the same time (one process, one Spark)
    with dg.DagsterInstance.from_config(str(stack.home)) as inst:
        records = [inst.get_run_records(filters=dg.RunsFilter(tags={"s3rs/table": n}))
                   for n in names]
    assert [len(rs) for rs in records] == [1, 1, 1]
    spans = [(rs[0].start_time, rs[0].end_time) for rs in records]
    assert any(a[0] < b[1] and b[0] < a[1] for a in spans for b in spans if a is not b), spans
