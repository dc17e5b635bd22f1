"""Suite "small" (issue 19, "small operations instant"): whole commands in fresh processes.

On a small settlement table (`dec_<n>`, n = min(--rows, --small-rows), every row dated
yesterday) with a Spark Connect server (`--small-master`, default local[2]) that the runs
attach to, each timed from outside as a user runs it, --small-repeat times:

1. start-up of the commands that run no sync: `--help`, `watermark get/list`, `status`,
   `verify --help`, `reconcile --help`, `s3clean list` (targets: instant);
2. `s3rs sync -t T` of the unchanged table (target <= 1 s);
3. a --increment-row increment stamped 30 minutes ago, then `s3rs sync -t T` (target
   <= 1.5 s with the running server); the increment rows are deleted at the end;
4. with --small-server (default), 2. and 3. again through a running `s3rs server` (one per
   code tree, started once): the `_served` figures. Each served command must show in its
   server's log (a worker line), else the suite stops: a figure never silently falls back
   to a fresh process.

`--small-code DIR[,DIR...]` runs the commands of each code tree (its `s3rs_assets` first
on PYTHONPATH) in turns, one repeat of each tree after the other: before/after figures at
the same load. Figures are the minimum and median of the repeats, with the load average.
`--small-profile DIR` then profiles one more increment and unchanged sync of the last tree
(cProfile files and `-X importtime` logs in DIR): where the time goes.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.context import Ctx
from benchmarks.harness import Report, children_cpu, say, uptime
from benchmarks.seeds import add_decimal_rows, decimal_table, increment_at
from benchmarks.services import SCHEMA, ensure_pg, environ, mysql_exec, spark_connect
from benchmarks.sync_cli import SyncEnv

#: the targets of issue 19, seconds per whole command
TARGETS = {"sync_unchanged": 1.0, "sync_increment": 1.5}
SERVED_TARGETS = {"sync_unchanged_served": 1.0, "sync_increment_served": 1.5}


def commands(name: str) -> dict[str, tuple[str, ...]]:
    """The commands timed for start-up, by key."""
    return {
        "help": ("--help",),
        "watermark_get": ("watermark", "get", "-t", name),
        "watermark_list": ("watermark", "list"),
        "status": ("status",),
        "verify_help": ("verify", "--help"),
        "reconcile_help": ("reconcile", "--help"),
        "s3clean_list": ("s3clean", "list", "-t", name),
        "sync_unchanged": ("sync", "--no-progress", "-t", name),
    }


def server(ctx: Ctx) -> AbstractContextManager[str]:
    """The run's Spark Connect server (--spark-connect), else one of this suite's own."""
    if ctx.args.spark_connect:
        return nullcontext(os.environ["S3RS_SPARK_MASTER"])
    return spark_connect(ctx.args.small_master)


def code_trees(ctx: Ctx) -> list[str]:
    """The code trees to compare (default: this one)."""
    given = [p.strip() for p in (ctx.args.small_code or "").split(",") if p.strip()]
    trees = [str(Path(p).resolve()) for p in given] or [str(Path(__file__).resolve().parents[1])]
    for tree in trees:
        if not (Path(tree) / "s3rs_assets" / "__init__.py").exists():
            raise SystemExit(f"bench: --small-code {tree} holds no s3rs_assets package")
    return trees


@contextmanager
def sync_servers(sync: SyncEnv, trees: list[str], on: bool) -> Iterator[dict[str, Path]]:
    """An `s3rs server` per code tree (its state dir by tree), stopped at the end."""
    states: dict[str, Path] = {}
    try:
        for i, tree in enumerate(trees if on else []):
            state = sync.workdir / f"s3rs-server-{i}"
            with environ(PYTHONPATH=tree, S3RS_SERVER_STATE_DIR=str(state)):
                t0 = time.perf_counter()
                sync.cli("server", "start", timeout=300)
                say(f"    s3rs server of {tree} ready in {time.perf_counter() - t0:.1f} s")
            states[tree] = state
        yield states
    finally:
        for tree, state in states.items():
            with environ(PYTHONPATH=tree, S3RS_SERVER_STATE_DIR=str(state)):
                sync.cli("server", "stop", check=False, timeout=60)


def served_count(state: Path) -> int:
    """Workers the server forked so far (its log's lines)."""
    try:
        return (state / "server.log").read_text().count("\nworker ")
    except OSError:
        return 0


def timed_cli(
    sync: SyncEnv, args: tuple[str, ...], timeout: float
) -> tuple[float, int | None, float]:
    """(wall seconds, exit code, CPU seconds) of `s3rs args` in a fresh process."""
    c0, t0 = children_cpu(), time.perf_counter()
    out = sync.cli(*args, check=False, timeout=timeout)
    seconds, cpu = time.perf_counter() - t0, children_cpu() - c0
    if out.returncode not in (0, 1):
        raise SystemExit(
            f"bench: `s3rs {' '.join(args)}` exited {out.returncode}:\n{out.output[-3000:]}"
        )
    return seconds, out.returncode, cpu


def run(ctx: Ctx) -> Report:
    rep = Report("small")
    rows = min(ctx.args.rows, ctx.args.small_rows)
    n = ctx.args.increment
    day = (datetime.now(UTC) - timedelta(days=1)).date()
    seeded = decimal_table(ctx.mysql, rows, day)
    table = seeded["table"]
    name = f"{SCHEMA}.{table}"
    rep.details["seed"] = seeded
    ensure_pg(ctx.pg)
    entry = {
        "name": name,
        "start": day.isoformat(),
        "primary_key": ["id"],
        "chunk_rows": ctx.args.chunk_rows,
        "parallelism": ctx.args.parallelism,
        "reader": ctx.args.reader,
    }
    sync = SyncEnv(ctx.mysql, ctx.pg, ctx.bucket, "small", [entry])
    trees = code_trees(ctx)
    say(f"==> small: {name} ({rows:,} rows on {day}), code {', '.join(trees)}")
    times: dict[str, dict[str, list[float]]] = {t: {} for t in trees}
    loads: list[str] = []
    timeout = ctx.args.sync_timeout
    next_id = rows + 1
    try:
        with server(ctx) as url, environ(S3RS_SPARK_MASTER=url), sync_servers(
            sync, trees, ctx.args.small_server
        ) as servers:
            first = sync.sync([name], timeout=timeout)
            rep.details["first_sync_seconds"] = first.seconds
            loads.append(uptime())
            for turn in range(ctx.args.small_repeat):
                for tree in trees:
                    with environ(PYTHONPATH=tree):
                        for key, args in commands(name).items():
                            secs, _, cpu = timed_cli(sync, args, timeout)
                            times[tree].setdefault(key, []).append(secs)
                            times[tree].setdefault(f"{key}_cpu", []).append(cpu)
                        at = increment_at()
                        add_decimal_rows(ctx.mysql, table, next_id, n, at)
                        next_id += n
                        c0 = children_cpu()
                        res = sync.sync([name], timeout=timeout)
                        times[tree].setdefault("sync_increment", []).append(res.seconds)
                        times[tree].setdefault("sync_increment_cpu", []).append(
                            children_cpu() - c0
                        )
                        times[tree].setdefault("increment_runs", []).append(res.runs_seconds)
                        if not res.runs.get(name):
                            raise SystemExit(f"bench: the increment made no run:\n{res.output}")
                    if tree in servers:
                        next_id = served_turn(ctx, sync, servers[tree], tree, table, next_id,
                                              times[tree])
                loads.append(uptime())
                say(f"    turn {turn + 1}: {loads[-1]}")
            if ctx.args.small_profile:
                with environ(PYTHONPATH=trees[-1]):
                    for what in ("increment", "unchanged"):
                        if what == "increment":
                            at = increment_at()
                            add_decimal_rows(ctx.mysql, table, next_id, n, at)
                            next_id += n
                        profile(sync, Path(ctx.args.small_profile), what, name)
    finally:
        mysql_exec(ctx.mysql, f"DELETE FROM `{table}` WHERE id > {rows}")
    report(rep, trees, times, loads, n)
    return rep


def served_turn(ctx: Ctx, sync: SyncEnv, state: Path, tree: str, table: str, next_id: int,
                times: dict[str, list[float]]) -> int:
    """One unchanged sync and one increment through the tree's `s3rs server`; the next
    free id."""
    name = f"{SCHEMA}.{table}"
    timeout = ctx.args.sync_timeout
    with environ(PYTHONPATH=tree, S3RS_SERVER_STATE_DIR=str(state), S3RS_SERVER="on"):
        before = served_count(state)
        secs, _, cpu = timed_cli(sync, ("sync", "--no-progress", "-t", name), timeout)
        times.setdefault("sync_unchanged_served", []).append(secs)
        times.setdefault("sync_unchanged_served_cpu", []).append(cpu)
        at = increment_at()
        add_decimal_rows(ctx.mysql, table, next_id, ctx.args.increment, at)
        c0 = children_cpu()
        res = sync.sync([name], timeout=timeout)
        times.setdefault("sync_increment_served", []).append(res.seconds)
        times.setdefault("sync_increment_served_cpu", []).append(children_cpu() - c0)
        times.setdefault("increment_runs_served", []).append(res.runs_seconds)
        if not res.runs.get(name):
            raise SystemExit(f"bench: the served increment made no run:\n{res.output}")
        if served_count(state) != before + 2:
            raise SystemExit(f"bench: the syncs did not run in the s3rs server ({state}):\n"
                             f"{res.output}")
    return next_id + ctx.args.increment


def profile(sync: SyncEnv, out: Path, what: str, name: str) -> None:
    """`s3rs sync -t name` under cProfile (`out/<what>.prof`); for the unchanged sync also
    its imports alone (`out/unchanged.importtime`, a second unchanged sync)."""
    out.mkdir(parents=True, exist_ok=True)
    cli = ["-m", "s3rs_assets.cli", "sync", "--no-progress", "-t", name]
    prof = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(out / f"{what}.prof"), *cli],
        env=sync.environ(),
        cwd=sync.workdir,
        capture_output=True,
        text=True,
    )
    if prof.returncode != 0:
        raise SystemExit(f"bench: profiled sync exited {prof.returncode}:\n{prof.stderr[-3000:]}")
    say(f"    profiled the {what} sync: {out / what}.prof")
    if what != "unchanged":
        return
    imports = subprocess.run(
        [sys.executable, "-X", "importtime", *cli],
        env=sync.environ(),
        cwd=sync.workdir,
        capture_output=True,
        text=True,
    )
    (out / f"{what}.importtime").write_text(imports.stderr)


