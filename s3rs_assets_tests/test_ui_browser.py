"""What a data engineer sees first in the Dagster UI, checked in headless Chromium against
`dagster-webserver` and `dagster-daemon` on the local stack (`webserver_stack`): the table
on the graph's nodes, a partition's formatted row count among a few entries, the table and
partition of a CLI run in the runs list, the guard's failed tick when it restored a
watermark, and a backfill of two tables launched with the Materialize dialog's GraphQL.

Screenshots go to `$S3RS_UI_SHOTS` (default /tmp/ui-shots), one per page, for people.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from s3rs_assets.io_manager import store_for
from s3rs_assets.names import (
    DETAILS_METADATA_KEY,
    PARTITION_TAG,
    TABLE_TAG,
    WATERMARK_GUARD,
    WATERMARK_METADATA_KEY,
)
from s3rs_assets.resources import S3Resource
from s3rs_assets_tests.conftest import REPO, _mysql_root
from s3rs_assets_tests.helpers import insert_rows, make_ties_table, ties
from s3rs_assets_tests.webserver_stack import Stack, location_of, running_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DAY, DAY2, DAY3 = "2025-03-03", "2025-03-04", "2025-03-05"
ORDERS = {DAY: 1234, DAY2: 50}  # 1,234: a row count with a thousands separator
ITEMS = {DAY: 300, DAY2: 20}
NEW_ITEMS = 7  # on DAY3, synced by `s3rs sync`
SHOTS = Path(os.environ.get("S3RS_UI_SHOTS", "/tmp/ui-shots"))
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

TABLES_YAML = """
tables:
  - name: {db}.uib_orders
    start: "2025-03-01"
    lag: 0s
  - name: {db}.uib_items
    start: "2025-03-01"
    lag: 0s
  - name: {db}.uib_lost
    start: "2025-03-01"
