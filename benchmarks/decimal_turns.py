"""The decimal suite's "(b) Spark started first" stages alone, for code trees in turns, with
a CPU profile of every process taking part (issue 19's "big table near the floor").

    S3RS_BENCH_SCHEMA=... python -m benchmarks.decimal_turns --code /tmp/a,/tmp/b --turns 2

Each turn runs, per code tree, a fresh process (the tree first on PYTHONPATH) that starts
Spark (excluded), then times the backup (`s3_parquet` through Dagster) and the load
(`load_files`) of the `dec_<rows>` table, exactly as `suite_decimal.warm_stages` does.
Meanwhile a sampler reads /proc every `--sample` seconds and splits the CPU seconds between
the driver (this Python process), the JVM, the Python workers, mariadbd and moto; its
timeline shows idle gaps (both cores busy or not). The load average is printed beside each
figure: on a shared machine compare trees within one run, turn by turn.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HZ = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[1]), (int(rest[11]) + int(rest[12])) / HZ


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class Sampler:
    """CPU seconds per group (driver, jvm, workers, mariadbd, moto, other) every `every` s."""

    def __init__(self, every: float, moto_pid: int | None) -> None:
        self.every, self.moto_pid, self.me = every, moto_pid, os.getpid()
        self.samples: list[tuple[float, dict[str, float]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def group(self, pid: int, parents: dict[int, int]) -> str | None:
        if pid == self.me:
            return "driver"
        if pid == self.moto_pid:
            return "moto"
        if _comm(pid) == "mariadbd":
            return "mariadbd"
        p = pid
        while p > 1 and p in parents:
            p = parents[p]
            if p == self.me:
                return "jvm" if _comm(pid) == "java" else "workers"
        return None

    def read(self) -> dict[str, float]:
        procs = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                st = _stat(int(d))
                if st:
                    procs[int(d)] = st
        parents = {pid: st[0] for pid, st in procs.items()}
        out: dict[str, float] = {}
        for pid, (_pp, cpu) in procs.items():
            g = self.group(pid, parents)
            if g:
                out[g] = out.get(g, 0.0) + cpu
        # every process: the machine's whole CPU
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
        total = sum(int(x) for x in fields) / HZ
        idle = (int(fields[3]) + int(fields[4])) / HZ
        out["machine_busy"] = total - idle
        return out

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.perf_counter(), self.read()))
            self.stop.wait(self.every)

    def start(self) -> None:
        self.thread.start()

    def end(self) -> None:
        self.stop.set()
        self.thread.join()

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds per group between the samples nearest t0 and t1 (processes that
        ended between them are missed: the JVM and workers live through the run)."""
        a = min(self.samples, key=lambda s: abs(s[0] - t0))[1]
        b = min(self.samples, key=lambda s: abs(s[0] - t1))[1]
        return {k: round(b.get(k, 0.0) - a.get(k, 0.0), 2) for k in sorted(set(a) | set(b))}

    def timeline(self, t0: float, t1: float) -> list[dict[str, float]]:
        """Cores busy per group in each interval between t0 and t1."""
        rows = [s for s in self.samples if t0 - self.every <= s[0] <= t1 + self.every]
        out = []
        for (ta, a), (tb, b) in zip(rows, rows[1:], strict=False):
            dt = tb - ta
            out.append({"t": round(ta - t0, 2),
                        **{k: round((b.get(k, 0) - a.get(k, 0)) / dt, 2) for k in b}})
        return out


