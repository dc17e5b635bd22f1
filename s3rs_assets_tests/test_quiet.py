"""Quiet by default: a Spark started by s3rs prints none of its WARN lines or banner, and
`-v` (DEBUG) brings them back (logs.spark_log_options, resources.get_spark); the CLI
filters Dagster's known beta warning unless -v. The Dagster event lines of `s3rs sync`
are covered in test_cli.py (JSON output at INFO carries no step_start)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from s3rs_assets import logs
from s3rs_assets.cli import _quiet_known_warnings
from s3rs_assets_tests.conftest import REPO

pytestmark = pytest.mark.timeout(300)

START = """
import sys
from s3rs_assets import logs
from s3rs_assets.resources import SparkResource, get_spark, spark_defaults
logs.configure("text", sys.argv[1])
session = get_spark(SparkResource(spark_config=spark_defaults("local[1]")))
print("rows", session.range(3).count())
session.stop()
"""


def _start_spark(*levels: str) -> list[str]:
    """The stderr of a fresh process starting Spark at each level; the processes run side
    by side (each a JVM cold start: one after the other cost twice the wait)."""
    procs = [subprocess.Popen([sys.executable, "-c", START, level], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for level in levels]
    errs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0 and "rows 3" in out, err[-3000:]
            errs.append(err)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return errs


def test_spark_is_quiet_at_info_and_speaks_at_debug():
    quiet, loud = _start_spark("INFO", "DEBUG")
    for noise in (" WARN ", "Using Spark's default log4j profile", "Setting default log level",
                  "To adjust logging level"):
        assert noise not in quiet, quiet
    assert "Using Spark's default log4j profile" in loud


def test_the_log4j_option_follows_the_level(monkeypatch):
    monkeypatch.setattr(logs, "_configured_level", None)
    monkeypatch.setenv("S3RS_LOG_LEVEL", "WARNING")
    option = logs.spark_log_options()
    assert option.startswith("-Dlog4j2.configurationFile=file:")
    path = option.split("=", 1)[1][len("file://"):]
    assert "rootLogger.level = error" in Path(path).read_text()
    monkeypatch.setenv("S3RS_LOG_LEVEL", "DEBUG")
    assert logs.spark_log_options() == ""


def test_the_backfill_policy_warning_is_filtered():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _quiet_known_warnings()
        warnings.warn("Parameter `backfill_policy` of function `asset` is currently in beta, "
                      "and may have breaking changes", UserWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["something else"]
