"""The Dagster UI path, as users use it: `dagster-webserver -w workspace.yaml` and
`dagster-daemon` on the local stack with the shipped dagster.yaml, driven through the same
GraphQL queries and mutations the UI sends, and once through a headless Chromium.

One webserver and daemon for the module (`webserver_stack.running_stack`); each test has
its own tables. Every process runs in its own process group, is stopped with SIGTERM then
SIGKILL, and is found by an environment marker if it left the group.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import boto3
import dagster as dg
import pytest

from s3rs_assets.assets import build_sync_job
from s3rs_assets.config import load_tables
from s3rs_assets.io_manager import store_for
from s3rs_assets.names import (
    BACKUP_CHECK_NAME,
    CHECK_NAME,
    REPOSITORY_LABEL,
    REPOSITORY_TAG,
    WATERMARK_GUARD,
    job_name,
    pool_name,
)
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.sensors.new_data import build_new_data_sensor
from s3rs_assets_tests.conftest import REPO, _mysql_root
from s3rs_assets_tests.helpers import make_ties_table, ties
from s3rs_assets_tests.webserver_stack import (
    BIN,
    CHECK_EXECUTIONS_Q,
    JOB_RUNS_Q,
    POOL_Q,
    SENSOR_TICKS_Q,
    Stack,
    location_of,
    running_stack,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DAY, DAY2 = "2025-03-03", "2025-03-04"
ORDERS_ROWS, ITEMS_ROWS, BUSY_ROWS = 300, 200, 300
RANGE_ROWS = [120, 80, 50]  # the last partition is today's: open, so partial


def utc_today() -> datetime:
    """Midnight UTC of the day now (naive), read when a fixture runs, not at import: the
    module's fixtures may start long after collection, on the next day."""
    return datetime.now(UTC).replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)


def range_days(today: datetime) -> list[datetime]:
    """The three days of ui_range's run: two closed ones and `today` (open)."""
    return [today - timedelta(days=2), today - timedelta(days=1), today]


def make_range_table(db: str, today: datetime) -> list[str]:
    """ui_range's rows over `range_days(today)` (RANGE_ROWS each); returns their keys."""
    days = range_days(today)
    rows, first = [], 1
    for day, n in zip(days, RANGE_ROWS, strict=True):
        if day == today:  # ties() puts rows 1 h into the day: keep them in the past
            stamp = min(day + timedelta(seconds=1), datetime.now(UTC).replace(tzinfo=None))
            rows += [(first + i, stamp) for i in range(n)]
        else:
            rows += ties(n, day, 2, first_id=first)
        first += n
    conn = _mysql_root(db)
    try:
        make_ties_table(conn, "ui_range", rows)
    finally:
        conn.close()
    return [d.strftime("%Y-%m-%d") for d in days]

TABLES_YAML = """
tables:
  - name: {db}.ui_orders
    start: "2025-03-01"
    lag: 0s
    chunk_rows: 1000
  - name: {db}.ui_items
    start: "2025-03-01"
    lag: 0s
  - name: {db}.ui_busy
    start: "2025-03-01"
    lag: 0s
  - name: {db}.ui_range
    start: "{range_start}"
    lag: 0s
  - name: {db}.ui_seen
    start: "2025-03-01"
"""


@dataclass
class UI:
    stack: Stack
    db: str
    s3: S3Resource
    mysql_url: str