"""

BACKFILL_M = """
mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on Error { message }
  }
}
"""

BACKFILL_Q = """
query ($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill {
      status
      runs(limit: 50) { runId status tags { key value } assetSelection { path } }
    }
  }
}
"""

RUNS_Q = """
query ($key: String!, $value: String!) {
  runsOrError(filter: {tags: [{key: $key, value: $value}]}) {
    __typename
    ... on Runs { results { runId status tags { key value } } }
  }
}
"""

TICKS_Q = """
query ($repositoryName: String!, $repositoryLocationName: String!, $sensorName: String!) {
  sensorOrError(sensorSelector: {repositoryName: $repositoryName,
      repositoryLocationName: $repositoryLocationName, sensorName: $sensorName}) {
    __typename
    ... on Sensor {
      sensorState { ticks(limit: 10) { status skipReason error { message causes { message } } } }
    }
  }
}
"""


@dataclass
class UIStack:
    stack: Stack
    db: str
    s3: S3Resource

    def key(self, table: str, stage: str) -> list[str]:
        return [self.db, table, stage]


@pytest.fixture(scope="module")
def ui(tmp_path_factory, mysql_db, mysql_url, pg_url, moto_endpoint,
       connect_server) -> Iterator[UIStack]:
    workdir = tmp_path_factory.mktemp("ui_browser")
    bucket = f"s3rs-uib-{uuid.uuid4().hex[:10]}"
    s3_client = boto3.client("s3", endpoint_url=moto_endpoint)
    s3_client.create_bucket(Bucket=bucket)
    s3 = S3Resource(bucket=bucket, prefix="s3rs")
    conn = _mysql_root(mysql_db)
    try:
        for name, rows in (("uib_orders", ORDERS), ("uib_items", ITEMS)):
            make_ties_table(conn, name, ties(rows[DAY], datetime(2025, 3, 3), 3)
                            + ties(rows[DAY2], datetime(2025, 3, 4), 2, first_id=rows[DAY] + 1))
        make_ties_table(conn, "uib_lost", [])
    finally:
        conn.close()
    tables = workdir / "tables.yaml"
    tables.write_text(TABLES_YAML.format(db=mysql_db))
    # uib_lost has a record and its copies, then loses its primary: the daemon's first
    # guard tick restores it from the daily copy.
    lost = f"{mysql_db}.uib_lost"
    store = store_for(s3)
    store.update(lost, lambda rec: None)
    store.write_copies(lost)
    s3_client.delete_object(Bucket=bucket, Key=s3.layout.watermark_primary(lost))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "S3RS_TABLES": str(tables),
        "S3RS_MYSQL_URL": mysql_url,
        "S3RS_S3_BUCKET": bucket,
        "S3RS_S3_PREFIX": s3.prefix,
        "S3RS_REDSHIFT_URL": pg_url,
        # runs attach to the session's Spark Connect server, as `make ui`'s runs do (no
        # JVM start per run: the local-Spark path is tested in test_cli, test_quiet)
        "S3RS_SPARK_MASTER": connect_server[0],
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    with running_stack(env, workdir) as stack:
        yield UIStack(stack, mysql_db, s3)


@pytest.fixture(scope="module")
def backfill(ui: UIStack) -> dict:
    """Both tables over [DAY, DAY2], launched as the Materialize dialog launches a backfill
    of a partition range (LaunchAssetChoosePartitionsDialog.tsx: assetSelection and
    partitionNames, no job); returns the finished backfill."""
    keys = [{"path": ui.key(t, s)} for t in ("uib_orders", "uib_items")
            for s in ("s3_parquet", "redshift_table")]
    launched = ui.stack.gql(BACKFILL_M, {"backfillParams": {
        "tags": [{"key": "dagster/from_ui", "value": "true"}],
        "assetSelection": keys,
        "partitionNames": [DAY, DAY2],
        "fromFailure": False,
    }})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    t0 = time.monotonic()
    while True:
        found = ui.stack.gql(BACKFILL_Q, {"id": launched["backfillId"]})
        bf = found["partitionBackfillOrError"]
        if bf["status"] != "REQUESTED":
            break
        assert time.monotonic() - t0 < 400, f"backfill still {bf}\n{ui.stack.logs()}"
        time.sleep(2)
    print(f"backfill of 2 tables x 2 partitions: {time.monotonic() - t0:.1f}s")
    return bf


def test_backfill_of_two_tables_from_the_dialog_completes_exactly(ui: UIStack, backfill):
    assert backfill["status"] == "COMPLETED_SUCCESS", backfill
    # Dagster groups a backfill's assets by partitioning, partitions chosen and backfill
    # policy: two tables alike share one single-run range run (a third, partitioned
    # otherwise, would get its own)
    [run] = backfill["runs"]
    assert run["status"] == "SUCCESS", run
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert (tags["dagster/asset_partition_range_start"],
            tags["dagster/asset_partition_range_end"]) == (DAY, DAY2), tags
    assert len(run["assetSelection"]) == 4, run
    for table, rows in (("uib_orders", ORDERS), ("uib_items", ITEMS)):
        backup = ui.stack.metadata(ui.key(table, "s3_parquet"), [DAY, DAY2])
        load = ui.stack.metadata(ui.key(table, "redshift_table"), [DAY, DAY2])
        assert {k: backup[k]["rows"] for k in rows} == rows, backup
        assert {k: load[k]["ledger_rows"] for k in rows} == rows, load
        assert all(m["__run_id"] == run["runId"] for m in (*backup.values(), *load.values()))
        rec = store_for(ui.s3).read(f"{ui.db}.{table}")
        assert rec.mysql_rows_extracted == rec.redshift_rows_loaded == sum(rows.values())


def test_cli_run_names_its_table_and_partition(ui: UIStack, backfill):
    """`s3rs sync` of one new partition: the run carries the table and `dagster/partition`,
    which the runs list shows."""
    table = f"{ui.db}.uib_items"
    conn = _mysql_root(ui.db)
    try:
        insert_rows(conn, "uib_items", ties(NEW_ITEMS, datetime(2025, 3, 5), 1, first_id=10_000))
    finally:
        conn.close()
    proc = subprocess.run(
        [sys.executable, "-m", "s3rs_assets.cli", "sync", "-t", table],
        cwd=REPO, env=ui.stack.env, capture_output=True, text=True, timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = ui.stack.gql(RUNS_Q, {"key": TABLE_TAG, "value": table})["runsOrError"]["results"]
    [run] = runs
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert tags[PARTITION_TAG] == DAY3, tags
    assert ui.stack.metadata(ui.key("uib_items", "s3_parquet"), [DAY3])[DAY3]["rows"] == NEW_ITEMS


def test_guard_tick_that_restored_a_watermark_fails_with_its_message(ui: UIStack):
    node = ui.stack.asset_nodes()[(ui.db, "uib_orders", "s3_parquet")]
    repo_name, location = location_of(node)
    deadline = time.monotonic() + 120
    while True:
        sensor = ui.stack.gql(TICKS_Q, {
            "repositoryName": repo_name, "repositoryLocationName": location,
            "sensorName": WATERMARK_GUARD,
        })["sensorOrError"]
        ticks = [t for t in sensor["sensorState"]["ticks"] if t["status"] != "STARTED"]
        if ticks:
            break
        assert time.monotonic() < deadline, f"no guard tick: {sensor}\n{ui.stack.logs()}"
        time.sleep(1)
    first = ticks[-1]  # the daemon's first tick found the lost primary
    assert first["status"] == "FAILURE", ticks
    # the error the UI's "View" opens: Dagster's wrapper, caused by the guard's message
    messages = [first["error"]["message"], *(c["message"] for c in first["error"]["causes"])]
    assert any(f"RECOVERED {ui.db}.uib_lost: primary missing; recovered from daily" in m
               for m in messages), first
    assert store_for(ui.s3).read(f"{ui.db}.uib_lost") is not None


# ------------------------------------------------------------------------------ browser


class Browser:
    """A headless Chromium on the webserver; `page` waits for the text that says the page
    has settled, saves a screenshot and returns the page's lines."""

    def __init__(self, driver: Any, base: str) -> None:
        from selenium.common.exceptions import WebDriverException

        self.driver, self.base, self.rerendered = driver, base, WebDriverException

    def lines(self) -> list[str]:
        try:
            return self.driver.find_element("tag name", "body").text.splitlines()
        except self.rerendered:  # the page re-rendered while read: the next poll retries
            return []

    def dismiss_nux(self) -> None:
        try:
            for button in self.driver.find_elements("tag name", "button"):
                if button.text == "Skip":  # "Join the Dagster community", on localhost only
                    button.click()
                    return
        except self.rerendered:
            return

    def click(self, text: str, prefix: bool = False, timeout: float = 30) -> None:
        """Click the first button reading `text` (or starting with it). A dialog opening or
        closing over it (the NUX's backdrop mid-animation) takes the click instead
        (ElementClickInterceptedException, seen in CI): retried until the click lands."""
        deadline = time.monotonic() + timeout
        while True:
            self.dismiss_nux()
            try:
                found = [b for b in self.driver.find_elements("tag name", "button")
                         if (b.text.startswith(text) if prefix else b.text == text)]
                if found:
                    found[0].click()
                    return
                why = "no such button"
            except self.rerendered as e:  # intercepted, stale: the page is still moving
                why = e.msg
            assert time.monotonic() < deadline, f"cannot click {text!r}: {why}"
            time.sleep(0.5)

    def page(self, path: str, shot: str, ready: Callable[[list[str]], bool],
             timeout: float = 90) -> list[str]:
        self.driver.get(self.base + path)
        deadline = time.monotonic() + timeout
        lines: list[str] = []
        while time.monotonic() < deadline:  # the UI needs seconds to settle
            self.dismiss_nux()
            lines = self.lines()
            if ready(lines):
                break
            time.sleep(1)
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(SHOTS / f"{shot}.png"))
        (SHOTS / f"{shot}.txt").write_text("\n".join(lines))
        assert ready(lines), f"{path}:\n" + "\n".join(lines)[-3000:]
        return lines


