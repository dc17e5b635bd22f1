"""The benchmark suites run end to end at a tiny size and print the figures they promise.

Every suite runs in ONE `python -m benchmarks.run --suite core,decimal,...` subprocess (as
`make bench ARGS="--suite all"` runs them: one moto server, one Dagster home, one process's
imports, instead of seven), with this test's interpreter (the shared .venv: no dlt, no
reladiff), in a throwaway MySQL schema and PostgreSQL database (S3RS_BENCH_SCHEMA), and
writes --json; each test below checks its suite's part of that one document.
The dlt and reladiff lines are checked when those packages are importable (.venv-bench)
and otherwise must be replaced by a note that says how to get them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest

from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT, PG_DSN

REPO = Path(__file__).resolve().parent.parent
TINY = ["--rows", "1200", "--chunk-rows", "500", "--increment", "30"]
# one Spark Connect server for every suite: each `s3rs sync` process and in-process stage
# attaches to it instead of starting a JVM of its own (~15 cold starts, most of this
# test's time); the suites' code paths are the same, only their Spark start-up figures
# become an attach (the local-Spark start-up is tested in test_quiet.py, test_cli.py).
# It is the test session's server (conftest.connect_server, shared with the Spark Connect
# and UI tests; --spark-connect-url), not one the run starts: one ~25 s JVM start fewer.
ARGS = {
    "core": ["--no-naive", "--floor-repeat", "1"],
    "decimal": [],
    "shape": ["--small-tables", "2", "--small-max", "40", "--history-years", "0.1"],
    "reconcile": ["--differences", "10"],
    "fleet_scan": ["--scan-tables", "40", "--scan-schemas", "2", "--scan-drop"],
    "fleet": ["--fleet-sizes", "10", "--fleet-tables", "20", "--fleet-real", "2",
              "--fleet-parallel", "2", "--fleet-tries", "1"],
    "small": ["--small-repeat", "1"],
}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def bench_schema() -> Iterator[str]:
    """A throwaway schema name; its MySQL schema (and the fleet suite's `<name>_fleet<i>`)
    and PostgreSQL database are dropped after."""
    name = f"s3rs_bsmoke_{uuid.uuid4().hex[:8]}"
    yield name
    with pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user="root", autocommit=True) as c:
        for schema in [name, *(f"{name}_fleet{i}" for i in range(5))]:
            c.cursor().execute(f"DROP DATABASE IF EXISTS `{schema}`")
    with psycopg.connect(PG_DSN + " dbname=postgres", autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def bench_run(bench_schema: str, tmp_path_factory: pytest.TempPathFactory,
              connect_server: tuple[str, str, Path]) -> tuple[dict, str]:
    """Every suite, once, in one subprocess: the suites' documents by name, and its stdout."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    env = dict(os.environ, S3RS_BENCH_SCHEMA=bench_schema, PYTHONPATH=str(REPO),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               S3RS_MYSQL_URL=f"mysql://root:@{MYSQL_HOST}:{MYSQL_PORT}/")
    env.pop("AWS_ENDPOINT_URL_S3", None)  # the benchmark starts its own moto server
    env.pop("DAGSTER_HOME", None)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--suite", ",".join(ARGS), *TINY,
         "--spark-connect-url", connect_server[0],
         *(a for args in ARGS.values() for a in args), "--json", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())["suites"], proc.stdout


@pytest.fixture
def run_suite(bench_run: tuple[dict, str]) -> Any:
    """`run_suite(name)`: that suite's document and the run's stdout."""
    docs, stdout = bench_run
    return lambda suite: (docs[suite], stdout)


def rate(doc: dict[str, Any], key: str) -> float:
    line = next(ln for ln in doc["lines"] if ln["key"] == key)
    assert line["seconds"] > 0, line
    return line["rows_per_s"]


def optional_tool(doc: dict[str, Any], module: str, line_key: str) -> None:
    """With the package: its line is there. Without: a note saying how to get it."""
    keys = {ln["key"] for ln in doc["lines"]}
    if importlib.util.find_spec(module) is not None:
        assert line_key in keys
    else:
        assert any(f"{module} is not installed" in n and "venv.sh" in n for n in doc["notes"])


def test_core(run_suite: Any) -> None:
    doc, stdout = run_suite("core")
    for key in ("extract_floor", "backup", "load_floor", "load_baseline", "load", "e2e"):
        assert rate(doc, key) > 0
    assert doc["backup"]["rows"] == 1200
    # 1,200 rows in 500-row chunks: every checkpoint line parsed (the report's per-chunk
    # figures read "over 0 chunks" when the line's format moved on without the parser)
    numbers = [c["chunk"] for c in doc["backup"]["chunks"]]
    assert len(numbers) >= 2 and numbers == list(range(1, len(numbers) + 1)), numbers
    assert doc["load"]["rows_in_target"] == 1200
    assert "rows/s" in stdout and "load vs psycopg COPY baseline" in stdout
    assert "uptime at start" in stdout and "load average" in stdout