def all_processes() -> dict[int, tuple[str, float]]:
    """Every process: (command name, CPU seconds)."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                out[int(d)] = (_comm(int(d)), st[1])
    return out


def busiest_others(a: dict[int, tuple[str, float]], b: dict[int, tuple[str, float]],
                   ours: set[int], n: int = 4) -> list[tuple[int, str, float]]:
    """The processes outside this run that used the most CPU between snapshots a and b."""
    got = [(pid, name, round(cpu - a.get(pid, (name, 0.0))[1], 2))
           for pid, (name, cpu) in b.items() if pid not in ours]
    return sorted(got, key=lambda x: -x[2])[:n]


def our_pids(me: int) -> set[int]:
    """This process, its descendants and mariadbd."""
    parents = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = _stat(int(d))
            if st:
                parents[int(d)] = st[0]
    out = {me}
    for pid in parents:
        p = pid
        while p > 1 and p in parents:
            if p == me:
                out.add(pid)
                break
            p = parents[p]
        if _comm(pid) == "mariadbd":
            out.add(pid)
    return out


def jvm_threads(me: int) -> dict[str, float]:
    """CPU seconds per thread name (digits dropped) of this process's JVM child."""
    out: dict[str, float] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or _comm(int(d)) != "java":
            continue
        st = _stat(int(d))
        if not st or st[0] != me:
            continue
        for t in os.listdir(f"/proc/{d}/task"):
            try:
                name = Path(f"/proc/{d}/task/{t}/comm").read_text().strip()
            except OSError:
                continue
            ts = _stat_path(Path(f"/proc/{d}/task/{t}/stat"))
            if ts is not None:
                key = "".join(ch for ch in name if not ch.isdigit()).strip(" #-")
                out[key] = out.get(key, 0.0) + ts
    return out


def _stat_path(p: Path) -> float | None:
    try:
        text = p.read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / HZ


def jvm_flags(me: int) -> list[str]:
    """The -XX/-Xshare options on the command line of this process's JVM."""
    for d in os.listdir("/proc"):
        if d.isdigit() and _comm(int(d)) == "java":
            st = _stat(int(d))
            if st and st[0] == me:
                try:
                    argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                return [a.decode() for a in argv if a.startswith((b"-XX", b"-Xshare"))]
    return []


