"""What an increment's run costs Dagster (issue 19, "small operations instant"): every event
is a write to the run's SQLite event log (~10-25 ms each on this machine), and Dagster
rebuilds the run's job from its pointer several times per `execute_job`. Counted with the
real instance and a real run, not timed.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from s3rs_assets_tests.cli_stack import (
    invoke,
    mysql,
)
from s3rs_assets_tests.helpers import insert_rows

#: Dagster's own events of a one-partition increment run (both stages, both sync checks),
#: measured 2026-11-27: 31 = run start and success 2, engine 2, resource init 2, logs
#: captured 1, planned 4, step start/output/success 12, step input and loaded input 2,
#: handled output 2, materializations 2, check evaluations 2
EVENTS = 31
#: the run's own log messages: 2 (the backup's chunk line with its partitions' summary, the
#: load's transaction line; 3 before evt28, the chunk line apart: 4 before that, the load's
#: per-partition line apart); a warning, e.g. a retried query, may join them
MESSAGES = 4


@pytest.mark.usefixtures("orders")
def test_an_increment_run_writes_few_events_and_builds_its_job_once(request, monkeypatch):
    env = request.getfixturevalue("stack")  # the one `orders` filled
    import dagster as dg

    from s3rs_assets import table_job
    from s3rs_assets.names import TABLE_TAG

    name = env.name("cli_orders")
    first = invoke("sync", "-t", name, "--no-progress")
    assert first.exit_code == 0, first.output
    stamp = datetime.now() - timedelta(minutes=20)
    with mysql(env.db) as conn:
        insert_rows(conn, "cli_orders", [(i, stamp) for i in range(61, 71)])
    builds: list[str] = []
    build = table_job.sync_job

    def counted(table: str) -> dg.JobDefinition:
        builds.append(table)
        return build(table)

    monkeypatch.setattr(table_job, "sync_job", counted)
    r = invoke("sync", "-t", name, "--no-progress")
    assert r.exit_code == 0, r.output
    assert r.stdout.count(" succeeded") == 1, r.stdout
    with dg.DagsterInstance.from_config(str(env.home)) as inst:
        runs = inst.get_runs(filters=dg.RunsFilter(tags={TABLE_TAG: name}), limit=1)
        entries = inst.all_logs(runs[0].run_id)
    assert builds == [name], builds  # built once for the run, not once per reconstruction
    kinds = Counter(e.dagster_event.event_type_value for e in entries if e.dagster_event)
    assert sum(kinds.values()) <= EVENTS, sorted(kinds.items())
    messages = [e.user_message for e in entries if not e.dagster_event]
    assert len(messages) <= MESSAGES, messages
    # the load's line still says what its transaction did, partition by partition
    (load,) = [m for m in messages if "already in the ledger" in m]
    assert "1 file(s) loaded" in load and "10 inserted" in load and "attempt(s)" in load, load


#: GETs of the table's watermark primary by an increment's `s3rs sync` once the monitor's
#: polls are left out: the plan's read, the backup's recovery check (`recover` always asks
#: S3) and the monitor's read after the run (its progress summary and the "not yet" lines
#: share it). Before 2026-11-27 (incr19): 6 (the monitor's base read again, the load's
#: input read from a store of its own, the unread-rows report read again).
PRIMARY_GETS = 3


def synced_then_ten_new_rows(env) -> str:
    """`cli_orders` synced, then 10 new rows below its safety bound: the next sync is an
    increment. Returns the table's name."""
    name = env.name("cli_orders")
    assert invoke("sync", "-t", name, "--no-progress").exit_code == 0
    with mysql(env.db) as conn:
        insert_rows(conn, "cli_orders", [(i, datetime.now() - timedelta(minutes=20))
                                         for i in range(61, 71)])
    return name


