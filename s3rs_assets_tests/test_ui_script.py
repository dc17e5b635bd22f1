"""`scripts/ui.sh` (`make ui`): up without superseded/beta warnings, and SIGTERM or SIGINT
stops all of it: dagster dev, the webserver, the daemon and the code server."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from contextlib import suppress
from urllib.parse import urlparse

import boto3
import pytest
import requests

from s3rs_assets_tests.conftest import REPO, free_port
from s3rs_assets_tests.processes import MARKER, marked, restore_default_signals, tail

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STARTUP_DEADLINE = 150.0
STOP_DEADLINE = 45.0  # the script's grace (20 s) plus SIGTERM's 10 s, and some


def _cmdlines(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        with suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            out.append(f.read().replace(b"\0", b" ").decode())
    return out


def _ignore_sigint() -> None:
    """preexec_fn: as for a background job of a non-interactive shell (`make ui &` in a
    script): SIGINT ignored, and inherited so by everything it starts."""
    restore_default_signals()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(
    ("sig", "preexec"),
    [(signal.SIGTERM, _ignore_sigint), (signal.SIGINT, restore_default_signals)],
    ids=["SIGTERM-background", "SIGINT-terminal"],
)
def test_ui_script_comes_up_quietly_and_a_signal_stops_every_process(
    sig, preexec, tmp_path, mysql_db, mysql_url, pg_url, moto_endpoint
):
    port = free_port()
    tables = tmp_path / "tables.yaml"
    tables.write_text(f"tables:\n  - name: {mysql_db}.ui_script\n    start: '2025-03-01'\n")
    marker = uuid.uuid4().hex
    bucket = f"ui-script-{marker[:8]}"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    env = {
        **os.environ,
        MARKER: marker,
        "PYTHONPATH": str(REPO),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "S3RS_TABLES": str(tables),
        "S3RS_MYSQL_URL": mysql_url,
        "S3RS_REDSHIFT_URL": pg_url,
        "S3RS_S3_BUCKET": bucket,
        "S3RS_MOTO_PORT": str(urlparse(moto_endpoint).port),  # reuse the session's server
        # a state dir of its own: the demo's moto (pid file in .local/, port 5555) is left
        # alone, whether `make demo` left it running or not (`make demo` then `make test`)
        "S3RS_STATE_DIR": str(tmp_path / "state"),
        "S3RS_UI_PORT": str(port),
        # a master of its own: ui.sh then starts no Spark Connect server (it outlives the UI)
        "S3RS_SPARK_MASTER": "local[1]",
    }
    log = tmp_path / "ui.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "scripts/ui.sh"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec,
        )
    try:
        # 1. Webserver up and the code location loaded (the code server built the assets).
        deadline = time.monotonic() + STARTUP_DEADLINE
        while True:
            assert proc.poll() is None, f"ui.sh exited {proc.returncode}:\n{tail(log)}"
            try:
                body = requests.post(
                    f"http://127.0.0.1:{port}/graphql", timeout=5,
                    json={"query": "{ workspaceOrError { ... on Workspace { locationEntries "
                                   "{ name loadStatus } } } }"},
                ).json()
                entries = body["data"]["workspaceOrError"]["locationEntries"]
                if entries and entries[0]["loadStatus"] == "LOADED":
                    break
            except (requests.RequestException, KeyError, TypeError, ValueError):
                pass
            assert time.monotonic() < deadline, f"UI not up in time:\n{tail(log)}"
            time.sleep(1)
        assert [e["name"] for e in entries] == ["s3rs"], entries
        cmds = " | ".join(_cmdlines(marked(marker)))
        for part in ("dagster dev", "dagster_webserver", "dagster._daemon", "grpc"):
            assert part in cmds, f"{part} not running: {cmds}"
        time.sleep(3)  # the daemon's first log lines
        text = log.read_text(errors="replace")
        for noise in ("SupersessionWarning", "BetaWarning", "PreviewWarning",
                      "Found a dagster instance configuration value"):
            assert noise not in text, text[-4000:]
        assert f"http://127.0.0.1:{port}" in text

        # 2. The signal to the script alone (`kill <pid>`; Ctrl-C reaches make and the script,
        #    not dagster dev's own group): nothing remains.
        t0 = time.monotonic()
        os.kill(proc.pid, sig)
        proc.wait(timeout=STOP_DEADLINE)
        while marked(marker) and time.monotonic() - t0 < STOP_DEADLINE:
            time.sleep(0.3)
        left = _cmdlines(marked(marker))
        assert not left, f"left running after {sig.name}: {left}\n{tail(log)}"
        assert proc.returncode == 0, tail(log)
        text = log.read_text(errors="replace")
        assert "Dagster UI stopped" in text
        how = "escalated" if "still running after" in text else "clean shutdown"
        print(f"ui.sh stopped every process {time.monotonic() - t0:.1f}s after {sig.name} "
              f"({how})")
    finally:
        for pid in marked(marker):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
