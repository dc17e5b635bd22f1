"""A record folded into an archive (watermark/archive.py) through the `s3rs` command, end to
end: real MariaDB, PostgreSQL, moto S3, Spark and Dagster (compose.py). A small
`S3RS_RECORD_MAX_BYTES` makes a table of nine days archive its old partitions, and every
operation that needs the whole record still sees every file: sync, `watermark set` below
archived partitions, re-materializing an archived partition, an emptied target, `s3clean`
and recovery after losing the primary.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal

import dagster as dg
import pytest

from s3rs_assets.watermark import archive
from s3rs_assets_tests import compose
from s3rs_assets_tests.cli_stack import ensure_definitions
from s3rs_assets_tests.compose import World, invoke, midnight

ARC_T = "arc_hist"
DAYS = 9


@pytest.fixture(scope="session")
def cli_tables_file(tmp_path_factory, mysql_db):
    return compose.tables_file(
        tmp_path_factory.mktemp("compose_arc"),
        mysql_db,
        extra=[
            {
                "name": f"{mysql_db}.{ARC_T}",
                "chunk_rows": 3,
                "lag": "0s",
                "partition": "daily",
                "start": f"{midnight(DAYS):%Y-%m-%d}",
            }
        ],
    )


@pytest.fixture
def world(monkeypatch, mysql_db, mysql_url, pg_url, s3_client, tmp_path, cli_tables_file):
    monkeypatch.setenv("S3RS_TABLES", str(cli_tables_file))
    monkeypatch.setenv("S3RS_S3_PREFIX", compose.PREFIX)
    monkeypatch.setenv("S3RS_MYSQL_URL", mysql_url)
    monkeypatch.setenv("S3RS_REDSHIFT_URL", pg_url)
    monkeypatch.setenv(archive.MAX_BYTES_ENV, "2048")
    for var in ("S3RS_LOG_FORMAT", "S3RS_SSH_HOST", "S3RS_SOURCE_TIMEZONE"):
        monkeypatch.delenv(var, raising=False)
    ensure_definitions(cli_tables_file)
    w = World(mysql_db, pg_url, s3_client, monkeypatch, tmp_path, table=ARC_T)
    # 7 rows a day on each of DAYS days (chunks of 3: three files a day)
    w.fresh(
        {
            i: (
                midnight(DAYS - i // 7) + timedelta(hours=1 + i % 7),
                Decimal(f"{i}.2500"),
                f"row {i}",
            )
            for i in range(7 * DAYS)
        }
    )
    return w


def sync(w: World, *flags: str) -> None:
    r = invoke("sync", "-t", w.name, "--no-progress", *flags)
    assert r.exit_code == 0, r.output


def stored(w: World) -> dict:
    return json.loads(w.s3.get_object(Bucket=w.bucket, Key=w.primary_key())["Body"].read())


def assert_whole(w: World) -> None:
    """The warehouse equals MySQL (no key twice), the stored record archives partitions and
    its counts are the whole table's; the read record holds every file, each loaded."""
    assert w.warehouse_rows() == w.mysql_rows() and len(w.mysql_rows()) >= 7 * DAYS
    raw = stored(w)
    assert raw.get("archive"), "nothing archived: lower S3RS_RECORD_MAX_BYTES"
    assert (
        len(json.dumps(raw, separators=(",", ":")).encode()) <= 2048 or len(raw["partitions"]) == 1
    )
    rec = w.record()
    files = [f for p in rec.partitions.values() for f in p.files]
    rows = sum(f.rows for f in files)  # a file kept over a `watermark set` counts its rows
    assert raw["mysql_rows_extracted"] == rec.mysql_rows_extracted == rows >= len(w.mysql_rows())
    assert raw["redshift_rows_loaded"] == rec.redshift_rows_loaded == rows
    assert raw["s3_file_count"] == rec.s3_file_count == len(files)
    assert set(rec.processed_s3_files) == {f.key for f in files}
    assert {(f.key, f.md5) for f in files} <= w.ledger()


def archived_days(w: World) -> list[str]:
    return stored(w)["archive"]["partitions"]


def test_an_archived_record_syncs_edits_reloads_cleans_and_recovers(world):
    w = world
    sync(w)
    assert_whole(w)
    old = archived_days(w)
    assert f"{midnight(DAYS):%Y-%m-%d}" in old and len(old) >= 3

    # s3clean knows every file of the archived partitions: loaded, none an orphan
    listed = json.loads(invoke("s3clean", "list", "-t", w.name, "--json").stdout)
    state = {f["key"]: f["state"] for f in listed["files"]}
    rec = w.record()
    assert {state[f.key] for p in rec.partitions.values() for f in p.files} == {"loaded"}
    assert set(state) == {f.key for p in rec.partitions.values() for f in p.files}

    # watermark set into an archived partition: what follows is read again, nothing lost
    at = datetime.fromisoformat(old[1]) + timedelta(hours=3, minutes=30)
    r = invoke("watermark", "set", "-t", w.name, "--timestamp", f"{at:%Y-%m-%d %H:%M:%S}", "--yes")
    assert r.exit_code == 0, r.output
    sync(w)
    assert_whole(w)

    # re-materializing an archived partition (the UI's Materialize)
    from s3rs_assets.definitions import sync_job

    with dg.DagsterInstance.get() as instance:
        day = archived_days(w)[0]
        assert sync_job(w.name).execute_in_process(partition_key=day, instance=instance).success
    assert_whole(w)

    # an emptied target: every file is loaded again, archived ones included
    w.target_sql("TRUNCATE {t}")
    sync(w)
    assert_whole(w)

    # the primary lost: recovered from its copy, which references the same archive
    w.s3.delete_object(Bucket=w.bucket, Key=w.primary_key())
    archive.forget_cache()
    w.put({999: (w.mysql_now() - timedelta(milliseconds=1), Decimal("1.0000"), "new")})
    sync(w)  # its first checkpoint restores the primary from the daily copy
    assert_whole(w)
    r = invoke("sync", "-t", w.name, "--no-progress")
    assert r.exit_code == 0 and "nothing new" in r.output, r.output
