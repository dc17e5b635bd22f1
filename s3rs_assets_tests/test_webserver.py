"""The Dagster UI path, as users use it: `dagster-webserver` on the local stack, driven
through the same GraphQL queries and mutation the UI sends.

One test, one webserver, one run (one Spark JVM). Every process it starts runs in its own
process group, is stopped with SIGTERM then SIGKILL, and carries a marker in its
environment so that anything that left the group is found and killed by PID too.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
import requests

from s3rs_assets.io_manager import store_for
from s3rs_assets_tests.conftest import REPO, free_port
from s3rs_assets_tests.helpers import make_ties_table, ties
from s3rs_assets_tests.processes import managed_process, tail

pytestmark = [pytest.mark.slow, pytest.mark.timeout(540)]

DAY = "2025-03-03"
ORDERS_ROWS, ITEMS_ROWS = 300, 200
STARTUP_DEADLINE = 90.0  # webserver up and code location loaded
RUN_DEADLINE = 240.0  # the launched run finishes

TABLES_YAML = """
tables:
  - name: {db}.ui_orders
    start: "2025-03-01"
    lag: 0s
    chunk_rows: 1000
  - name: {db}.ui_items
    start: "2025-03-01"
    lag: 0s
"""

# Default run coordinator (launches at once, no dagster-daemon needed) and default run
# launcher (each run in a subprocess of the webserver's code server). The shipped
# dagster.yaml uses the queued coordinator, which would need dagster-daemon running too.
DAGSTER_YAML = """
telemetry:
  enabled: false
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
run_launcher:
  module: dagster._core.launcher
  class: DefaultRunLauncher