def sync_the_increment(env, name: str, counted: Callable[[], Any]) -> Any:
    """`s3rs sync -t name`: one run, and all 70 rows copied and loaded. Returns what
    `counted()` says right after the sync, before this reads the record to check it."""
    r = invoke("sync", "-t", name, "--no-progress")
    got = counted()
    assert r.exit_code == 0, r.output
    assert r.stdout.count(" succeeded") == 1, r.stdout
    rec = env.store.read(name, fresh=True)
    assert rec.mysql_rows_extracted == 70 and rec.redshift_rows_loaded == 70
    return got


@pytest.mark.usefixtures("orders")
def test_an_increment_sync_reads_its_record_from_s3_three_times(request, monkeypatch):
    """Counted on the real moto server: every GetObject of the primary the process makes."""
    env = request.getfixturevalue("stack")
    import botocore.client

    from s3rs_assets.progress import SyncMonitor

    name = synced_then_ten_new_rows(env)
    primary = env.resource.layout.watermark_primary(name)
    gets: list[str] = []
    call = botocore.client.BaseClient._make_api_call

    def counted(self, operation, params):
        if operation == "GetObject" and params.get("Key") == primary:
            gets.append(operation)
        return call(self, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counted)
    monkeypatch.setattr(SyncMonitor, "INTERVAL", 3600.0)  # only the poll at its stop
    got = sync_the_increment(env, name, lambda: list(gets))
    assert len(got) == PRIMARY_GETS, got


def test_the_monitor_reads_the_record_only_after_news_from_the_event_log(tmp_path, s3_client,
                                                                          bucket):
    """A poll that finds nothing new in the run's event log reads nothing from S3; the poll
    at `stop` always reads (the counts after the run)."""
    import dagster as dg

    from s3rs_assets.config import TableConfig
    from s3rs_assets.connections import S3Connector
    from s3rs_assets.progress import SyncMonitor

    table = TableConfig.from_dict({"name": "s.events_monitor", "start": "2026-01-01"})
    s3 = S3Connector(bucket=bucket, prefix="monitor")
    gets: list[str] = []
    client = s3.client()
    client.meta.events.register("before-call.s3.GetObject", lambda **kw: gets.append("get"))
    with dg.DagsterInstance.ephemeral() as inst:
        monitor = SyncMonitor(table, ("backup",), inst, s3, "no-such-run", tty=False,
                              interval=3600, base=None)
        assert gets == []  # the base record was given
        monitor.start()  # its thread waits an hour before its first poll
        monitor._poll()  # the first poll reads (nothing seen yet)
        monitor._poll()
        monitor._poll()  # no run, no event: no read
        assert len(gets) == 1
        monitor.stop()
        assert len(gets) == 2
    assert monitor.final is None  # no record in S3



#: warehouse connections an increment's `s3rs sync` opens, by where: the plan's ledger read
#: (which files S3 may drop), the load step (its DDL check and its transaction) and the
#: matches_mysql check step (its ledger read and its comparison). Before 2026-11-27
#: (dagcost): 5, the load and the check step opening 2 each.
CONNECTIONS = {"plan": 1, "load": 1, "check": 1}


@pytest.mark.usefixtures("orders")
def test_an_increment_sync_opens_one_warehouse_connection_per_step(request, monkeypatch):
    """Counted on the real PostgreSQL: every psycopg.connect the process makes, by the
    s3rs module that asked for it."""
    env = request.getfixturevalue("stack")
    import traceback

    import psycopg

    name = synced_then_ten_new_rows(env)
    opened: Counter[str] = Counter()
    connect = psycopg.connect
    where = {"s3rs_assets/load_stage.py": "load", "s3rs_assets/checks.py": "check",
             "s3rs_assets/work.py": "plan"}

    def counted(*args, **kwargs):
        files = [f.filename for f in traceback.extract_stack()]
        opened[next((w for f in files for k, w in where.items() if f.endswith(k)), "other")] += 1
        return connect(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counted)
    got = sync_the_increment(env, name, lambda: dict(opened))
    assert got == CONNECTIONS, got


