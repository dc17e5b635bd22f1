"""The cold `s3rs sync` of the decimal suite's table, code trees in turns, with where each
run's time went (issue 19, item 1).

Each turn runs `s3rs sync -t` in a fresh process (so a fresh Spark, started by the command)
from one code tree (PYTHONPATH), into a fresh S3 prefix and a fresh target table, then reads
the run back from the Dagster instance: when the run was created and started, each step's
start and end, the backup's chunk messages and its metadata (Spark start-up, the asset's
own seconds). The trees alternate (A, B, A, B) so they share the same minutes; the load
average is taken before and after every turn, and the CLI process's CPU seconds beside it.

    source scripts/env.sh && bash scripts/moto.sh start
    S3RS_BENCH_SCHEMA=s3rs_me_bench PYSPARK_PYTHON=... python -m benchmarks.cold_sync \\
        --rows 300000 --rounds 2 --code base=/tmp/base --code new=.

Only the CLI's own process is timed from outside; everything else is the run's own record.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from benchmarks.harness import children_cpu, say
from benchmarks.seeds import decimal_table
from benchmarks.services import (
    REPO,
    SCHEMA,
    bucket,
    ensure_pg,
    mysql_base,
    pg_base,
    pg_connect,
    s3_client,
    s3_endpoint,
)
from benchmarks.sync_cli import SyncEnv
from s3rs_assets.names import TABLE_TAG, metadata_facts


def home_for(label: str) -> str:
    """A Dagster home per code tree, its storage created before the first turn."""
    home = tempfile.mkdtemp(prefix=f"s3rs-cold-{label}-")
    shutil.copy(REPO / "dagster.yaml", Path(home) / "dagster.yaml")
    saved = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = home
    try:
        dg.DagsterInstance.get().get_runs(limit=1)
    finally:
        if saved is not None:
            os.environ["DAGSTER_HOME"] = saved
    return home


def timeline(instance: dg.DagsterInstance, run_id: str, t0: float) -> dict[str, Any]:
    """The run's events as seconds since the CLI started: creation, start, each step's
    start/end, the chunk messages, the end; and the stages' metadata figures."""
    record = instance.get_run_record_by_id(run_id)
    out: dict[str, Any] = {
        "created": round(record.create_timestamp.timestamp() - t0, 2),
        "started": round((record.start_time or 0) - t0, 2),
        "ended": round((record.end_time or 0) - t0, 2),
        "steps": {},
        "chunks": [],
        "events": 0,
        "meta": {},
    }
    for entry in instance.all_logs(run_id):
        out["events"] += 1
        at = round(entry.timestamp - t0, 2)
        ev = entry.dagster_event
        if ev is None:
            msg = entry.user_message or ""
            if " chunk " in msg:
                out["chunks"].append((at, msg[:90]))
            continue
        kind = ev.event_type_value
        step = ev.step_key or ""
        if kind == "STEP_START":
            out["steps"].setdefault(step, {})["start"] = at
        elif kind in ("STEP_SUCCESS", "STEP_FAILURE"):
            out["steps"].setdefault(step, {})["end"] = at
        elif kind == "ASSET_MATERIALIZATION":
            meta = metadata_facts(ev.event_specific_data.materialization.metadata)
            stage = ev.event_specific_data.materialization.asset_key.path[-1]
            for k in ("run_seconds", "spark_startup_seconds", "run_read_seconds"):
                if k in meta:
                    out["meta"][f"{stage}.{k}"] = meta[k]
    return out


def one_turn(args: argparse.Namespace, label: str, code: str, home: str, n: int,
             bucket_name: str, table: str, day: str) -> dict[str, Any]:
    os.environ["PYTHONPATH"] = code
    os.environ["DAGSTER_HOME"] = home
    target = f"{table}_{label}_{n}"
    entry = {"name": f"{SCHEMA}.{table}", "start": day, "primary_key": ["id"],
             "chunk_rows": args.chunk_rows, "parallelism": 2, "reader": "connectorx",
             "target": f"{SCHEMA}.{target}"}
    prefix = f"cold-{label}-{n}"
    env = SyncEnv(mysql_base(), pg_base(), bucket_name, prefix, [entry])
    load0 = os.getloadavg()
    cpu0 = children_cpu()
    t0 = time.time()
    res = env.sync([f"{SCHEMA}.{table}"])
    cpu1 = children_cpu()
    instance = dg.DagsterInstance.get()
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={TABLE_TAG: f"{SCHEMA}.{table}"},
                              created_after=datetime.fromtimestamp(t0, UTC)))
    runs = [timeline(instance, r.dagster_run.run_id, t0) for r in reversed(records)]
    out = {
        "code": label, "turn": n, "wall_s": round(res.seconds, 2),
        "cli_cpu_s": round(cpu1 - cpu0, 2),
        "load_before": [round(x, 2) for x in load0],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
        "timings_line": [ln for ln in res.output.splitlines() if "s3rs" in ln and " s " in ln][-3:],
    }
    with pg_connect(pg_base(), SCHEMA) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{SCHEMA}"."{target}"')
    client = s3_client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket_name,
                                                                 Prefix=prefix + "/"):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket_name, Delete={"Objects": keys})
    return out


def show(turn: dict[str, Any]) -> None:
    say(f"--- {turn['code']} #{turn['turn']}: wall {turn['wall_s']} s, CLI CPU "
        f"{turn['cli_cpu_s']} s, load {turn['load_before'][0]} -> {turn['load_after'][0]}")
    for run in turn["runs"]:
        say(f"    run created {run['created']} started {run['started']} ended {run['ended']}"
            f" ({run['events']} events); meta {run['meta']}")
        for step, se in run["steps"].items():
            s, e = se.get("start", 0.0), se.get("end", 0.0)
            say(f"      {step:<60} {s:7.2f} -> {e:7.2f}  ({e - s:5.2f} s)")
        for at, msg in run["chunks"]:
            say(f"        {at:7.2f}  {msg}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--chunk-rows", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--code", action="append", required=True, help="label=path (repeatable)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    codes = [tuple(c.split("=", 1)) for c in args.code]
    day = (datetime.now(UTC) - timedelta(days=1)).date()
    seeded = decimal_table(mysql_base(), args.rows, day)
    say(f"table {SCHEMA}.{seeded['table']} ({args.rows:,} rows on {day}), seeded: "
        f"{seeded['seeded']}")
    ensure_pg(pg_base())
    homes = {label: home_for(label) for label, _ in codes}
    turns = []
    with s3_endpoint(), bucket("s3rs-cold") as name:
        for n in range(args.rounds):
            for label, code in codes:
                turn = one_turn(args, label, str(Path(code).resolve()), homes[label], n, name,
                                seeded["table"], day.isoformat())
                show(turn)
                turns.append(turn)
    if args.json:
        args.json.write_text(json.dumps(turns, indent=1, default=str))
    for home in homes.values():
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