"""

# --- the queries below are the UI's own (ui-core: LaunchAssetExecutionButton.tsx,
# --- LaunchAssetChoosePartitionsDialog.tsx, ConfigFetch.tsx, RunUtils.tsx), trimmed.

WORKSPACE_Q = """
query {
  workspaceOrError {
    __typename
    ... on PythonError { message }
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError {
          __typename
          ... on PythonError { message stack }
          ... on RepositoryLocation { name repositories { name pipelines { name } } }
        }
      }
    }
  }
}
"""

ASSET_NODES_Q = """
query {
  assetNodes {
    assetKey { path }
    isPartitioned
    isMaterializable
    jobNames
    partitionKeys
    partitionDefinition { type description }
    dependencyKeys { path }
    repository { name location { name } }
    assetChecksOrError {
      __typename
      ... on AssetChecks { checks { name jobNames } }
    }
  }
}
"""

CONFIG_PARTITION_Q = """
query ConfigPartitionForAssetJobQuery($repositoryName: String!,
    $repositoryLocationName: String!, $jobName: String!, $partitionName: String!,
    $assetKeys: [AssetKeyInput!]!) {
  pipelineOrError(params: {pipelineName: $jobName, repositoryName: $repositoryName,
                           repositoryLocationName: $repositoryLocationName}) {
    __typename
    ... on Pipeline {
      partition(partitionName: $partitionName, selectedAssetKeys: $assetKeys) {
        name
        runConfigOrError {
          __typename
          ... on PartitionRunConfig { yaml }
          ... on PythonError { message }
        }
        tagsOrError {
          __typename
          ... on PartitionTags { results { key value } }
          ... on PythonError { message }
        }
      }
    }
  }
}
"""

LAUNCH_M = """
mutation LaunchPipelineExecution($executionParams: ExecutionParams!) {
  launchPipelineExecution(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { id runId pipelineName } }
    ... on PipelineNotFoundError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on PythonError { message stack }
    ... on Error { message }
  }
}
"""

RUN_Q = """
query ($runId: ID!) {
  runOrError(runId: $runId) {
    __typename
    ... on Run { status tags { key value } assetSelection { path } }
    ... on PythonError { message }
  }
}
"""

LOGS_Q = """
query ($runId: ID!) {
  logsForRun(runId: $runId, limit: 500) {
    __typename
    ... on EventConnection { events { __typename ... on MessageEvent { level message } } }
  }
}
"""

MATERIALIZATIONS_Q = """
query ($keys: [AssetKeyInput!], $partitions: [String!]) {
  assetNodes(assetKeys: $keys) {
    assetKey { path }
    latestMaterializationByPartition(partitions: $partitions) {
      runId
      partition
      metadataEntries {
        label
        ... on IntMetadataEntry { intValue }
        ... on TextMetadataEntry { text }
      }
    }
  }
}
"""


def _gql(port: int, query: str, variables: dict | None = None) -> dict:
    resp = requests.post(
        f"http://127.0.0.1:{port}/graphql",
        json={"query": query, "variables": variables or {}},
        timeout=60,
    )
    resp.raise_for_status()
    body = resp.json()
    assert not body.get("errors"), body["errors"]
    return body["data"]


@contextmanager
def _webserver(env: dict, log: Path) -> Iterator[int]:
    port = free_port()
    args = [sys.executable, "-m", "dagster_webserver", "-m", "s3rs_assets.definitions",
            "-h", "127.0.0.1", "-p", str(port)]
    with managed_process(args, env, log, REPO) as proc:
        deadline = time.monotonic() + STARTUP_DEADLINE
        while True:
            assert proc.poll() is None, f"webserver exited {proc.returncode}:\n{tail(log)}"
            try:
                if requests.get(f"http://127.0.0.1:{port}/server_info", timeout=5).ok:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, f"webserver not up in time:\n{tail(log)}"
            time.sleep(0.5)
        yield port


def _wait_for_location(port: int, log: Path) -> dict:
    deadline = time.monotonic() + STARTUP_DEADLINE
    while True:
        ws = _gql(port, WORKSPACE_Q)["workspaceOrError"]
        assert ws["__typename"] == "Workspace", ws
        entries = ws["locationEntries"]
        if entries and all(e["loadStatus"] == "LOADED" for e in entries):
            return entries
        assert time.monotonic() < deadline, f"location not loaded: {entries}\n{tail(log)}"
        time.sleep(0.5)


def _run_messages(port: int, run_id: str) -> str:
    logs = _gql(port, LOGS_Q, {"runId": run_id})["logsForRun"]
    return "\n".join(
        f"{e.get('level')}: {e.get('message')}" for e in logs.get("events", []) if e.get("message")
    )


def test_webserver_lists_assets_and_materializes_a_partition_like_the_ui(
    tmp_path, mysql_db, mysql_conn, mysql_url, pg_url, s3_resource, moto_endpoint
):
    t0 = time.monotonic()
    day = datetime.strptime(DAY, "%Y-%m-%d")
    make_ties_table(mysql_conn, "ui_orders", ties(ORDERS_ROWS, day, 3))
    make_ties_table(mysql_conn, "ui_items", ties(ITEMS_ROWS, day, 2))
    tables = tmp_path / "tables.yaml"
    tables.write_text(TABLES_YAML.format(db=mysql_db))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML)
    env = {
        **os.environ,  # AWS_* of the moto fixture (a server in this process, reached over HTTP)
        "S3RS_TABLES": str(tables),
        "S3RS_MYSQL_URL": mysql_url,
        "S3RS_S3_BUCKET": s3_resource.bucket,
        "S3RS_S3_PREFIX": s3_resource.prefix,
        "S3RS_REDSHIFT_URL": pg_url,
        "S3RS_SPARK_MASTER": "local[2]",
        "DAGSTER_HOME": str(home),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    log = tmp_path / "webserver.log"

    with _webserver(env, log) as port:
        # 1. The code location loads without errors and has the per-table jobs.
        entries = _wait_for_location(port, log)
        assert len(entries) == 1
        loc = entries[0]["locationOrLoadError"]
        assert loc["__typename"] == "RepositoryLocation", loc
        [repo] = loc["repositories"]
        jobs = {p["name"] for p in repo["pipelines"]}
        assert {f"{mysql_db}__ui_orders__sync", f"{mysql_db}__ui_items__sync"} <= jobs

        # 2. Both assets of every table, partitioned by day, the seeded day among the keys.
        nodes = {tuple(n["assetKey"]["path"]): n for n in _gql(port, ASSET_NODES_Q)["assetNodes"]}
        expected = {(mysql_db, t, s) for t in ("ui_orders", "ui_items")
                    for s in ("s3_parquet", "redshift_table")}
        assert set(nodes) == expected
        for key, n in nodes.items():
            assert n["isPartitioned"] and n["isMaterializable"], key
            assert n["partitionDefinition"]["type"] == "TIME_WINDOW", key
            assert n["partitionKeys"][0] == "2025-03-01" and DAY in n["partitionKeys"], key
        assert nodes[(mysql_db, "ui_orders", "redshift_table")]["dependencyKeys"] == [
            {"path": [mysql_db, "ui_orders", "s3_parquet"]}]

        # 3. Materialize one partition of ui_orders/s3_parquet as the UI does: the first job
        #    the asset is in, the partition's tags and config from that job, then the mutation.
        asset = nodes[(mysql_db, "ui_orders", "s3_parquet")]
        assert asset["jobNames"], asset
        job = asset["jobNames"][0]
        repo_name = asset["repository"]["name"]
        location = asset["repository"]["location"]["name"]
        asset_keys = [{"path": asset["assetKey"]["path"]}]
        part = _gql(port, CONFIG_PARTITION_Q, {
            "repositoryName": repo_name, "repositoryLocationName": location, "jobName": job,
            "partitionName": DAY, "assetKeys": asset_keys,
        })["pipelineOrError"]
        assert part["__typename"] == "Pipeline", part
        part = part["partition"]
        assert part["tagsOrError"]["__typename"] == "PartitionTags", part
        assert part["runConfigOrError"]["__typename"] == "PartitionRunConfig", part
        tags = [{"key": t["key"], "value": t["value"]} for t in part["tagsOrError"]["results"]]
        assert {"key": "dagster/partition", "value": DAY} in tags
        tags.append({"key": "dagster/from_ui", "value": "true"})
        checks = asset["assetChecksOrError"].get("checks", [])
        launched = _gql(port, LAUNCH_M, {"executionParams": {
            "mode": "default",
            "executionMetadata": {"tags": tags},
            "runConfigData": part["runConfigOrError"]["yaml"] or "{}",
            "selector": {
                "repositoryLocationName": location,
                "repositoryName": repo_name,
                "pipelineName": job,
                "assetSelection": asset_keys,
                "assetCheckSelection": [
                    {"name": c["name"], "assetKey": asset_keys[0]} for c in checks
                    if not c["jobNames"] or job in c["jobNames"]
                ],
            },
        }})["launchPipelineExecution"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]

        # 4. The run succeeds (the default coordinator starts it at once).
        deadline = time.monotonic() + RUN_DEADLINE
        while True:
            run = _gql(port, RUN_Q, {"runId": run_id})["runOrError"]
            assert run["__typename"] == "Run", run
            if run["status"] in ("FAILURE", "CANCELED"):
                pytest.fail(f"run {run['status']}:\n{_run_messages(port, run_id)[-6000:]}"
                            f"\n--- webserver log:\n{tail(log, 3000)}")
            if run["status"] == "SUCCESS":
                break
            assert time.monotonic() < deadline, (
                f"run still {run['status']} after {RUN_DEADLINE}s:\n"
                f"{_run_messages(port, run_id)[-6000:]}")
            time.sleep(1)
        assert {"key": "dagster/partition", "value": DAY} in run["tags"]
        assert run["assetSelection"] == asset_keys  # only the backup stage ran

        # 5. The UI shows the partition materialized by that run, with the row count.
        mats = _gql(port, MATERIALIZATIONS_Q, {
            "keys": [asset_keys[0], {"path": [mysql_db, "ui_orders", "redshift_table"]}],
            "partitions": [DAY],
        })["assetNodes"]
        by_stage = {m["assetKey"]["path"][-1]: m["latestMaterializationByPartition"] for m in mats}
        [mat] = by_stage["s3_parquet"]
        assert mat["runId"] == run_id and mat["partition"] == DAY
        md = {e["label"]: e.get("intValue", e.get("text")) for e in mat["metadataEntries"]}
        assert md["rows"] == ORDERS_ROWS and md["status"] == "complete", md
        assert by_stage["redshift_table"] == [None]

    # 6. The watermark in S3: the partition is complete with every seeded row.
    rec = store_for(s3_resource).read(f"{mysql_db}.ui_orders")
    assert rec.mysql_status == "success" and rec.mysql_rows_extracted == ORDERS_ROWS
    assert {k: p.status for k, p in rec.partitions.items()} == {DAY: "complete"}
    assert sum(f.rows for f in rec.partitions[DAY].files) == ORDERS_ROWS
    assert rec.redshift_rows_loaded == 0
    assert store_for(s3_resource).read(f"{mysql_db}.ui_items") is None
    print(f"webserver UI path: {time.monotonic() - t0:.1f}s")
