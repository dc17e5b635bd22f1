"""Suite "core": both stages of s3rs on the demo-shaped table against the floors.

1. the table `s3rs_bench.t` (`t_<rows>` for another --rows), every row in the daily
   partition 2025-01-02, reused when it already holds exactly that seed;
2. extract: the floor `mariadb --quick --batch > /dev/null` (best of --floor-repeat), the
   naive pymysql + pandas extractor, then s3rs's `s3_parquet` through Dagster in this
   process with the SparkSession started and timed before the run;
3. load: `mariadb | sed > TSV` + `psql \\copy` (the floor), a plain psycopg COPY of the
   backup's parquet files (the baseline), then s3rs `load_files` into an empty target;
4. end to end: backup + load against the floor; peak RSS per phase.

`memory_check` runs the backup alone in fresh processes for several table sizes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks import floor, others
from benchmarks.context import Ctx
from benchmarks.harness import MB, Report, render_grid, say
from benchmarks.seeds import demo_table
from benchmarks.services import REPO, SCHEMA, ensure_pg, pg_checkpoint
from benchmarks.stages import (
    StageEnv,
    baseline_copy,
    run_backup,
    run_load,
    start_spark,
    stop_spark,
)
from s3rs_assets.config import TableConfig

PARTITION = "2025-01-02"
SEED_END = datetime(2025, 1, 2, 22, 0, 0)  # rows in [01:00, 22:00] of the partition's day
SEED_SPAN = timedelta(hours=21)


def table_name(rows: int) -> str:
    return "t" if rows == 1_000_000 else f"t_{rows}"


def table_config(table: str, args: argparse.Namespace) -> TableConfig:
    return TableConfig.from_dict({
        "name": f"{SCHEMA}.{table}", "start": "2025-01-01", "primary_key": ["id"],
        "chunk_rows": args.chunk_rows, "parallelism": args.parallelism, "reader": args.reader,
    })


def extract_lines(ctx: Ctx, rep: Report, table: str) -> float | None:
    """The extract floor and the naive extractor; the floor's rows/s."""
    args, rows = ctx.args, ctx.args.rows
    if args.no_floor:
        return None
    say("==> extract floor: mariadb --quick --batch > /dev/null")
    fl = floor.extract_floor(ctx.mysql, table, max(1, args.floor_repeat))
    rep.details["extract_floor"] = fl
    floor_rps = rows / fl["seconds"]
    rep.add("extract", "mariadb --quick --batch > /dev/null (floor)", rows, fl["seconds"],
            floor_rps, key="extract_floor")
    if not args.no_naive:
        say("==> naive: pymysql + pandas, 5000-row chunks -> parquet")
        with ctx.mem.measure("naive"):
            nv = floor.naive_extract(ctx.mysql, table)
        rep.details["naive"] = nv
        rep.add("extract", "pymysql + pandas, 5000-row chunks -> parquet", nv["rows"],
                nv["seconds"], floor_rps, ctx.mem.peak_mb("naive", "driver"), key="naive")
    return floor_rps


def backup_lines(rep: Report, b: dict, spark_s: float, floor_rps: float | None,
                 peak: float | None) -> None:
    rows, wall = b["rows"], b["run_wall_s"]
    rep.add("backup", "s3rs s3_parquet (Dagster run, Spark already up)", rows, wall,
            floor_rps, peak, key="backup")
    rep.add("backup", "  same, minus first-chunk warm-up", rows,
            wall - b["first_chunk_warmup_s"], floor_rps, peak, key="backup_steady")
    rep.add("backup", "  same, plus SparkSession start-up", rows, wall + spark_s, floor_rps,
            peak, key="backup_with_startup")


