"""s3rs benchmarks: `python -m benchmarks.run --suite core|decimal|shape|reconcile|all`.

    make bench [ARGS="--suite shape --json out.json"]      # uses .venv-bench
    .venv-bench/bin/python -m benchmarks.run --help

Suites (one module each; the shared timing, table and JSON code is in harness.py):

* core (default): both stages on the demo-shaped 1M-row table vs the command-line floors
  (suite_core.py);
* decimal: a decimal-heavy settlement table vs the floor, dlt and a psycopg COPY, `s3rs
  sync` with a fresh Spark and the stages with Spark up, a 1,000-row increment (issue 13);
* shape: a 20-year mostly quiet table, 15 small tables, a 1,000-row increment on a big
  table; first and unchanged re-sync per table, watermark record bytes (issue 8);
* reconcile: `s3rs reconcile` vs `count(*)` and reladiff, identical and with injected
  differences (issue 10);
* fleet: definitions load for 10/500/2,000 tables, `sync -t` start-up with 10 and 2,000
  tables configured, 200 small real tables in 5 schemas with `--parallel 4` (issue 18);
* fleet_scan: a new_data and a guard sensor tick and `s3rs status` over --scan-tables
  (2,000) small tables in --scan-schemas (5) schemas (issue 18);
* small: whole commands in fresh processes: start-up of the commands that run no sync, an
  unchanged `sync -t` and a --increment-row increment attached to a Spark Connect server,
  optionally for several code trees in turns (--small-code; issue 19).

With --spark-connect the run starts one Spark Connect server and every suite's Spark
attaches to it (its `s3rs sync` processes and its in-process stages), as runs do when
`make ui` or `s3rs spark start` left one running: the Spark start-up figures are then an
attach of about a second, not a JVM start (the smoke test's way: ~15 JVM starts fewer).

Every size follows --rows, so `--rows 2000` is a smoke run. dlt and reladiff are
optional: without them (the shared .venv) their lines are skipped with a note. The
bucket, the PostgreSQL schema `s3rs_bench` and temporary files are removed at the end;
the MySQL tables are kept for the next run.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from benchmarks import (
    suite_core,
    suite_decimal,
    suite_fleet,
    suite_fleet_scan,
    suite_reconcile,
    suite_shape,
    suite_small,
)
from benchmarks.context import Ctx
from benchmarks.harness import machine_info, print_report, say, timed, uptime, write_json
from benchmarks.memory import MemSampler
from benchmarks.services import (
    bucket,
    dagster_home,
    drop_pg,
    environ,
    mysql_base,
    pg_base,
    s3_endpoint,
    spark_connect,
)
from s3rs_assets.config import TableConfig

SUITES = {
    "core": suite_core.run,
    "decimal": suite_decimal.run,
    "shape": suite_shape.run,
    "reconcile": suite_reconcile.run,
    "fleet": suite_fleet.run,
    "fleet_scan": suite_fleet_scan.run,
    "small": suite_small.run,
}
STAGES = ("backup", "load", "e2e")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--suite", default="core", help="core, decimal, shape, reconcile, fleet, "
                    "fleet_scan, small, all, or a comma-separated list (default core)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="main table size (default 1M)")
    ap.add_argument("--chunk-rows", type=int, default=TableConfig.chunk_rows,
                    help=f"s3rs chunk_rows (default s3rs's, {TableConfig.chunk_rows})")
    ap.add_argument("--parallelism", type=int, default=2, help="s3rs parallelism (sub-ranges)")
    ap.add_argument("--reader", choices=("connectorx", "jdbc"), default="connectorx")
    ap.add_argument("--json", type=Path, help="write all measurements to this file")
    ap.add_argument("--keep-pg", action="store_true", help="keep PostgreSQL schema s3rs_bench")
    ap.add_argument("--dagster-log-level", default="WARNING")
    ap.add_argument("--spark-connect", action="store_true",
                    help="one Spark Connect server (--small-master) for the whole run: every "
                    "suite's Spark attaches to it (S3RS_SPARK_MASTER), so Spark start-up "
                    "figures are an attach, not a JVM start; suite small uses it too")
    ap.add_argument("--spark-connect-url", metavar="SC_URL",
                    help="as --spark-connect, but attach to this running Spark Connect server "
                    "(sc://...) instead of starting one (the test suite's smoke run)")
    core = ap.add_argument_group("core")
    core.add_argument("--stages", default="backup,load,e2e", help="subset of backup,load,e2e")
    core.add_argument("--no-naive", action="store_true", help="skip the pymysql + pandas run")
    core.add_argument("--no-floor", action="store_true", help="skip the extract floor")
    core.add_argument("--floor-repeat", type=int, default=2)
    core.add_argument("--profile-load", action="store_true",
                      help="time each warehouse statement of the s3rs load and cProfile it")
    core.add_argument("--memory-check", action="store_true",
                      help="the backup alone, in a fresh process per table size (peak RSS)")
    core.add_argument("--memory-rows", default="200000,1000000")
    more = ap.add_argument_group("decimal, shape, reconcile")
    more.add_argument("--increment", type=int, default=1000, help="rows of the increment runs")
    more.add_argument("--small-tables", type=int, default=15)
    more.add_argument("--small-max", type=int, default=20_000, help="largest small table")
    more.add_argument("--history-years", type=float, default=20.0,
                      help="span of the long-history table (fractions allowed: 0.1)")
    more.add_argument("--history-partition", choices=("hourly", "daily", "weekly", "monthly"),
                      default="daily", help="partition size of the long-history table")
    more.add_argument("--sync-timeout", type=float, default=1200.0,
                      help="seconds before one `s3rs sync` process is killed (default 1200)")
    more.add_argument("--rc-key", choices=("id", "order_no"), default="id",
                      help="reconcile: the primary key, the BIGINT id or the 22-character "
                      "order_no (a string key: hash-prefix segments, the text row hash)")
    more.add_argument("--differences", type=int, default=100,
                      help="reconcile: differences injected (40%% deleted, 30%% edited, "
                      "20%% inserted with an old cursor, 10%% cursor moved back)")
    fleet = ap.add_argument_group("fleet")
    fleet.add_argument("--fleet-sizes", default="10,500,2000",
                       help="table counts whose definitions load is timed")
    fleet.add_argument("--fleet-tables", type=int, default=2000,
                       help="tables configured for the `sync -t` start-up (against 10)")
    fleet.add_argument("--fleet-real", type=int, default=200,
                       help="real small tables synced with --parallel (0: skip)")
    fleet.add_argument("--fleet-parallel", type=int, default=4)
    fleet.add_argument("--fleet-tries", type=int, default=2,
                       help="run worker and `sync -t` start-ups: the best of this many "
                       "(default 2; 1 for a smoke run)")
    fleet.add_argument("--no-fleet-load", dest="fleet_load", action="store_false",
                       help="skip the definitions load timings")
    scan = ap.add_argument_group("fleet_scan")
    scan.add_argument("--scan-tables", type=int, default=2000, help="tables (default 2000)")
    scan.add_argument("--scan-schemas", type=int, default=5, help="MySQL schemas (default 5)")
    scan.add_argument("--scan-drop", action="store_true", help="drop the schemas at the end")
    small = ap.add_argument_group("small")
    small.add_argument("--small-rows", type=int, default=3000,
                       help="rows of the small table (at most --rows; default 3000)")
    small.add_argument("--small-repeat", type=int, default=5, help="repeats of each command")
    small.add_argument("--small-master", default="local[2]",
                       help="master of the suite's Spark Connect server, or of the run's with "
                       "--spark-connect (default local[2])")
    small.add_argument("--small-code", default="",
                       help="code trees (comma-separated) whose commands run in turns "
                       "(default: this one)")
    small.add_argument("--small-server", action=argparse.BooleanOptionalAction, default=True,
                       help="also time through a running `s3rs server`: suite small's "
                       "unchanged sync and increment (one server per code tree), suite "
                       "decimal's whole-table sync (c) (default on)")
    small.add_argument("--small-profile", type=Path, default=None,
                       help="profile one more increment and unchanged sync into this directory")
    return check_args(ap, ap.parse_args(argv))


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    names = list(SUITES) if args.suite == "all" else [s.strip() for s in args.suite.split(",")]
    if not names or any(n not in SUITES for n in names):
        ap.error(f"--suite takes {', '.join(SUITES)} or all, got {args.suite!r}")
    args.suites = names
    if args.spark_connect_url:
        if not args.spark_connect_url.startswith("sc://"):
            ap.error(f"--spark-connect-url takes an sc:// URL, got {args.spark_connect_url!r}")
        args.spark_connect = True  # attached, to a server this run did not start
    stages = {s.strip() for s in args.stages.split(",") if s.strip()}
    if not stages or stages - set(STAGES):
        ap.error(f"--stages takes a subset of {','.join(STAGES)}, got {args.stages!r}")
    args.stage_set = stages
    try:
        args.fleet_sizes = [int(n) for n in str(args.fleet_sizes).split(",") if n.strip()]
    except ValueError:
        ap.error(f"--fleet-sizes takes comma-separated counts, got {args.fleet_sizes!r}")
    if min(args.rows, args.chunk_rows, args.parallelism, args.increment, args.fleet_tries) < 1:
        ap.error("--rows, --chunk-rows, --parallelism, --increment and --fleet-tries must be "
                 "positive")
    return args


def run_suites(args: argparse.Namespace) -> dict:
    """Every chosen suite, one after the other, in one S3 endpoint and Dagster home."""
    doc: dict = {"machine": machine_info(), "uptime_start": uptime(), "suites": {}}
    say(f"machine: {doc['machine']}")
    say(f"uptime at start: {doc['uptime_start']}")
    mysql, pg = mysql_base(), pg_base()
    with s3_endpoint() as s3info, dagster_home(), bucket() as name, shared_spark(args):
        mem = MemSampler(exclude={s3info["moto_pid"]} if s3info.get("moto_pid") else set())
        mem.start()
        ctx = Ctx(args, mysql, pg, mem, name)
        try:
            for suite in args.suites:
                with timed() as t:
                    report = SUITES[suite](ctx)
                print_report(report)
                doc["suites"][suite] = {**report.as_json(), "suite_seconds": t["s"]}
                say(f"== suite {suite}: {t['s']:.1f} s wall; {uptime()}")
        finally:
            mem.stop_event.set()
            if not args.keep_pg:
                with suppress(Exception):
                    drop_pg(pg)
    doc["uptime_end"] = uptime()
    say(f"uptime at end: {doc['uptime_end']}")
    return doc


@contextmanager
def shared_spark(args: argparse.Namespace) -> Iterator[None]:
    """With --spark-connect: the run's Spark Connect server, S3RS_SPARK_MASTER pointing at
    it (the `s3rs sync` processes inherit it; the in-process stages read it)."""
    if args.spark_connect_url:  # a server someone else runs (and stops)
        with environ(S3RS_SPARK_MASTER=args.spark_connect_url):
            yield
        return
    if not args.spark_connect:
        found = os.environ.get("S3RS_SPARK_MASTER", "")
        if not found.startswith("sc://"):
            yield
            return
        # `make bench` sources scripts/env.sh, which points S3RS_SPARK_MASTER at a Spark
        # Connect server left running (`make ui`, `s3rs spark start`): the "fresh Spark"
        # figures would silently be attaches to its warm session
        say(f"==> a Spark Connect server is running ({found.split('/;')[0]}): not used, the "
            "fresh figures start their own Spark (--spark-connect attaches to a server)")
        with environ(S3RS_SPARK_MASTER="local[2]"):
            yield
        return
    with spark_connect(args.small_master) as url, environ(S3RS_SPARK_MASTER=url):
        yield


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    args = parse_args(argv)
    if args.memory_check:
        with s3_endpoint():
            doc = suite_core.memory_check(args)
    else:
        doc = run_suites(args)
    if args.json:
        write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
