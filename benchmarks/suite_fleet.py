"""fleet: the code location and the CLI with many tables configured (issue 18).

* definitions load: a fresh process importing `s3rs_assets.definitions` and building its
  repository, for `--fleet-sizes` generated tables (none of them need exist in MySQL);
* run worker start-up: a run of one table planned as the sensor daemon plans it, executed
  by `dagster api execute_run` (a fresh process, as a run launcher starts one), from the
  process start to its first step, among 10 and `--fleet-tables` generated tables; the step
  itself fails (the tables do not exist), only its start is timed;
* `sync -t` start-up: one real small table configured alone among 10 and among 2,000
  (`--fleet-tables`), from the process start to its run's first step (an unchanged sync,
  after a first one not timed); both start-ups are the best of --fleet-tries (2);
* `sync --all --parallel N` on `--fleet-real` small real tables in 5 MySQL schemas, first
  and unchanged (skipped with `--fleet-real 0`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.instance.ref import InstanceRef

from benchmarks.context import Ctx
from benchmarks.harness import Report, say, uptime
from benchmarks.services import SCHEMA, ensure_pg, mysql_connect
from benchmarks.sync_cli import SyncEnv
from s3rs_assets.names import TABLE_TAG
from s3rs_assets_tests.daemon_runs import started_steps

REPO = Path(__file__).resolve().parent.parent

SCHEMAS = 5
#: the real fleet's MySQL schemas, `<FLEET_SCHEMA><i>`: under a throwaway S3RS_BENCH_SCHEMA
#: (the smoke test's) named after it, so they are dropped with it
FLEET_SCHEMA = "s3rs_fleet" if SCHEMA == "s3rs_bench" else f"{SCHEMA}_fleet"
PROBE = "fleet_probe"
LOAD_SCRIPT = (
    "import time, warnings; warnings.filterwarnings('ignore'); t = time.perf_counter(); "
    "import s3rs_assets.definitions as d; d.whole_location().get_repository_def(); "
    "print(f'{time.perf_counter() - t:.3f}')"
)
DDL = """CREATE TABLE `{schema}`.`{table}` (
  id BIGINT NOT NULL PRIMARY KEY, label VARCHAR(40) NULL, update_at DATETIME(6) NOT NULL,
  KEY idx_update_at (update_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""


def fake_entries(n: int, start: date) -> list[dict[str, Any]]:
    """`n` configured tables that need not exist (the definitions never touch MySQL)."""
    return [
        {"name": f"s3rs_fleet_none{i % SCHEMAS}.t{i:05d}", "start": start.isoformat()}
        for i in range(n)
    ]


def definitions_load(sync: SyncEnv, n: int) -> tuple[float, float]:
    """(process wall seconds, seconds inside: import + repository) for `n` tables."""
    sync.tables = fake_entries(n, date(2024, 1, 1))
    sync.__post_init__()
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT],
        env=sync.environ(),
        text=True,
        capture_output=True,
        check=True,
        cwd=sync.workdir,
    )
    return time.perf_counter() - t0, float(out.stdout.strip().splitlines()[-1])


def worker_startup(sync: SyncEnv, n: int, code_dir: Path = REPO) -> float | None:
    """Seconds from starting the run worker of a planned one-table run to its first step,
    `n` tables configured; the worker runs the code in `code_dir`."""
    sync.tables = fake_entries(n, date(2024, 1, 1))
    sync.__post_init__()
    home = sync.workdir / f"dagster_home_{n}"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    env = {**sync.environ(), "DAGSTER_HOME": str(home)}
    plan = subprocess.run(
        [sys.executable, "-m", "benchmarks.fleet_worker", str(home), str(code_dir)],
        env=env,
        text=True,
        capture_output=True,
        check=True,
        cwd=REPO,
    )
    args = plan.stdout.strip().splitlines()[-1]
    worker_env = {**env, "PYTHONPATH": str(code_dir)}
    t0 = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster", "api", "execute_run", args],
        env=worker_env,
        cwd=code_dir,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = None
    try:
        with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
            run_id = instance.get_runs(limit=1)[0].run_id
            deadline = time.monotonic() + 600
            while first is None and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
                starts = [e.timestamp for e in instance.all_logs(run_id) if started_steps([e])]
                first = min(starts, default=None)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the step would only fail and retry
        proc.wait()
    return None if first is None else first - t0


def make_table(ctx: Ctx, schema: str, table: str, rows: int, day: date) -> None:
    """`rows` rows a minute apart from 06:00 of the day before `day`: all in the past at
    any time of day (dated `day` itself, between 06:00 and 06:00 + `rows` minutes UTC the
    first sync's cursor stood past "now - 1 minute", where `sync_startup` adds its new
    rows, and the timed syncs found nothing new)."""
    seeded = day - timedelta(days=1)
    with mysql_connect(ctx.mysql) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{schema}` CHARACTER SET utf8mb4")
    # seq_1_to_N (the Sequence engine) needs a current database
    with mysql_connect(ctx.mysql, schema) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{schema}`.`{table}`")
        cur.execute(DDL.format(schema=schema, table=table))
        cur.execute(
            f"INSERT INTO `{schema}`.`{table}` SELECT s.seq, CONCAT('row ', s.seq), "
            f"TIMESTAMP'{seeded:%Y-%m-%d} 06:00:00' + INTERVAL s.seq MINUTE "
            f"FROM seq_1_to_{rows} s"
        )