@pytest.fixture(scope="module")
def ui(tmp_path_factory, mysql_db, mysql_url, pg_url, moto_endpoint,
       connect_server) -> Iterator[UI]:
    workdir = tmp_path_factory.mktemp("ui")
    bucket = f"s3rs-ui-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    s3 = S3Resource(bucket=bucket, prefix="s3rs")
    conn = _mysql_root(mysql_db)
    try:
        make_ties_table(conn, "ui_orders", ties(ORDERS_ROWS, datetime(2025, 3, 3), 3))
        make_ties_table(conn, "ui_items", ties(ITEMS_ROWS, datetime(2025, 3, 3), 2))
        make_ties_table(conn, "ui_busy", ties(BUSY_ROWS, datetime(2025, 3, 3), 3)
                        + ties(50, datetime(2025, 3, 4), 1, first_id=BUSY_ROWS + 1))
    finally:
        conn.close()
    # range_run makes the rows again on the day it runs (maybe the next): the start is a
    # lower bound for every later day's range
    range_start = make_range_table(mysql_db, utc_today())[0]
    tables = workdir / "tables.yaml"
    tables.write_text(TABLES_YAML.format(db=mysql_db, range_start=range_start))
    env = {
        **os.environ,  # AWS_* of the moto fixture (a server in this process, reached over HTTP)
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
    # A valid (empty) watermark for ui_seen before the daemon's first guard tick: "1 valid".
    store_for(s3).update(f"{mysql_db}.ui_seen", lambda rec: None)
    with running_stack(env, workdir) as stack:
        yield UI(stack, mysql_db, s3, mysql_url)


def test_webserver_lists_assets_and_materializes_a_partition_like_the_ui(ui: UI):
    t0 = time.monotonic()
    stack, db = ui.stack, ui.db
    nodes = stack.asset_nodes()

    # 1. Both assets of every table, partitioned by day, in their schema's group, in the
    #    code location s3rs with the per-table jobs.
    for t in ("ui_orders", "ui_items"):
        for s in ("s3_parquet", "redshift_table"):
            n = nodes[(db, t, s)]
            location_of(n)
            assert n["isPartitioned"] and n["isMaterializable"], n
            assert n["partitionDefinition"]["type"] == "TIME_WINDOW", n
            assert n["partitionKeys"][0] == "2025-03-01" and DAY in n["partitionKeys"], n
            assert n["groupName"] == db, n  # one group per MySQL schema
            assert job_name(f"{db}.{t}") in n["jobNames"], n
    assert nodes[(db, "ui_orders", "redshift_table")]["dependencyKeys"] == [
        {"path": [db, "ui_orders", "s3_parquet"]}]

    # 2. Materialize one partition of ui_orders/s3_parquet as the UI does; the daemon
    #    dequeues it.
    node = nodes[(db, "ui_orders", "s3_parquet")]
    run_id = stack.launch(node, DAY)
    run = stack.wait_for_run(run_id)
    assert {"key": "dagster/partition", "value": DAY} in run["tags"]
    assert run["assetSelection"] == [{"path": node["assetKey"]["path"]}]  # backup stage only

    # 3. The UI shows the partition materialized by that run, with the row count.
    md = stack.metadata(node["assetKey"]["path"], [DAY])[DAY]
    assert md["__run_id"] == run_id
    assert md["rows"] == ORDERS_ROWS and md["status"] == "complete", md
    assert stack.metadata([db, "ui_orders", "redshift_table"], [DAY]) == {}

    # 4. The watermark in S3: the partition is complete with every seeded row.
    rec = store_for(ui.s3).read(f"{db}.ui_orders")
    assert rec.mysql_status == "success" and rec.mysql_rows_extracted == ORDERS_ROWS
    assert {k: p.status for k, p in rec.partitions.items()} == {DAY: "complete"}
    assert sum(f.rows for f in rec.partitions[DAY].files) == ORDERS_ROWS
    assert rec.redshift_rows_loaded == 0
    assert store_for(ui.s3).read(f"{db}.ui_items") is None
    print(f"webserver UI path: {time.monotonic() - t0:.1f}s")


def test_watermark_guard_result_is_the_tick_message(ui: UI):
    """The guard's summary ("1 valid, 4 never synced, ...") is the tick's message in the UI,
    not only a line in the daemon's log."""
    stack = ui.stack
    node = stack.asset_nodes()[(ui.db, "ui_orders", "s3_parquet")]
    repo_name, location = location_of(node)
    deadline = time.monotonic() + 90
    while True:
        sensor = stack.gql(SENSOR_TICKS_Q, {
            "repositoryName": repo_name, "repositoryLocationName": location,
            "sensorName": WATERMARK_GUARD,
        })["sensorOrError"]
        assert sensor["__typename"] == "Sensor", sensor
        ticks = sensor["sensorState"]["ticks"]
        if ticks and ticks[0]["status"] != "STARTED":
            break
        assert time.monotonic() < deadline, f"no guard tick: {sensor}\n{stack.logs()}"
        time.sleep(1)
    assert sensor["sensorState"]["status"] == "RUNNING"
    tick = ticks[0]
    assert tick["status"] == "SKIPPED", tick
    assert tick["skipReason"].startswith(
        f"checked 5 tables' primary watermarks in s3://{ui.s3.bucket}/{ui.s3.prefix}: "
        "1 valid, 4 never synced, 0 recovered, 0 need a person"
    ), tick


@dataclass
class RangeRun:
    run_id: str
    keys: list[str]  # its three partitions, the last one today's (open)


@pytest.fixture(scope="module")
def range_run(ui: UI) -> RangeRun:
    """ui_range synced over its three days (today open) by `dagster job execute`, exactly as
    scripts/demo.py runs it. Today is read here, and the rows made for it, since the module
    may have started the day before."""
    table = f"{ui.db}.ui_range"
    keys = make_range_table(ui.db, utc_today())
    tags = {
        "dagster/asset_partition_range_start": keys[0],
        "dagster/asset_partition_range_end": keys[-1],
        REPOSITORY_TAG: REPOSITORY_LABEL,
    }
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "dagster"), "job", "execute", "-m", "s3rs_assets.definitions",
         "-j", job_name(table), "--tags", json.dumps(tags)],
        cwd=REPO, env=ui.stack.env, capture_output=True, text=True, timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    print(f"dagster job execute over {len(keys)} partitions: {time.monotonic() - t0:.1f}s")
    inst = dg.DagsterInstance.from_config(str(ui.stack.home))
    [rec] = inst.get_run_records(dg.RunsFilter(job_name=job_name(table)), limit=1)
    assert rec.dagster_run.status == dg.DagsterRunStatus.SUCCESS
    return RangeRun(rec.dagster_run.run_id, keys)