def test_decimal(run_suite: Any) -> None:
    doc, stdout = run_suite("decimal")
    for key in ("floor", "sync_fresh", "backup", "load", "copy", "stages", "increment",
                "sync_served"):
        assert rate(doc, key) > 0
    assert doc["backup"]["rows"] == 1200 and doc["load"]["rows_in_target"] == 1200
    assert doc["sync_served"]["rows_in_target"] == 1200  # through the s3rs server
    assert doc["copy_baseline"]["rows_in_target"] == 1200
    assert doc["floor"]["psql_copy"]["rows_in_target"] == 1200
    optional_tool(doc, "dlt", "dlt")
    if "dlt" in doc:
        assert doc["dlt"]["rows_in_target"] == 1200
    optional_tool(doc, "sling_linux_amd64", "sling_incremental")  # issue 19's peer
    for mode in ("incremental", "full-refresh"):
        if f"sling_{mode}" in doc:
            assert doc[f"sling_{mode}"]["rows_in_target"] == 1200
    assert "load stage vs psycopg COPY" in stdout and "increment:" in stdout
    assert "s3rs sync through the s3rs server vs floor" in stdout


def test_shape(run_suite: Any) -> None:
    doc, stdout = run_suite("shape")
    assert not doc["notes"], doc["notes"]  # nothing killed at the timeout
    syncs = doc["syncs"]
    assert set(syncs) == {"hist_first", "small_first", "big_first", "hist_second",
                          "small_second", "big_increment"}
    assert all(s["seconds"] > 0 for s in syncs.values())
    assert syncs["hist_first"]["spark_startup_s"] > 0  # a backup ran (its Spark attach)
    sizes = doc["record_bytes"]
    assert set(sizes) == {"hist_36d", "small_01", "small_02", "big_1200"}
    assert all(isinstance(v, int) and v > 0 for v in sizes.values()), sizes
    assert doc["tables"]["small_01"] == 10 and doc["tables"]["small_02"] == 40
    assert "record bytes" in stdout and "long history record:" in stdout


def test_reconcile(run_suite: Any) -> None:
    doc, stdout = run_suite("reconcile")
    assert doc["identical"]["s3rs_key"]["total"] == 0
    assert doc["identical"]["s3rs_all"]["total"] == 0
    assert doc["injected"] == {"deleted": 4, "edited": 3, "inserted": 2, "moved_back": 1}
    found = {k: v for k, v in doc["found"]["s3rs_all"]["counts"].items() if v}
    assert found == {"missing": 2, "extra": 4, "differs": 4}
    assert doc["after_apply"]["total"] == 0
    assert rate(doc, "count") > 0 and rate(doc, "diff_s3rs_key") > 0
    optional_tool(doc, "reladiff", "diff_reladiff_key")
    assert "s3rs --columns all: found" in stdout


def test_fleet_scan(run_suite: Any) -> None:
    doc, stdout = run_suite("fleet_scan")
    assert {ln["key"] for ln in doc["lines"]} == {
        "new_data_cold", "new_data_warm", "guard_cold", "guard",
        "status", "status_warm", "status_one_changed"}
    assert all(ln["seconds"] > 0 for ln in doc["lines"])
    # 2 of every 20 tables: one empty, one with rows and no record (a run each)
    states = {"ok": 36, "empty": 2, "never_synced": 2}
    assert doc["status_states"] == {
        "cold": states, "warm": states, "warm, one record changed": states}
    assert doc["run_requests"]["new_data"] == 2
    warm = doc["calls"]["new_data_warm"]
    assert warm["s3"].get("GetObject", 0) <= 2 * 2  # the never-synced' copies only
    guard = doc["calls"]["guard"]
    assert guard["s3"].get("GetObject", 0) <= 2 * 4  # the validated primaries are not read
    assert "s3rs status, cold:" in stdout and "s3rs status, warm:" in stdout


def test_fleet(run_suite: Any) -> None:
    doc, stdout = run_suite("fleet")
    lines = {ln["key"]: ln for ln in doc["lines"]}
    assert set(lines) == {"defs_10", "startup_10", "startup_20", "real_first",
                          "real_unchanged"}
    assert all(ln["seconds"] and ln["seconds"] > 0 for ln in lines.values()), lines
    assert all(v is not None for v in doc["sync_startup_s"].values()), doc
    assert "KILLED" not in stdout
    assert "sync --all --parallel 2 (unchanged)" in stdout


def test_small(run_suite: Any) -> None:
    """Issue 19's figures: every command's start-up, an unchanged sync and an increment
    attached to the suite's own Spark Connect server, in fresh processes and through an
    `s3rs server` (the suite stops if a served sync did not run in the server), against
    their targets."""
    doc, stdout = run_suite("small")
    (tree,) = doc["figures"]
    figures = doc["figures"][tree]
    commands = {
        "help", "watermark_get", "watermark_list", "status", "verify_help", "reconcile_help",
        "s3clean_list", "sync_unchanged", "sync_increment", "sync_unchanged_served",
        "sync_increment_served",
    }
    # each command's wall and CPU seconds, and the increment's run
    assert set(figures) == commands | {f"{c}_cpu" for c in commands} | {
        "increment_runs", "increment_runs_served"}
    assert all(f["min"] > 0 and len(f["all"]) == 1 for f in figures.values()), figures
    assert rate(doc, "sync_increment") > 0
    assert "sync_unchanged: median" in stdout and "sync_increment: median" in stdout
    assert "sync_increment_served: median" in stdout
    assert "load average" in stdout
