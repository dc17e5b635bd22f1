"""Suite "fleet_scan" (issue 18, items 3 and 4): a look over thousands of tables.

--scan-tables (2,000) small tables (3 rows each, dated yesterday) over --scan-schemas (5)
MySQL schemas `<bench schema>_fs<i>`; 90% have a watermark at their last row, 5% are
empty, 5% have rows and no watermark (never synced). Timed, each with the MySQL queries
and S3 requests it made:

* a `s3rs_new_data` tick, cold (this process has read no record yet) and warm (the
  records are known by their ETag);
* a `s3rs_watermark_guard` tick, cold and warm (primaries this process validated are
  known by their ETag);
* `s3rs status --json`, as a command in a fresh process (interpreter start included):
  cold (an empty record cache, S3RS_CACHE_DIR), warm (the cache of the cold run), and
  warm after one record changed.

The schemas are kept for the next run unless --scan-drop (the smoke test drops them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from typing import Any

import botocore.client
import pymysql.cursors

from benchmarks.context import Ctx
from benchmarks.harness import Report, children_cpu, say, timed, uptime
from benchmarks.services import SCHEMA, mysql_connect, url_text

PREFIX = "fleetscan"
ROWS = 3


def schemas(n: int) -> list[str]:
    return [f"{SCHEMA}_fs{i}" for i in range(n)]


def seed(ctx: Ctx, today: date) -> list[dict[str, Any]]:
    """The tables (created once, reused by the next run), as tables.yaml entries."""
    n, names = ctx.args.scan_tables, schemas(ctx.args.scan_schemas)
    day = datetime.combine(today - timedelta(days=1), datetime.min.time())
    entries = []
    with mysql_connect(ctx.mysql) as conn, conn.cursor() as cur:
        for s in names:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{s}`")
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            f"WHERE TABLE_SCHEMA IN ({', '.join(['%s'] * len(names))})",
            names,
        )
        have = set(cur.fetchall())
        for i in range(n):
            schema, table = names[i % len(names)], f"t{i:05d}"
            kind = "empty" if i % 20 == 7 else ("never" if i % 20 == 13 else "synced")
            if (schema, table) not in have:
                cur.execute(
                    f"CREATE TABLE `{schema}`.`{table}` (id INT PRIMARY KEY, "
                    "update_at DATETIME(6) NOT NULL, note VARCHAR(20), KEY (update_at))"
                )
                if kind != "empty":
                    cur.executemany(
                        f"INSERT INTO `{schema}`.`{table}` VALUES (%s, %s, 'x')",
                        [(r, day + timedelta(hours=r)) for r in range(1, ROWS + 1)],
                    )
            entries.append(
                {
                    "name": f"{schema}.{table}",
                    "start": (today - timedelta(days=1)).isoformat(),
                    "lag": "0s",
                    "kind": kind,
                    "last": day + timedelta(hours=ROWS),
                }
            )
    return entries


def write_records(store: Any, cfgs: list[Any], entries: list[dict[str, Any]]) -> None:
    """A watermark at the last row of yesterday's partition (partial, loaded) for the synced."""
    from s3rs_assets.partitions import partitions_def, window
    from s3rs_assets.watermark import FileEntry, PartitionState, Position
    from s3rs_assets.watermark.record import LoadState

    def one(pair: tuple[Any, dict[str, Any]]) -> None:
        cfg, e = pair
        key = e["start"]
        lo, hi = window(partitions_def(cfg), key)

        def change(rec: Any) -> None:
            f = FileEntry(
                key=f"{PREFIX}/data/{cfg.name}/{key}/0.parquet",
                rows=ROWS,
                bytes=100,
                md5="0" * 32,
                cursor_max=e["last"],
            )
            rec.partitions[key] = PartitionState(
                status="partial",
                window_start=lo,
                window_end=hi,
                files=[f],
                run_id="bench",
                cursor=Position(c=e["last"], pk=[ROWS]),
            )
            rec.loaded_partitions[key] = LoadState(files=[f.key], rows=ROWS)
            rec.mysql_status = rec.redshift_status = "success"

        store.update(cfg.name, change)

    todo = [(c, e) for c, e in zip(cfgs, entries, strict=True) if e["kind"] == "synced"]
    with ThreadPoolExecutor(max_workers=10) as pool:
        list(pool.map(one, todo))


@contextmanager
def counting() -> Iterator[dict[str, Any]]:
    """MySQL statements and S3 requests of this process while inside."""
    out: dict[str, Any] = {"sql": 0, "s3": Counter()}
    execute = pymysql.cursors.Cursor.execute
    api_call = botocore.client.BaseClient._make_api_call

    def counted_execute(cur: Any, query: str, args: Any = None) -> Any:
        out["sql"] += 1
        return execute(cur, query, args)

    def counted_call(client: Any, operation: str, params: Any) -> Any:
        out["s3"][operation] += 1
        return api_call(client, operation, params)

    pymysql.cursors.Cursor.execute = counted_execute  # type: ignore[method-assign]
    botocore.client.BaseClient._make_api_call = counted_call  # type: ignore[method-assign]
    try:
        yield out
    finally:
        pymysql.cursors.Cursor.execute = execute  # type: ignore[method-assign]
        botocore.client.BaseClient._make_api_call = api_call  # type: ignore[method-assign]