def test_job_execute_run_is_linked_and_each_partition_tells_its_own_truth(
    ui: UI, range_run: RangeRun
):
    stack, db = ui.stack, ui.db
    run_id, keys = range_run.run_id, range_run.keys
    table = f"{db}.ui_range"
    nodes = stack.asset_nodes()
    backup, load = nodes[(db, "ui_range", "s3_parquet")], nodes[(db, "ui_range", "redshift_table")]
    repo_name, location = location_of(backup)

    # 1. The run of `dagster job execute` is in the job's run history of location s3rs.
    runs = stack.gql(JOB_RUNS_Q, {
        "repositoryName": repo_name, "repositoryLocationName": location,
        "jobName": job_name(table),
    })["pipelineOrError"]
    assert runs["__typename"] == "Pipeline", runs
    assert {"runId": run_id, "status": "SUCCESS"} in runs["runs"], runs
    # (the job page finds it by the hidden tag .dagster/repository, which GraphQL hides)

    # 2. One materialization per partition, each with its own rows; they sum to the run's.
    md = stack.metadata(backup["assetKey"]["path"], keys)
    assert set(md) == set(keys), md
    assert all(m["__run_id"] == run_id for m in md.values())
    assert [md[k]["rows"] for k in keys] == RANGE_ROWS, md
    last = md[keys[-1]]
    assert last["run_rows"] == sum(RANGE_ROWS) == sum(m["rows"] for m in md.values())
    assert "run_rows" not in md[keys[0]]  # the run summary sits on the last partition
    assert md[keys[0]]["cursor_to"] != last["cursor_to"]

    # 3. The open partition (today, above nothing yet closed) is marked partial; the closed
    #    days are complete.
    assert [md[k]["status"] for k in keys[:-1]] == ["complete", "complete"], md
    assert last["status"].startswith("partial"), last
    [backup_check] = stack.gql(CHECK_EXECUTIONS_Q, {
        "assetKey": {"path": backup["assetKey"]["path"]}, "checkName": BACKUP_CHECK_NAME,
    })["assetCheckExecutions"][:1]
    assert backup_check["runId"] == run_id and backup_check["evaluation"]["success"]
    assert keys[-1] in backup_check["evaluation"]["description"], backup_check
    entries = {e["label"]: e for e in backup_check["evaluation"]["metadataEntries"]}
    assert json.loads(entries["open_partitions"]["jsonString"]) == [keys[-1]]

    # 4. The load side: per-partition rows in the ledger, summing to the run's rows staged.
    lmd = stack.metadata(load["assetKey"]["path"], keys)
    assert [lmd[k]["ledger_rows"] for k in keys] == RANGE_ROWS, lmd
    assert lmd[keys[-1]]["run_rows_staged"] == sum(RANGE_ROWS)
    snapshot = json.loads(lmd[keys[-1]]["s3rs/watermark"])
    assert snapshot["redshift_status"] == "success"
    assert snapshot["redshift_rows_loaded"] == sum(RANGE_ROWS)

    # 5. matches_mysql executed alone (the Checks tab's Execute): a run with no asset step.
    t0 = time.monotonic()
    check_run = stack.launch(load, None, check_names=[CHECK_NAME], with_asset=False)
    run = stack.wait_for_run(check_run)
    assert run["assetSelection"] in ([], None), run
    steps = {e.get("stepKey") for e in stack.run_events(check_run) if e.get("stepKey")}
    assert steps and all(CHECK_NAME in s for s in steps), steps
    [execution] = stack.gql(CHECK_EXECUTIONS_Q, {
        "assetKey": {"path": load["assetKey"]["path"]}, "checkName": CHECK_NAME,
    })["assetCheckExecutions"][:1]
    assert execution["runId"] == check_run and execution["status"] == "SUCCEEDED", execution
    entries = {e["label"]: e for e in execution["evaluation"]["metadataEntries"]}
    # executed alone it covers every partition the watermark knows (today's up to its cursor)
    assert entries["partitions_checked"]["intValue"] >= 2, entries
    print(f"matches_mysql alone: {time.monotonic() - t0:.1f}s")