#: every event of the first sync of `cli_orders` (60 rows on 3 days, chunk_rows 25: 3
#: checkpoints, chunks 1-2 of the oldest day and one of each other day), measured
#: 2026-11-28 (evt28): the 31 of `EVENTS` (one stage materialization each), 4 more
#: materializations (one per partition of each stage), 4 messages (the backup's chunk lines
#: and summary, the load's DDL of the target and of its state table, its transaction line):
#: 38, and one to spare for a warning (a retried query). 41 before: one entry per
#: checkpoint and one for the summary.
FIRST_SYNC_EVENTS = 39


@pytest.mark.usefixtures("orders")
def test_a_multi_chunk_run_writes_its_chunk_lines_in_few_entries(request, monkeypatch):
    """Every log entry is a commit to the run's SQLite event log (~20-40 ms): the backup's
    checkpoints share entries (`LOG_EVERY` apart, here longer than the run), and every
    chunk's line is still in them, in order."""
    env = request.getfixturevalue("stack")
    import dagster as dg

    from s3rs_assets.backup import run as backup_run
    from s3rs_assets.names import TABLE_TAG

    monkeypatch.setattr(backup_run, "LOG_EVERY", 3600.0)
    name = env.name("cli_orders")
    r = invoke("sync", "-t", name, "--no-progress")
    assert r.exit_code == 0, r.output
    with dg.DagsterInstance.from_config(str(env.home)) as inst:
        runs = inst.get_runs(filters=dg.RunsFilter(tags={TABLE_TAG: name}), limit=1)
        entries = inst.all_logs(runs[0].run_id)
    assert len(entries) <= FIRST_SYNC_EVENTS, Counter(
        e.dagster_event.event_type_value if e.dagster_event else "message" for e in entries
    )
    backup = [e.user_message for e in entries
              if not e.dagster_event and e.step_key and e.step_key.endswith("s3_parquet")]
    assert len(backup) == 1, backup
    chunks = re.findall(r"^\S+ (\S+): chunk (\d+) ", backup[0], re.MULTILINE)
    days = sorted({day for day, _ in chunks})
    assert len(days) == 3, chunks
    assert chunks == [(days[0], "1"), (days[0], "2"), (days[1], "1"), (days[2], "1")], chunks
    assert "3 checkpoint write(s)" in backup[0].splitlines()[-1], backup


def test_checkpoint_lines_are_held_until_log_every_passed(monkeypatch):
    """`LOG_EVERY` 0: an entry per checkpoint, then the summary; otherwise held lines go
    out with the next entry or the summary, and a failed run still logs what it did."""
    from types import SimpleNamespace

    from s3rs_assets.backup import run as backup_run

    def made(every: float, logged: list[str]) -> backup_run.BackupRun:
        ex: Any = SimpleNamespace(table_name="s.t")
        return backup_run.BackupRun(ex, None, windows=[], upper=datetime(2026, 1, 1),
                                    chunk_rows=10, run_id="r", log=logged.append,
                                    log_every=every)

    logged: list[str] = []
    run = made(0.0, logged)
    run._note(["a"])
    run._note(["b", "c"])
    run._log_summary([])
    assert logged == ["a", "b\nc", "s.t: 0 partition(s), 0 complete and empty, 0 checkpoint "
                                    "write(s)"]
    logged = []
    run = made(3600.0, logged)
    run._logged_at = time.monotonic()
    run._note(["a"])
    run._note(["b"])
    assert logged == []
    run._log_summary([])
    assert logged == ["a\nb\ns.t: 0 partition(s), 0 complete and empty, 0 checkpoint write(s)"]

    logged = []
    run = made(3600.0, logged)

    def failing_plan() -> None:
        run._note(["chunk 1"])
        raise RuntimeError("MySQL went away")

    monkeypatch.setattr(run, "_plan_all", failing_plan)
    with pytest.raises(RuntimeError):
        run.run()
    assert logged == ["chunk 1"]