def first_step_after(since: datetime, table: str) -> float | None:
    """Epoch seconds of the first STEP_START of `table`'s newest run created after `since`."""
    instance = dg.DagsterInstance.get()
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={TABLE_TAG: table}, created_after=since), limit=1
    )
    if not records:
        return None
    starts = [
        e.timestamp
        for e in instance.all_logs(records[0].dagster_run.run_id)
        if e.dagster_event and e.dagster_event.event_type_value == "STEP_START"
    ]
    return min(starts, default=None)


def sync_startup(ctx: Ctx, sync: SyncEnv, n: int, day: date) -> float | None:
    """Seconds from launching `s3rs sync -t <probe>` to its first step, `n` tables set."""
    probe = {
        "name": f"{SCHEMA}.{PROBE}",
        "start": (day - timedelta(days=2)).isoformat(),
        "lag": "0s",
        "target": f"{SCHEMA}.{PROBE}",
    }
    sync.tables = [probe, *fake_entries(n - 1, day)]
    sync.__post_init__()
    with mysql_connect(ctx.mysql, SCHEMA) as conn, conn.cursor() as cur:
        # new rows (an unchanged table launches no run): the minute before now, in MySQL's clock
        cur.execute(f"SELECT COALESCE(MAX(id), 0) FROM `{PROBE}`")
        first = int(cur.fetchone()[0]) + 1
        cur.execute(
            f"INSERT INTO `{PROBE}` SELECT {first} + s.seq, 'new', NOW(6) - INTERVAL 1 MINUTE "
            "FROM seq_1_to_10 s"
        )
    since = datetime.now(UTC)
    t0 = time.time()
    sync.cli("sync", "--no-progress", "-t", probe["name"], timeout=ctx.args.sync_timeout)
    first = first_step_after(since, probe["name"])
    return None if first is None else first - t0


def real_fleet(ctx: Ctx, sync: SyncEnv, n: int, day: date) -> list[dict[str, Any]]:
    entries = []
    for i in range(n):
        schema, table = f"{FLEET_SCHEMA}{i % SCHEMAS}", f"t{i:04d}"
        make_table(ctx, schema, table, 50 + (i * 37) % 400, day)
        entries.append(
            {
                "name": f"{schema}.{table}",
                "start": (day - timedelta(days=2)).isoformat(),
                "lag": "0s",
                "target": f"{SCHEMA}.f{i % SCHEMAS}_{table}",
            }
        )
    return entries


def run(ctx: Ctx) -> Report:
    rep = Report("fleet")
    args = ctx.args
    today = datetime.now(UTC).date()
    sync = SyncEnv(ctx.mysql, ctx.pg, ctx.bucket, "fleet", [])
    say(f"fleet: definitions load, uptime {uptime()}")
    loads: dict[int, float] = {}
    for n in args.fleet_sizes if args.fleet_load else []:
        wall, inside = definitions_load(sync, n)
        loads[n] = inside
        say(f"    {n} tables: {inside:.1f} s (process {wall:.1f} s)")
        rep.add("defs", f"definitions load, {n} tables", None, inside, key=f"defs_{n}")
    rep.details["definitions_load_s"] = loads
    workers: dict[int, float | None] = {}
    for n in (10, args.fleet_tables):
        tries = [worker_startup(sync, n) for _ in range(args.fleet_tries)]
        workers[n] = min((t for t in tries if t is not None), default=None)
        rep.details.setdefault("worker_startup_tries_s", {})[n] = tries
        say(f"    run worker (a launched run) with {n} tables: first step after {tries} s")
        # a summary line and details, not a report line (the smoke test pins the lines)
        rep.summary.append(f"run worker to the first step, {n} tables: {workers[n]} s")
    rep.details["worker_startup_s"] = workers
    ensure_pg(ctx.pg)
    make_table(ctx, SCHEMA, PROBE, 200, today)
    sync_startup(ctx, sync, 1, today)  # the first sync, not timed
    starts: dict[int, float | None] = {}
    for n in (10, args.fleet_tables):
        # the best of --fleet-tries (2): one figure under this machine's load swings by seconds
        tries = [sync_startup(ctx, sync, n, today) for _ in range(args.fleet_tries)]
        starts[n] = min((t for t in tries if t is not None), default=None)
        rep.details.setdefault("sync_startup_tries_s", {})[n] = tries
        say(f"    sync -t with {n} tables configured: first step after {tries} s")
        rep.add(
            "sync -t", f"to the first step, {n} tables set", None, starts[n], key=f"startup_{n}"
        )
    rep.details["sync_startup_s"] = starts
    if args.fleet_real:
        sync.tables = real_fleet(ctx, sync, args.fleet_real, today)
        sync.__post_init__()
        for key in ("first", "unchanged"):
            t0 = time.perf_counter()
            out = sync.cli(
                "sync",
                "--no-progress",
                "--all",
                "--parallel",
                str(args.fleet_parallel),
                timeout=args.sync_timeout,
            )
            wall = time.perf_counter() - t0
            say(
                f"    sync --all --parallel {args.fleet_parallel} ({key}): {wall:.1f} s"
                + (" -- KILLED at the timeout" if out.returncode is None else "")
            )
            rep.add(
                key,
                f"sync --all --parallel {args.fleet_parallel}, {args.fleet_real} "
                f"tables in {SCHEMAS} schemas",
                None,
                wall,
                key=f"real_{key}",
            )
    rep.summary.append(f"uptime at the end: {uptime()}")
    return rep