def _pool(stack: Stack, key: str) -> dict:
    return stack.gql(POOL_Q, {"key": key})["instance"]["concurrencyLimit"]


def test_ui_launch_of_a_table_already_running_is_held_back(ui: UI):
    """One table, one run at a time, for a launch that carries no s3rs tag: the pool holds
    the second run in the queue and the new-data sensor leaves the table alone. The test
    holds a write lock on the table, so the first run's backup step waits inside its slot
    for as long as the test looks (a step attached to a warm Spark is over in a second)."""
    stack, db = ui.stack, ui.db
    table = f"{db}.ui_busy"
    pool = pool_name(table)
    node = stack.asset_nodes()[(db, "ui_busy", "s3_parquet")]
    step = "__".join(node["assetKey"]["path"])
    lock = _mysql_root(db)
    try:
        lock.cursor().execute("LOCK TABLES ui_busy WRITE")
        first = stack.launch(node, DAY)
        assert "s3rs/table" not in {t["key"] for t in stack.run(first)["tags"]}

        # 1. The first run's backup step holds the table's one slot.
        deadline = time.monotonic() + 180
        while True:
            info = _pool(stack, pool)
            if any(s["runId"] == first and s["stepKey"] == step for s in info["claimedSlots"]):
                break
            run = stack.run(first)
            assert run["status"] not in ("SUCCESS", "FAILURE", "CANCELED"), (
                f"run ended before its slot was seen: {run['status']}\n{stack.logs()}")
            assert time.monotonic() < deadline, f"slot never claimed: {info}\n{stack.logs()}"
            time.sleep(0.3)
        assert info["limit"] == 1, info

        # 2. The new-data sensor, evaluated now, does not even probe the busy table.
        inst = dg.DagsterInstance.from_config(str(stack.home))
        [cfg] = [t for t in load_tables(stack.env["S3RS_TABLES"]) if t.name == table]
        sensor = build_new_data_sensor([cfg], [build_sync_job(cfg)])
        res = {"mysql": MySQLResource(url=ui.mysql_url), "s3": ui.s3}
        with dg.build_sensor_context(instance=inst, resources=res) as ctx:
            result = sensor(ctx)
        assert isinstance(result, dg.SkipReason), result
        assert f"{table}: run {first[:8]} is STARTED, not checked" in result.skip_message, result

        # 3. A second UI launch of the same table (another partition) stays in the queue
        #    while the first run's step holds the table's slot, though the instance allows
        #    two runs (the daemon's queue is looked at every few seconds: several rounds).
        second = stack.launch(node, DAY2)
        for _ in range(12):
            assert any(s["runId"] == first and s["stepKey"] == step
                       for s in _pool(stack, pool)["claimedSlots"]), "the first step ended"
            assert stack.run(second)["status"] == "QUEUED", stack.run(second)
            time.sleep(0.5)
    finally:
        lock.close()  # UNLOCK TABLES: the first step reads on
    r1 = stack.wait_for_run(first)
    r2 = stack.wait_for_run(second)

    # 4. Never two steps of the table at once (a run between another's steps is allowed:
    #    the pool holds steps, the queue holds runs only while the slot is taken).
    spans = sorted(_step_spans(stack, first) + _step_spans(stack, second))
    for (_, e1, k1), (s2, _, k2) in zip(spans, spans[1:], strict=False):
        assert e1 <= s2, f"{k1} and {k2} ran at once: {spans}"
    print(f"second UI launch queued {r2['startTime'] - r1['startTime']:.1f}s after the first; "
          f"steps: {[(k, round(e - s, 1)) for s, e, k in spans]}")
    md = stack.metadata(node["assetKey"]["path"], [DAY, DAY2])
    assert md[DAY]["rows"] == BUSY_ROWS and md[DAY2]["rows"] == 50, md
    assert not _pool(stack, pool)["claimedSlots"]


