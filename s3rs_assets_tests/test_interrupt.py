"""Ctrl-C stops `s3rs sync`, and the next sync resumes where it stopped.

Dagster hands an interrupt raised inside a step that has a retry policy to that policy:
before `stage_results.dagster_step` turned it into a Failure that allows no retry, a
Ctrl-C during the backup retried the step, the sync ran on to the end and exited 0 (seen
on the demo: SIGINT at 12 s, "succeeded after 1 retry" 39 s later).

Real stack: a real `s3rs sync` process (the command line's own entry point, its own
Spark), a real Dagster instance, MariaDB, PostgreSQL and moto. The child holds the backup
right after its first checkpoint (a sleep in the main thread, where the step runs) and
prints a line; the test then sends SIGINT to its process group, as a terminal's Ctrl-C
does. Counted, not timed: the exit code, the run's status and its retry events, the
watermark, and the rows of the sync that follows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta

import pytest

from s3rs_assets_tests.conftest import REPO
from s3rs_assets_tests.helpers import make_ties_table
from s3rs_assets_tests.test_cli import (  # noqa: F401 - fixtures
    cli_tables_file,
    day,
    mysql,
    pg,
    stack,
)

#: the child: the backup holds after its first checkpoint until the signal arrives
CHILD = """
import sys, time
from s3rs_assets.backup import run as backup_run

real = backup_run.BackupRun._checkpoint

def held(self, *args, **kwargs):
    real(self, *args, **kwargs)
    print("S3RS-TEST-CHECKPOINTED", flush=True)
    time.sleep(600)

backup_run.BackupRun._checkpoint = held
from s3rs_assets import cli
cli.main(["sync", *(a for t in sys.argv[1:] for a in ("-t", t)), "--no-progress"])
"""
ROWS = 200  # five chunks of the table's 40 rows


@pytest.fixture
def stop_table(stack):  # noqa: F811
    from s3rs_assets.load.sql import create_ledger_sql

    rows = [(i, day(1) + timedelta(seconds=i)) for i in range(1, ROWS + 1)]
    with mysql(stack.db) as conn:
        make_ties_table(conn, "cli_stop", rows)
    with pg(stack) as c:
        c.execute(f'CREATE SCHEMA IF NOT EXISTS "{stack.db}"')
        c.execute(create_ledger_sql(stack.db))
        c.execute(f'DROP TABLE IF EXISTS "{stack.db}"."cli_stop"')
        c.execute(f'DELETE FROM "{stack.db}".s3rs_load_ledger WHERE table_name = %s',
                  ("cli_stop",))
    return stack.name("cli_stop")


def _interrupted_sync(*tables: str) -> tuple[int, str]:
    """Run the child on `tables`; SIGINT its process group once it has checkpointed."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CHILD": CHILD}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *tables], env=env, cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    lines: list[str] = []
    held = threading.Event()

    def read() -> None:
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            lines.append(line)
            if "S3RS-TEST-CHECKPOINTED" in line:
                held.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert held.wait(timeout=300), "".join(lines)[-3000:]
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)  # without the fix: the retried step's 600 s sleep
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=30)
    return proc.returncode, "".join(lines)


def test_ctrl_c_stops_the_sync_and_the_next_sync_resumes(stack, stop_table):  # noqa: F811
    import dagster as dg

    from s3rs_assets import cli
    from s3rs_assets.stage_results import INTERRUPTED_MESSAGE

    table, after = stop_table, stack.name("cli_par3")
    code, out = _interrupted_sync(table, after)
    assert code == 130, out[-3000:]
    assert f"interrupted; `s3rs sync -t {table}` resumes" in out, out[-3000:]
    assert f"interrupted; not started: {after}" in out, out[-3000:]  # no other table starts
    assert " succeeded" not in out and "retr" not in out, out[-3000:]

    # the run failed on the interrupt, without a step retry
    inst = dg.DagsterInstance.from_config(str(stack.home))
    try:
        runs = inst.get_run_records()
        assert len(runs) == 1 and runs[0].dagster_run.status == dg.DagsterRunStatus.FAILURE
        events = inst.all_logs(runs[0].dagster_run.run_id)
        kinds = [e.dagster_event.event_type_value for e in events if e.dagster_event]
        assert "STEP_UP_FOR_RETRY" not in kinds and "STEP_RESTARTED" not in kinds
        assert kinds.count("STEP_FAILURE") == 1
    finally:
        inst.dispose()

    # the watermark says so, and holds the first checkpoint: not the table's end
    rec = stack.store.read(table)
    assert rec.mysql_status == "failed" and rec.last_error == INTERRUPTED_MESSAGE
    cursor = rec.partitions[day(1).strftime("%Y-%m-%d")].cursor
    assert cursor is not None and cursor.pk is not None and 0 < int(cursor.pk[0]) < ROWS

    # the next sync resumes there and moves the rest: the warehouse equals MySQL
    from click.testing import CliRunner

    r = CliRunner().invoke(cli.main, ["sync", "-t", table, "--no-progress"])
    assert r.exit_code == 0, r.output[-3000:]
    with pg(stack) as c:
        got = c.execute(f'SELECT id FROM "{stack.db}"."cli_stop" ORDER BY id').fetchall()
    assert [g[0] for g in got] == list(range(1, ROWS + 1))


def test_ctrl_c_in_any_command_is_one_line_and_exit_130(stack, monkeypatch):  # noqa: F811
    """Not click's "Aborted!" and exit 1, which a script reads as a finding (DESIGN: 1 is
    "the data or a check is wrong"). The interrupt is raised where the command reaches S3."""
    from click.testing import CliRunner

    from s3rs_assets import cli
    from s3rs_assets.cli import status

    def ctrl_c() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(status, "_s3_checked", ctrl_c)
    r = CliRunner().invoke(cli.main, ["status"])
    assert r.exit_code == 130 and r.output.strip().splitlines()[-1] == "interrupted", r.output
    assert "Aborted" not in r.output and "Traceback" not in r.output