def report(
    rep: Report,
    trees: list[str],
    times: dict[str, dict[str, list[float]]],
    loads: list[str],
    n: int,
) -> None:
    figures: dict[str, Any] = {}
    for i, tree in enumerate(trees):
        label = f"[{i}] " if len(trees) > 1 else ""
        figures[tree] = {}
        for key, values in times[tree].items():
            low, mid = min(values), statistics.median(values)
            figures[tree][key] = {"min": low, "median": mid, "all": values}
            rows = n if key.startswith(("sync_increment", "increment_runs")) else None
            rep.add(
                "small",
                f"{label}{key} (min of {len(values)}; median {mid:.2f} s)",
                rows,
                low,
                key=f"{key}{'_' + str(i) if i else ''}",
            )
        for key, goal in {**TARGETS, **SERVED_TARGETS}.items():
            if key not in figures[tree]:
                continue
            mid = figures[tree][key]["median"]
            rep.summary.append(
                f"{label}{key}: median {mid:.2f} s (target <= {goal} s: "
                f"{'met' if mid <= goal else 'NOT met'})"
            )
    if len(trees) > 1:
        rep.summary.extend(f"[{i}] {tree}" for i, tree in enumerate(trees))
    rep.summary.extend(f"load: {line}" for line in loads[:1] + loads[-1:])
    rep.details["figures"] = figures
    rep.details["uptime"] = loads