def child(args: argparse.Namespace) -> None:
    """One tree's stages in this fresh process; prints one JSON line."""
    warnings.filterwarnings("ignore")
    import benchmarks.stages as stages
    from benchmarks.services import SCHEMA, dagster_home, mysql_base, pg_base, pg_checkpoint
    from benchmarks.stages import StageEnv, run_backup, run_load, stop_spark, wait_warm_up
    from benchmarks.suite_decimal import table_entry
    from s3rs_assets.config import TableConfig

    mysql, pg = mysql_base(), pg_base()
    day = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
    table = f"dec_{args.rows}"
    sampler = Sampler(args.sample, int(os.environ["BENCH_MOTO_PID"] or 0) or None)
    out: dict[str, Any] = {"code": os.environ.get("BENCH_CODE", "")}
    made = stages.spark_resource
    if "jdbc_reads" in getattr(type(made()), "model_fields", {}):  # trees with jvm_options.py

        def for_reader(made=made):
            res = made()
            return type(res)(spark_config=res.spark_config, jdbc_reads=args.reader == "jdbc")

        stages.spark_resource = made = for_reader
    if args.java_opts:  # e.g. -XX:TieredStopAtLevel=1: JVM flags to try before resources.py

        def with_opts(made=made):
            res = made()
            conf = dict(res.spark_config)
            key = "spark.driver.extraJavaOptions"
            conf[key] = f"{conf.get(key, '')} {args.java_opts}".strip()
            keep = {"jdbc_reads": res.jdbc_reads} if hasattr(res, "jdbc_reads") else {}
            return type(res)(spark_config=conf, **keep)

        stages.spark_resource = with_opts
    with dagster_home():
        # start_spark waits for the warm-up; without --warm its work overlaps the backup,
        # as in a fresh `s3rs sync` (and in the decimal suite before this stop)
        t = time.perf_counter()
        spark = stages.spark_resource()
        session = spark.session()
        out["spark_start_s"] = time.perf_counter() - t
        out["warm_wait_s"] = wait_warm_up() if args.warm else None
        # CPU seconds so far: the JVM's start-up (and, with --warm, its first job)
        out["ready_cpu"] = {k: round(v, 2) for k, v in sampler.read().items()}
        out["jvm_cmdline_opts"] = jvm_flags(os.getpid())
        sampler.start()
        threads0 = jvm_threads(os.getpid())
        procs0 = all_processes()
        tag = os.urandom(3).hex()
        env = StageEnv(mysql, pg, args.bucket, spark, prefix=f"turn-{tag}")
        ctx = argparse.Namespace(args=args)
        cfg = TableConfig.from_dict(table_entry(ctx, table, day, f"{SCHEMA}.{table}_{tag}"))
        mem = None
        if args.memory:  # peak RSS of driver, JVM and Python workers during the backup
            from benchmarks.memory import MemSampler

            mem = MemSampler()
            mem.start()
        t0 = time.perf_counter()
        try:
            if args.cprofile:
                from benchmarks.driver_profile import driver_profile
                with driver_profile(dump=args.cprofile) as prof:
                    backup = run_backup(env, cfg, day)
                Path(args.cprofile).write_text(
                    "\n".join(f"== {k}\n{v}" for k, v in prof.items()))
            else:
                backup = run_backup(env, cfg, day, mem)
        finally:
            t1 = time.perf_counter()
            threads1 = jvm_threads(os.getpid())
            others = busiest_others(procs0, all_processes(), our_pids(os.getpid()))
        pg_checkpoint(pg)
        t2 = time.perf_counter()
        if args.profile_load:  # where the load's driver CPU goes (pstats file, per tree)
            import cProfile

            with cProfile.Profile() as load_prof:
                ld = run_load(env, backup, day)
            load_prof.dump_stats(f"{args.profile_load}.{Path(out['code'] or '.').name}.pstats")
        else:
            ld = run_load(env, backup, day)
        t3 = time.perf_counter()
        time.sleep(args.sample * 1.5)
        sampler.end()
        if mem is not None:
            mem.stop_event.set()
            out["backup_peak_rss_mb"] = {k: round(v / 2**20) for k, v in
                                         mem.peaks.get("backup", {}).items()}
        stop_spark(spark, session)
        from benchmarks.services import pg_connect
        with pg_connect(pg, SCHEMA) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{SCHEMA}"."{table}_{tag}"')
    b = backup["result"]
    out.update(
        backup_s=b["run_wall_s"], asset_s=b["asset_s"], plan_s=b["plan_s"],
        read_write_s=b["read_write_s"], checkpoint_s=b["checkpoint_s"], rows=b["rows"],
        files=b["files"], chunk_read_s=[c["read_write_s"] for c in b["chunks"]],
        load_s=ld["seconds"], copy_s=ld.get("copy_seconds"), rows_loaded=ld["rows_in_target"],
        cpu_backup=sampler.between(t0, t1), cpu_load=sampler.between(t2, t3),
        timeline=sampler.timeline(t0, t1) if args.timeline else [],
        load_avg=os.getloadavg(),
        others=others,
        jvm_threads={k: round(v - threads0.get(k, 0.0), 2) for k, v in sorted(
            threads1.items(), key=lambda kv: threads0.get(kv[0], 0.0) - kv[1])
            if v - threads0.get(k, 0.0) >= 0.05},
    )
    print("RESULT " + json.dumps(out, default=str), flush=True)