@pytest.fixture(scope="module")
def browser(ui: UIStack) -> Iterator[Browser]:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip(f"needs Debian's Chromium ({CHROMIUM}, {CHROMEDRIVER}): "
                    "apt-get install chromium chromium-driver (scripts/setup.sh does)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (.[dev])")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1600,1100"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield Browser(driver, ui.stack.url)
    finally:
        driver.quit()


def test_graph_nodes_name_their_table(ui: UIStack, browser: Browser, backfill):
    """The group's lineage (one group per MySQL schema): each node is labelled by its
    stage, and its kind tag names the table."""
    lines = browser.page(
        f"/locations/s3rs/asset-groups/{ui.db}", "graph-group",
        lambda ls: "s3_parquet" in ls and "redshift_table" in ls and ls.count("uib_orders") >= 2,
    )
    assert lines.count("uib_orders") >= 2, lines  # one kind tag per node
    browser.page("/asset-groups", "graph-global", lambda ls: "Global asset lineage" in ls)
    browser.page("/assets", "asset-list", lambda ls: "uib_items" in ls and "uib_orders" in ls)


def test_partition_shows_a_formatted_row_count_first(ui: UIStack, browser: Browser, backfill):
    lines = browser.page(
        f"/assets/{ui.db}/uib_orders/s3_parquet?view=partitions&partition={DAY}", "partition",
        lambda ls: "Metadata" in ls and DETAILS_METADATA_KEY in ls[ls.index("Metadata"):],
    )
    table = lines[lines.index("Metadata") + 1:]
    assert table[table.index("rows") + 1] == f"{ORDERS[DAY]:,}" == "1,234", table
    assert table[table.index("status") + 1] == "complete", table
    # at most about ten entries before the folded rest (each a label and a value line)
    assert table.index(DETAILS_METADATA_KEY) <= 2 * 10, table
    lines = browser.page(
        f"/assets/{ui.db}/uib_orders/redshift_table?view=partitions&partition={DAY2}",
        "partition-load",
        lambda ls: "Metadata" in ls and WATERMARK_METADATA_KEY in ls[ls.index("Metadata"):],
    )
    table = lines[lines.index("Metadata") + 1:]
    assert table[table.index("rows") + 1] == f"{ORDERS[DAY2]:,}", table
    assert table.index("run") < table.index(DETAILS_METADATA_KEY), table


