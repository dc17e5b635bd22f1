"""The local stack as `make ui` runs it, for the webserver and browser tests.

`dagster-webserver -w workspace.yaml` (code location `s3rs`) and `dagster-daemon run` on a
fresh DAGSTER_HOME holding the shipped `dagster.yaml` (queued run coordinator, pools), the
test's MySQL schema, a bucket of the session's moto server and PostgreSQL. Every process
runs in its own process group (`processes.managed_process`). GraphQL helpers send the UI's
own queries (ui-core: LaunchAssetExecutionButton.tsx, LaunchAssetChoosePartitionsDialog.tsx,
ConfigFetch.tsx, RunUtils.tsx), trimmed.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from s3rs_assets.names import CODE_LOCATION, metadata_facts
from s3rs_assets_tests.conftest import REPO, free_port
from s3rs_assets_tests.processes import managed_process, tail

STARTUP_DEADLINE = 120.0  # webserver up and code location loaded
RUN_DEADLINE = 300.0  # a launched run finishes
BIN = Path(sys.executable).parent

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
    groupName
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
    ... on Run { status startTime endTime tags { key value } assetSelection { path } }
    ... on PythonError { message }
  }
}
"""

LOGS_Q = """
query ($runId: ID!) {
  logsForRun(runId: $runId, limit: 1000) {
    __typename
    ... on EventConnection {
      events {
        __typename
        ... on MessageEvent { level message timestamp }
        ... on StepEvent { stepKey }
      }
    }
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
        ... on FloatMetadataEntry { floatValue }
        ... on JsonMetadataEntry { jsonString }
      }
    }
  }
}
"""

JOB_RUNS_Q = """
query ($repositoryName: String!, $repositoryLocationName: String!, $jobName: String!) {
  pipelineOrError(params: {pipelineName: $jobName, repositoryName: $repositoryName,
                           repositoryLocationName: $repositoryLocationName}) {
    __typename
    ... on Pipeline { runs(limit: 50) { runId status } }
  }
}
"""

CHECK_EXECUTIONS_Q = """
query ($assetKey: AssetKeyInput!, $checkName: String!) {
  assetCheckExecutions(assetKey: $assetKey, checkName: $checkName, limit: 10) {
    runId
    status
    evaluation {
      success
      description
      metadataEntries {
        label
        ... on IntMetadataEntry { intValue }
        ... on JsonMetadataEntry { jsonString }
      }
    }
  }
}
"""

POOL_Q = """
query ($key: String!) {
  instance {
    concurrencyLimit(concurrencyKey: $key) {
      limit
      claimedSlots { runId stepKey }
      pendingSteps { runId stepKey assignedTimestamp }
    }
  }
}
"""

SENSOR_TICKS_Q = """
query ($repositoryName: String!, $repositoryLocationName: String!, $sensorName: String!) {
  sensorOrError(sensorSelector: {repositoryName: $repositoryName,
      repositoryLocationName: $repositoryLocationName, sensorName: $sensorName}) {
    __typename
    ... on Sensor { sensorState { status ticks(limit: 5) { status skipReason } } }
  }
}
"""


