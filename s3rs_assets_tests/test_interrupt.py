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

from s3rs_assets_tests.cli_stack import (
    day,
    empty_warehouse,
    mysql,
    pg,
)
from s3rs_assets_tests.conftest import REPO
from s3rs_assets_tests.helpers import make_ties_table

#: the child: the backup holds after its first checkpoint until the signal arrives
CHILD = """
import sys, threading, time
from s3rs_assets.backup import run as backup_run

real = backup_run.BackupRun._checkpoint

def held(self, *args, **kwargs):
    real(self, *args, **kwargs)
    print("S3RS-TEST-CHECKPOINTED", flush=True)
    if threading.current_thread() is threading.main_thread():
        time.sleep(600)  # the signal interrupts it
    else:  # a run in a thread (--parallel): a long chunk, over when the stop is asked
        stopping.STOP.wait(600)

backup_run.BackupRun._checkpoint = held
from s3rs_assets import cli, stopping
args = sys.argv[1:]
cli.main(["sync", *(a for t in args if t != "--parallel" for a in ("-t", t)),
          *(["--parallel", "2"] if "--parallel" in args else []), "--no-progress"])
"""
ROWS = 200  # five chunks of the tables' 40 rows
#: the interrupted table, and the one the sequential sync never starts (--parallel: both run)
TABLES = ("cli_stop", "cli_par3")


@pytest.fixture
def stop_table(stack):
    rows = [(i, day(1) + timedelta(seconds=i)) for i in range(1, ROWS + 1)]
    with mysql(stack.db) as conn:
        for t in TABLES:
            make_ties_table(conn, t, rows)
    empty_warehouse(stack, *TABLES)
    return stack.name("cli_stop")


def _interrupted_sync(*tables: str, held: int = 1) -> tuple[int, str]:
    """Run the child on `tables` (and "--parallel"); SIGINT its process group once `held`
    backups have checkpointed."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CHILD": CHILD}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *tables], env=env, cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    lines: list[str] = []
    all_held = threading.Event()

    def read() -> None:
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            lines.append(line)
            if sum("S3RS-TEST-CHECKPOINTED" in x for x in lines) >= held:
                all_held.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert all_held.wait(timeout=300), "".join(lines)[-3000:]
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)  # without the fix: the retried step's 600 s sleep
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=30)
    return proc.returncode, "".join(lines)


def test_ctrl_c_stops_the_sync_and_the_next_sync_resumes(stack, stop_table):
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


def test_ctrl_c_in_any_command_is_one_line_and_exit_130(stack, monkeypatch):
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


def test_ctrl_c_stops_the_runs_of_a_parallel_sync(stack, stop_table):
    """`--parallel 2`: the runs execute in threads, which the signal does not reach; the
    command asks them to stop (`stopping.STOP`), each stops before its next chunk, keeping
    the one in flight, and neither is retried. Then a sync moves the rest of both."""
    import dagster as dg

    from s3rs_assets import cli
    from s3rs_assets.stage_results import INTERRUPTED_MESSAGE

    names = [stack.name(t) for t in TABLES]
    code, out = _interrupted_sync(*names, "--parallel", held=2)
    assert code == 130, out[-3000:]
    assert "the runs under way stop after the chunk or transaction in flight" in out
    for name in names:
        assert f"{name}: run " in out and f"interrupted; `s3rs sync -t {name}` resumes" in out
    assert " succeeded" not in out and "retr" not in out, out[-3000:]

    inst = dg.DagsterInstance.from_config(str(stack.home))
    try:
        runs = inst.get_run_records()
        assert len(runs) == 2
        for run in runs:
            assert run.dagster_run.status == dg.DagsterRunStatus.FAILURE
            kinds = [e.dagster_event.event_type_value
                     for e in inst.all_logs(run.dagster_run.run_id) if e.dagster_event]
            assert "STEP_UP_FOR_RETRY" not in kinds and kinds.count("STEP_FAILURE") == 1
    finally:
        inst.dispose()
    for name in names:
        rec = stack.store.read(name)
        assert rec.mysql_status == "failed" and rec.last_error == INTERRUPTED_MESSAGE
        cursor = rec.partitions[day(1).strftime("%Y-%m-%d")].cursor
        assert 0 < int(cursor.pk[0]) < ROWS  # the chunks read before the stop are kept

    from click.testing import CliRunner

    r = CliRunner().invoke(cli.main, ["sync", *(a for n in names for a in ("-t", n)),
                                      "--parallel", "2", "--no-progress"])
    assert r.exit_code == 0, r.output[-3000:]
    with pg(stack) as c:
        for t in TABLES:
            got = c.execute(f'SELECT id FROM "{stack.db}"."{t}" ORDER BY id').fetchall()
            assert [g[0] for g in got] == list(range(1, ROWS + 1)), t