def test_runs_list_shows_table_and_partition(ui: UIStack, browser: Browser, backfill):
    table = f"{ui.db}.uib_items"
    lines = browser.page(
        "/runs", "runs", lambda ls: any(DAY3 in ln for ln in ls) and any(table in ln for ln in ls)
    )
    # the CLI run's row: its partition (Dagster shows `dagster/partition` as "partition")
    # and its table
    row = lines[next(i for i, ln in enumerate(lines) if ln == f"partition: {DAY3}"):]
    assert f"{TABLE_TAG}: {table}" in row[:4], lines


def test_guard_and_dialog_pages(ui: UIStack, browser: Browser, backfill):
    browser.page(f"/locations/s3rs/sensors/{WATERMARK_GUARD}", "guard-ticks",
                 lambda ls: "Failure" in ls)
    # the failed tick's "View" opens its error: the guard's message
    browser.click("View")
    restored = f"RECOVERED {ui.db}.uib_lost"
    deadline = time.monotonic() + 30
    while not any(restored in ln for ln in browser.lines()):
        assert time.monotonic() < deadline, browser.lines()
        time.sleep(1)
    browser.driver.save_screenshot(str(SHOTS / "guard-tick-error.png"))
    browser.page(f"/locations/s3rs/asset-groups/{ui.db}", "dialog",
                 lambda ls: any(ln.startswith("Materialize all") for ln in ls))
    browser.click("Materialize all", prefix=True)
    deadline = time.monotonic() + 30
    while not any(re.match(r"Launch runs to materialize \d+ assets", ln)
                  for ln in browser.lines()):
        assert time.monotonic() < deadline, browser.lines()
        time.sleep(1)
    time.sleep(3)  # the partition health loads
    browser.driver.save_screenshot(str(SHOTS / "dialog.png"))
    (SHOTS / "dialog.txt").write_text("\n".join(browser.lines()))


def test_run_metadata_says_what_waits_and_formats_its_figures():
    """The run's last partition: `run` and the rows not yet synced in words, the raw
    figures in `details` only (no Dagster, no services: the metadata as built)."""
    from datetime import timedelta

    from s3rs_assets.backup import PartitionRun
    from s3rs_assets.names import metadata_facts
    from s3rs_assets.source import SafetyBound
    from s3rs_assets.stage_results import BackupOutput, backup_partition_metadata, with_run
    from s3rs_assets.stage_results import backup_run_metadata as run_md
    from s3rs_assets.watermark import SourceCounts, WatermarkRecord

    now = datetime(2025, 3, 5, 12)
    bound = SafetyBound(now, now - timedelta(seconds=30), timedelta(seconds=30), True)
    found = SourceCounts(counted_at=now, upper_bound=bound.upper, above_bound=1200, future=2,
                         latest_future=now + timedelta(days=1), null_cursor=3)
    part = PartitionRun(DAY, datetime(2025, 3, 3), datetime(2025, 3, 4), None, status="complete",
                        rows=33_807, chunks=2, seconds=4.25)
    out = BackupOutput("s.t", [part], bound, found, seconds=30.0, spark_seconds=20.0)
    rec = WatermarkRecord.new("s.t")
    md = with_run(backup_partition_metadata(part, rec), *run_md(out, rec))
    shown = {k: v.value for k, v in md.items()}
    assert shown["rows"] == "33,807" and shown["seconds"] == "4.2 s", shown
    assert shown["run"].startswith("33,807 rows, 0 files in 1 partition(s): 30.0 s (10.0 s "
                                   "reading at 3,381 rows/s, Spark start-up 20.0 s)"), shown
    assert shown["rows_not_yet_synced"].startswith(
        "1,200 at or above the safety bound 2025-03-05T11:59:30"), shown
    assert "; 2 dated after MySQL's clock" in shown["rows_not_yet_synced"], shown
    assert "3 row(s) have a NULL cursor" in shown["rows_never_synced"], shown
    facts = metadata_facts(md)
    assert facts["rows"] == facts["run_rows"] == 33_807 and facts["rows_above_bound"] == 1200
    assert list(md)[-1] == "s3rs/watermark_backup"  # the snapshot last, `details` before it
    assert list(md)[-2] == DETAILS_METADATA_KEY