def load_lines(ctx: Ctx, env: StageEnv, rep: Report, table: str, backup: dict,
               spark_s: float) -> None:
    """The load floor, the psycopg baseline, s3rs's load, and the end-to-end lines."""
    env_pg, rows = ctx.pg, ctx.args.rows
    ensure_pg(env_pg)
    say("==> load floor: mariadb --batch | sed > TSV, psql \\copy")
    fl = floor.e2e_floor(ctx.mysql, env_pg, table)
    rep.details["load_floor"] = fl
    say("==> load baseline: psycopg COPY of the parquet files (Arrow -> CSV)")
    pg_checkpoint(env_pg)
    with ctx.mem.measure("baseline"):
        base = baseline_copy(env_pg, ctx.mysql, backup)
    say("==> load: s3rs load_files (direct COPY + ledger) into an empty target")
    pg_checkpoint(env_pg)
    with ctx.mem.measure("load"):
        ld = run_load(env, backup, PARTITION, profile=ctx.args.profile_load)
    rep.details.update(load_baseline=base, load=ld)
    b = backup["result"]
    lfloor = rows / fl["psql_copy"]["seconds"]
    if "load" in ctx.args.stage_set:
        rep.add("load", "psql \\copy of the TSV (floor)", rows, fl["psql_copy"]["seconds"],
                lfloor, key="load_floor")
        rep.add("load", "psycopg COPY, parquet -> Arrow -> CSV (baseline)", b["rows"],
                base["seconds"], lfloor, ctx.mem.peak_mb("baseline", "driver"),
                key="load_baseline")
        how = "direct COPY + ledger" if ld.get("direct") else "COPY + merge + ledger"
        rep.add("load", f"s3rs load_files: {how}", b["rows"], ld["seconds"],
                lfloor, ctx.mem.peak_mb("load", "driver"), key="load")
    if "e2e" in ctx.args.stage_set:
        efloor = rows / fl["seconds"]
        rep.add("e2e", "mariadb --batch > TSV, psql \\copy (floor)", rows, fl["seconds"],
                efloor, key="e2e_floor")
        e2e = b["run_wall_s"] + ld["seconds"]
        rep.add("e2e", "s3rs backup + load (Spark already up)", b["rows"], e2e, efloor,
                key="e2e")
        rep.add("e2e", "  same, plus SparkSession start-up", b["rows"], e2e + spark_s, efloor,
                key="e2e_with_startup")
        others.sling_lines(ctx, rep, table, efloor)


def run(ctx: Ctx) -> Report:
    """The whole core suite; the caller provides S3, DAGSTER_HOME and the sampler."""
    args = ctx.args
    rep = Report("core")
    table = table_name(args.rows)
    say(f"==> core: table {SCHEMA}.{table} ({args.rows:,} rows)")
    rep.details["seed"] = demo_table(ctx.mysql, table, args.rows, SEED_END, SEED_SPAN)
    floor_rps = extract_lines(ctx, rep, table)
    say(f"==> backup: s3rs s3_parquet via Dagster ({args.reader}, chunk_rows "
        f"{args.chunk_rows:,}, parallelism {args.parallelism})")
    spark, session, spark_s = start_spark(ctx.mem)
    env = StageEnv(ctx.mysql, ctx.pg, ctx.bucket, spark, prefix="core",
                   log_level=args.dagster_log_level)
    try:
        backup = run_backup(env, table_config(table, args), PARTITION, ctx.mem)
        b = backup["result"]
        b["spark_start_s"] = spark_s
        rep.details["backup"] = b
        if b["rows"] != args.rows:
            rep.notes.append(f"backup wrote {b['rows']} rows, the table has {args.rows}")
        backup_lines(rep, b, spark_s, floor_rps, ctx.mem.peak_mb("backup"))
        if args.stage_set & {"load", "e2e"}:
            load_lines(ctx, env, rep, table, backup, spark_s)
    finally:
        stop_spark(spark, session)
    rep.details["memory"] = {
        k: {kk: round(vv / MB, 1) for kk, vv in v.items()} for k, v in ctx.mem.peaks.items()
    }
    rep.summary.extend(summary(rep))
    return rep