def measure(report: Report, key: str, what: str, n: int, fn: Callable[[], Any]) -> Any:
    """Wall and CPU seconds of this process (the machine is shared: CPU time says what the
    tick itself costs when the load average is high), MySQL statements, S3 requests."""
    cpu = time.process_time()
    with counting() as calls, timed() as t:
        result = fn()
    cpu = time.process_time() - cpu
    s3 = dict(calls["s3"])
    say(f"  {what}: {t['s']:.2f} s ({cpu:.2f} s CPU), {calls['sql']} MySQL statements, S3 {s3}")
    report.add("scan", what, n, t["s"], key=key)
    report.details.setdefault("calls", {})[key] = {
        "mysql": calls["sql"],
        "s3": s3,
        "cpu_s": round(cpu, 3),
    }
    return result


def run(ctx: Ctx) -> Any:
    """Seed, write records, then time the ticks and the status command."""
    import dagster as dg

    from s3rs_assets.config import TableConfig
    from s3rs_assets.io_manager import store_for
    from s3rs_assets.names import NEW_DATA, WATERMARK_GUARD
    from s3rs_assets.resources import MySQLResource, S3Resource
    from s3rs_assets.sensors import build_sensors

    report = Report("fleet_scan")
    n = ctx.args.scan_tables
    say(f"fleet_scan: {n} tables in {ctx.args.scan_schemas} schemas; uptime {uptime()}")
    with timed() as t:
        entries = seed(ctx, date.today())
    say(f"  tables ready in {t['s']:.1f} s")
    cfgs = [TableConfig.from_dict({k: e[k] for k in ("name", "start", "lag")}) for e in entries]
    s3 = S3Resource(bucket=ctx.bucket, prefix=PREFIX)
    mysql_url = url_text(ctx.mysql, "mysql", schemas(ctx.args.scan_schemas)[0])
    with timed() as t:
        write_records(store_for(s3), cfgs, entries)
    say(f"  watermarks written in {t['s']:.1f} s")
    sensors = {s.name: s for s in build_sensors(cfgs)}
    res = {"mysql": MySQLResource(url=mysql_url), "s3": s3}
    with dg.instance_for_test() as instance:

        def tick(name: str) -> Any:
            """The sensor's own function, as the daemon calls it; run requests are not
            resolved against an asset graph (the 2,000 tables' assets are not built)."""
            with dg.build_sensor_context(instance=instance, resources=res) as context:
                return sensors[name](context)

        cold = measure(report, "new_data_cold", "new_data tick, cold", n, lambda: tick(NEW_DATA))
        warm = measure(report, "new_data_warm", "new_data tick, warm", n, lambda: tick(NEW_DATA))
        measure(report, "guard_cold", "guard tick, cold", n, lambda: tick(WATERMARK_GUARD))
        guard = measure(report, "guard", "guard tick, warm", n, lambda: tick(WATERMARK_GUARD))
    for what, result in (("new_data", warm), ("guard", guard), ("new_data cold", cold)):
        requests = getattr(result, "run_requests", None) or []
        text = getattr(result, "skip_message", None) or getattr(result, "skip_reason", None)
        say(f"  {what}: {len(requests)} run request(s); {str(text or '')[:200]}")
        report.details.setdefault("run_requests", {})[what] = len(requests)
    tables_yaml = os.path.join(os.environ["DAGSTER_HOME"], "fleet_scan_tables.yaml")
    with open(tables_yaml, "w") as f:
        json.dump({"tables": [{k: e[k] for k in ("name", "start", "lag")} for e in entries]}, f)
    env = dict(
        os.environ,
        S3RS_TABLES=tables_yaml,
        S3RS_S3_BUCKET=ctx.bucket,
        S3RS_S3_PREFIX=PREFIX,
        S3RS_MYSQL_URL=mysql_url,
    )
    env["S3RS_CACHE_DIR"] = os.path.join(os.environ["DAGSTER_HOME"], "fleet_scan_cache")
    store = store_for(s3)
    changed = next(c for c, e in zip(cfgs, entries, strict=True) if e["kind"] == "synced")
    for key, what in (
        ("status", "cold"),
        ("status_warm", "warm"),
        ("status_one_changed", "warm, one record changed"),
    ):
        if key == "status_one_changed":
            store.update(changed.name, lambda rec: setattr(rec, "last_error", "bench"))
        cpu0 = children_cpu()
        with timed() as t:
            proc = subprocess.run(
                [sys.executable, "-m", "s3rs_assets.cli", "status", "--json"],
                env=env,
                capture_output=True,
                text=True,
            )
        cpu = children_cpu() - cpu0
        report.add("scan", f"s3rs status --json (fresh process), {what}", n, t["s"], key=key)
        report.details.setdefault("calls", {})[key] = {"cpu_s": round(cpu, 3)}
        doc = json.loads(proc.stdout)
        states = Counter(tb["state"] for tb in doc["tables"])
        say(
            f"  s3rs status, {what}: {t['s']:.2f} s ({cpu:.2f} s CPU), exit {proc.returncode}, "
            f"{dict(states)}; uptime {uptime()}"
        )
        report.details.setdefault("status_states", {})[what] = dict(states)
    report.details["uptime_end"] = uptime()
    report.summary.append(
        f"{n} tables, {ctx.args.scan_schemas} schemas; uptime at end: "
        f"{report.details['uptime_end']}"
    )
    if ctx.args.scan_drop:
        with mysql_connect(ctx.mysql) as conn, conn.cursor() as cur:
            for s in schemas(ctx.args.scan_schemas):
                cur.execute(f"DROP DATABASE IF EXISTS `{s}`")
    return report