@dataclass
class Stack:
    """A running webserver + daemon and what the tests need to drive them."""

    port: int
    env: dict[str, str]
    home: Path
    log: Path
    daemon_log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gql(self, query: str, variables: dict | None = None) -> dict:
        resp = requests.post(
            f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60
        )
        resp.raise_for_status()
        body = resp.json()
        assert not body.get("errors"), body["errors"]
        return body["data"]

    def logs(self) -> str:
        return f"--- webserver:\n{tail(self.log, 3000)}\n--- daemon:\n{tail(self.daemon_log, 3000)}"

    def asset_nodes(self) -> dict[tuple[str, ...], dict]:
        return {tuple(n["assetKey"]["path"]): n for n in self.gql(ASSET_NODES_Q)["assetNodes"]}

    def run(self, run_id: str) -> dict:
        run = self.gql(RUN_Q, {"runId": run_id})["runOrError"]
        assert run["__typename"] == "Run", run
        return run

    def run_events(self, run_id: str) -> list[dict]:
        logs = self.gql(LOGS_Q, {"runId": run_id})["logsForRun"]
        return logs.get("events", [])

    def run_messages(self, run_id: str) -> str:
        return "\n".join(
            f"{e.get('level')}: {e.get('message')}"
            for e in self.run_events(run_id)
            if e.get("message")
        )

    def wait_for_run(self, run_id: str, deadline: float = RUN_DEADLINE) -> dict:
        """The run's final state; fails the test with its log unless it succeeded."""
        until = time.monotonic() + deadline
        while True:
            run = self.run(run_id)
            if run["status"] in ("FAILURE", "CANCELED"):
                raise AssertionError(
                    f"run {run['status']}:\n{self.run_messages(run_id)[-6000:]}\n{self.logs()}"
                )
            if run["status"] == "SUCCESS":
                return run
            assert time.monotonic() < until, (
                f"run still {run['status']} after {deadline}s:\n"
                f"{self.run_messages(run_id)[-4000:]}\n{self.logs()}"
            )
            time.sleep(1)

    def launch(
        self,
        node: dict,
        partition: str | None,
        *,
        check_names: list[str] | None = None,
        with_asset: bool = True,
    ) -> str:
        """Launch as the UI does: the first job of the asset, the partition's tags and config
        from that job, `dagster/from_ui`, then `launchPipelineExecution` with an asset (and
        check) selection. `with_asset=False` executes the named checks alone."""
        job = node["jobNames"][0]
        repo_name = node["repository"]["name"]
        location = node["repository"]["location"]["name"]
        asset_keys = [{"path": node["assetKey"]["path"]}]
        tags: list[dict[str, str]] = []
        run_config = "{}"
        if partition is not None:
            part = self.gql(CONFIG_PARTITION_Q, {
                "repositoryName": repo_name, "repositoryLocationName": location,
                "jobName": job, "partitionName": partition, "assetKeys": asset_keys,
            })["pipelineOrError"]
            assert part["__typename"] == "Pipeline", part
            part = part["partition"]
            assert part["tagsOrError"]["__typename"] == "PartitionTags", part
            assert part["runConfigOrError"]["__typename"] == "PartitionRunConfig", part
            tags = [{"key": t["key"], "value": t["value"]} for t in part["tagsOrError"]["results"]]
            assert {"key": "dagster/partition", "value": partition} in tags
            run_config = part["runConfigOrError"]["yaml"] or "{}"
        tags.append({"key": "dagster/from_ui", "value": "true"})
        checks = node["assetChecksOrError"].get("checks", [])
        if check_names is None:
            check_names = [c["name"] for c in checks if not c["jobNames"] or job in c["jobNames"]]
        launched = self.gql(LAUNCH_M, {"executionParams": {
            "mode": "default",
            "executionMetadata": {"tags": tags},
            "runConfigData": run_config,
            "selector": {
                "repositoryLocationName": location,
                "repositoryName": repo_name,
                "pipelineName": job,
                "assetSelection": asset_keys if with_asset else [],
                "assetCheckSelection": [
                    {"name": name, "assetKey": asset_keys[0]} for name in check_names
                ],
            },
        }})["launchPipelineExecution"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        return launched["run"]["runId"]

    def metadata(self, key: list[str], partitions: list[str]) -> dict[str, dict]:
        """Partition -> {label: value} of the latest materialization of each partition, the
        raw figures of its `details` entry over the formatted ones (`names.metadata_facts`)."""
        [node] = self.gql(MATERIALIZATIONS_Q, {"keys": [{"path": key}], "partitions": partitions})[
            "assetNodes"
        ]
        out = {}
        for mat in node["latestMaterializationByPartition"]:
            if mat is None:
                continue
            md: dict[str, Any] = {"__run_id": mat["runId"]}
            for e in mat["metadataEntries"]:
                md[e["label"]] = next(
                    (e[f] for f in ("intValue", "text", "floatValue", "jsonString") if f in e),
                    None,
                )
            out[mat["partition"]] = metadata_facts(md)
        return out


def _wait_up(stack: Stack, proc: Any) -> None:
    deadline = time.monotonic() + STARTUP_DEADLINE
    while True:
        assert proc.poll() is None, f"webserver exited {proc.returncode}:\n{stack.logs()}"
        try:
            if requests.get(f"{stack.url}/server_info", timeout=5).ok:
                break
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline, f"webserver not up in time:\n{stack.logs()}"
        time.sleep(0.5)
    while True:
        ws = stack.gql(WORKSPACE_Q)["workspaceOrError"]
        assert ws["__typename"] == "Workspace", ws
        entries = ws["locationEntries"]
        if entries and all(e["loadStatus"] == "LOADED" for e in entries):
            return
        assert time.monotonic() < deadline, f"location not loaded: {entries}\n{stack.logs()}"
        time.sleep(0.5)


@contextmanager
def running_stack(env: dict[str, str], workdir: Path) -> Iterator[Stack]:
    """Webserver and daemon on a fresh DAGSTER_HOME (`workdir/dagster_home`) holding the
    repository's own dagster.yaml."""
    home = workdir / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {**env, "DAGSTER_HOME": str(home)}
    port = free_port()
    stack = Stack(port, env, home, workdir / "webserver.log", workdir / "daemon.log")
    with ExitStack() as stop:
        web = stop.enter_context(managed_process(
            [str(BIN / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1",
             "-p", str(port)],
            env, stack.log, REPO,
        ))
        _wait_up(stack, web)
        stop.enter_context(managed_process(
            [str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
            env, stack.daemon_log, REPO,
        ))
        yield stack


def location_of(node: dict) -> tuple[str, str]:
    """(repository name, location name) of an asset node; the location is s3rs."""
    assert node["repository"]["location"]["name"] == CODE_LOCATION, node["repository"]
    return node["repository"]["name"], node["repository"]["location"]["name"]