def _step_spans(stack: Stack, run_id: str) -> list[tuple[float, float, str]]:
    """(start, end, run:step) of each step of a run, from its event log (ms timestamps)."""
    starts: dict[str, float] = {}
    spans = []
    for e in stack.run_events(run_id):
        kind, key = e["__typename"], e.get("stepKey")
        if kind == "ExecutionStepStartEvent":
            starts[key] = int(e["timestamp"]) / 1000
        elif kind in ("ExecutionStepSuccessEvent", "ExecutionStepFailureEvent"):
            spans.append((starts[key], int(e["timestamp"]) / 1000, f"{run_id[:8]}:{key}"))
    assert spans, run_id
    return spans


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def test_browser_shows_a_partition_with_its_own_row_count(ui: UI, range_run: RangeRun):
    """Headless Chromium opens the asset page of one partition and finds its row count."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip(
            f"browser smoke test needs Debian's Chromium ({CHROMIUM}, {CHROMEDRIVER}): "
            "apt-get install chromium chromium-driver (scripts/setup.sh does)"
        )
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="browser smoke test needs selenium (pip install -e '.[dev]')"
    )
    from selenium.webdriver.chrome.service import Service

    key = range_run.keys[1]  # a closed day: 80 rows, unlike the run's 250 and its neighbours
    rows = RANGE_ROWS[1]
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1600,1200"):
        opts.add_argument(arg)
    url = (f"{ui.stack.url}/assets/{ui.db}/ui_range/s3_parquet"
           f"?view=partitions&partition={key}")
    t0 = time.monotonic()
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.get(url)
        deadline = time.monotonic() + 90
        lines: list[str] = []
        shown = None
        while time.monotonic() < deadline:  # the UI needs seconds to settle
            lines = driver.find_element("tag name", "body").text.splitlines()
            # the selected partition's materialization: its Metadata table, label then value
            if "Metadata" in lines and "rows" in lines[lines.index("Metadata"):]:
                i = lines.index("rows", lines.index("Metadata"))
                shown = lines[i + 1] if i + 1 < len(lines) else None
                break
            time.sleep(1)
        assert shown == str(rows), "\n".join(lines)[-3000:]
        assert key in lines and "Materialized" in lines, "\n".join(lines)[-3000:]
        assert "partial" not in " ".join(lines[lines.index("Metadata"):]), lines

        # The global lineage (one group per MySQL schema): each node's kind tag names its
        # table.
        driver.get(f"{ui.stack.url}/asset-groups")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lines = driver.find_element("tag name", "body").text.splitlines()
            named = {t for t in ("ui_range", "ui_orders") if t in lines}
            if len(named) == 2:
                break
            time.sleep(1)
        assert len(named) == 2, "\n".join(lines)[-3000:]
    finally:
        driver.quit()
    print(f"browser: asset partition page rendered in {time.monotonic() - t0:.1f}s")