def summary(rep: Report) -> list[str]:
    """The targets and where the time went, as lines under the table."""
    out = []
    load, base, e2e = rep.line("load"), rep.line("load_baseline"), rep.line("e2e")
    if load and base and load.rows_per_s and base.rows_per_s:
        r = load.rows_per_s / base.rows_per_s
        out.append(f"load vs psycopg COPY baseline: {r:.2f}x (target >= 0.6: "
                   f"{'met' if r >= 0.6 else 'NOT met'})")
    if e2e and e2e.x_floor:
        with_start = rep.line("e2e_with_startup")
        out.append(f"end to end vs floor, Spark up: {e2e.x_floor:.2f}x; with start-up: "
                   f"{with_start.x_floor if with_start else 0:.2f}x (target >= 0.5: "
                   f"{'met' if e2e.x_floor >= 0.5 else 'NOT met'})")
    b = rep.details.get("backup")
    if b:
        out.extend(backup_summary(b))
    ld = rep.details.get("load")
    if ld and "copy_seconds" in ld:
        rest = ld["seconds"] - ld["copy_seconds"] - ld["merge_seconds"]
        into = "straight into the target" if ld.get("direct") else "to staging"
        out.append(f"load: {ld['seconds']:.1f} s = COPY {into} {ld['copy_seconds']:.1f} s "
                   f"+ merge {ld['merge_seconds']:.1f} s + ledger/DDL/commit {rest:.1f} s")
    for sql, t in (ld or {}).get("profile", {}).get("statements", []):
        out.append(f"load statement {t:7.2f} s  {sql}")
    return out


def backup_summary(b: dict[str, Any]) -> list[str]:
    chunks = b["chunks"]
    # the asset's own `seconds` is its phases summed (plan + read + checkpoint), not its
    # wall time: with the reads overlapping the driver's work the sum exceeds the run
    phases = b["plan_s"] + b["read_write_s"] + b["checkpoint_s"]
    out = [
        f"backup: Spark start-up {b['spark_start_s']:.1f} s; Dagster run {b['run_wall_s']:.1f} s; "
        f"in the asset: plan {b['plan_s']:.1f} s, Spark read+write {b['read_write_s']:.1f} "
        f"s, checkpoint {b['checkpoint_s']:.1f} s (summed {phases:.1f} s) over {len(chunks)} "
        f"chunks, {b['files']} files, {b['bytes'] / MB:.0f} MB parquet",
        f"backup: hidden behind the reads (plan + checkpoint run while the next chunk is read): "
        f"at least {max(0.0, phases - b['run_wall_s']):.1f} s (the phases' sum minus the run)",
    ]
    if chunks:
        rest = [ch["read_write_s"] for ch in chunks[1:]]
        out.append(
            f"backup: first chunk {chunks[0]['read_write_s']:.1f} s vs median "
            f"{statistics.median(rest) if rest else 0:.1f} s of the others; per chunk "
            "read+write: " + " ".join(f"{ch['read_write_s']:.1f}" for ch in chunks)
        )
    return out


def memory_check(args: argparse.Namespace) -> dict[str, Any]:
    """The backup alone in a fresh process per table size: peaks should not grow with it."""
    results = []
    for n in (int(s) for s in args.memory_rows.split(",") if s.strip()):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
            path = Path(tf.name)
        cmd = [sys.executable, "-m", "benchmarks.run", "--suite", "core", "--rows", str(n),
               "--chunk-rows", str(args.chunk_rows), "--parallelism", str(args.parallelism),
               "--reader", args.reader, "--stages", "backup", "--no-naive", "--no-floor",
               "--json", str(path)]
        say(f"==> memory check: {n:,} rows (fresh process)")
        subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        core = json.loads(path.read_text())["suites"]["core"]
        path.unlink()
        results.append({"rows": n, "peaks_mb": core["memory"].get("backup", {}),
                        "start_mb": core["memory"].get("spark_start", {}),
                        "seconds": core["backup"]["run_wall_s"]})
    head = ("rows", "total", "driver", "JVM", "workers", "total at start", "JVM at start",
            "workers at start", "run s")
    grid = [
        (f"{r['rows']:,}", *(f"{r['peaks_mb'].get(k, 0):,.0f}"
                             for k in ("total", "driver", "jvm", "workers")),
         *(f"{r['start_mb'].get(k, 0):,.0f}" for k in ("total", "jvm", "workers")),
         f"{r['seconds']:.1f}")
        for r in results
    ]
    say("")
    say("peak RSS (MB) during the backup run; 'at start' = after SparkSession start-up")
    say(render_grid(head, grid, right=set(range(len(head)))))
    return {"memory_check": results}