def parent(args: argparse.Namespace) -> None:
    from benchmarks.harness import say, uptime
    from benchmarks.seeds import decimal_table
    from benchmarks.services import bucket, ensure_pg, mysql_base, pg_base, s3_endpoint

    mysql = mysql_base()
    day = (datetime.now(UTC) - timedelta(days=1)).date()
    seeded = decimal_table(mysql, args.rows, day)
    say(f"table dec_{args.rows}: {seeded}")
    ensure_pg(pg_base())
    # "DIR" or "DIR|JVM options" (the same tree with and without a JVM flag, in turns)
    trees = args.code.split(",") if args.code else [str(Path(__file__).resolve().parents[1])]
    results: list[dict[str, Any]] = []
    with s3_endpoint() as info, bucket() as name:
        for turn in range(args.turns):
            for entry in trees:
                tree, _, opts = entry.partition("|")
                tree = str(Path(tree).resolve())
                opts = opts or args.java_opts
                env = dict(os.environ, PYTHONPATH=tree, BENCH_CODE=tree,
                           BENCH_MOTO_PID=str(info.get("moto_pid")
                                              or os.environ.get("BENCH_MOTO_PID", "")))
                cmd = [sys.executable, "-m", "benchmarks.decimal_turns", "--child",
                       "--bucket", name, "--rows", str(args.rows),
                       "--chunk-rows", str(args.chunk_rows),
                       "--parallelism", str(args.parallelism), "--reader", args.reader,
                       "--sample", str(args.sample)]
                cmd += ["--timeline"] if args.timeline else []
                cmd += ["--warm"] if args.warm else []
                cmd += ["--memory"] if args.memory else []
                if args.cprofile:  # one file per tree and turn
                    cmd += [f"--cprofile={args.cprofile}.{turn}.{Path(tree).name}"]
                cmd += [f"--java-opts={opts}"] if opts else []
                cmd += [f"--profile-load={args.profile_load}"] if args.profile_load else []
                before = uptime()
                p = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
                line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")),
                            None)
                if p.returncode or line is None:
                    say(p.stdout[-3000:] + p.stderr[-5000:])
                    raise SystemExit(f"turn {turn} {tree}: failed")
                r = json.loads(line[7:])
                r["turn"], r["uptime_before"] = turn, before
                results.append(r)
                la = " ".join(f"{x:.2f}" for x in r["load_avg"])
                cb = r["cpu_backup"]
                r["entry"] = entry
                rc = r.get("ready_cpu", {})
                say(f"turn {turn} {entry}: spark start {r['spark_start_s']:.2f} s + warm-up "
                    f"wait {r['warm_wait_s']} (CPU so far: jvm {rc.get('jvm', 0):.1f}, workers "
                    f"{rc.get('workers', 0):.1f}; uptime before: {before}); JVM flags "
                    f"{r.get('jvm_cmdline_opts')}; chunks {r['chunk_read_s']}")
                say(f"turn {turn} {entry}: backup {r['backup_s']:.2f} s (plan "
                    f"{r['plan_s']:.2f}, read+write {r['read_write_s']:.2f}, ckpt "
                    f"{r['checkpoint_s']:.2f}) + load {r['load_s']:.2f} s = "
                    f"{r['backup_s'] + r['load_s']:.2f} s; backup CPU: "
                    + ", ".join(f"{k} {v:.1f}" for k, v in cb.items())
                    + f"; load avg {la}")
                say(f"    busiest other processes: {r['others']}")
                if r.get("backup_peak_rss_mb"):
                    say(f"    backup peak RSS (MB): {r['backup_peak_rss_mb']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    say(f"uptime at end: {uptime()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code", default="", help="code trees, comma-separated (default: this)")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--rows", type=int, default=1_000_000)
    from s3rs_assets.config import TableConfig

    ap.add_argument("--chunk-rows", type=int, default=TableConfig.chunk_rows)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--reader", default="connectorx")
    ap.add_argument("--sample", type=float, default=0.5, help="CPU sampling interval (s)")
    ap.add_argument("--timeline", action="store_true", help="keep the per-sample timeline")
    ap.add_argument("--json", default="")
    ap.add_argument("--java-opts", default="",
                    help="added to spark.driver.extraJavaOptions of every run (per tree: "
                    "--code 'DIR|OPTS')")
    ap.add_argument("--warm", action="store_true",
                    help="wait for Spark's background warm-up job before the backup")
    ap.add_argument("--profile-load", default="",
                    help="cProfile the load into PATH.<tree>.pstats")
    ap.add_argument("--cprofile", default="",
                    help="write the driver's profile and request counts (driver_profile.py) "
                    "of each turn's backup to PATH.<turn>.<tree>")
    ap.add_argument("--memory", action="store_true",
                    help="sample the backup's peak RSS per part (benchmarks/memory.py)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bucket", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    (child if args.child else parent)(args)


if __name__ == "__main__":
    main()
