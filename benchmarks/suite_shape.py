"""Suite "shape" (issue 8): cost should follow the rows, not the calendar or the table count.

Tables (MySQL schema s3rs_bench), synced with `s3rs sync` in fresh processes, so each
sync pays its own Spark start-up, reported separately (the backup asset's
`spark_startup_seconds`):

* `hist_<days>d`: --history-years (20; fractions allowed) of daily partitions, 40 rows
  on every 100th day;
* `small_01` .. `small_15` (--small-tables): 10 .. --small-max (20,000) rows, geometric,
  a composite key (region, code) and a quarter of each table's rows per timestamp;
* `big_<rows>`: the demo shape, --rows rows dated yesterday, then an --increment
  (1,000) rows stamped 20 minutes ago (deleted again at the end).

Printed: wall time of the first sync and of a second sync with nothing new, per table
(the Dagster runs of that table) and in total (the process), Spark start-up, the
increment's sync, and each table's watermark record size in bytes.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from benchmarks.context import Ctx
from benchmarks.harness import Report, render_grid, say
from benchmarks.seeds import add_demo_rows, demo_table, history_table, small_table
from benchmarks.services import SCHEMA, ensure_pg, mysql_exec
from benchmarks.sync_cli import SyncEnv, SyncResult

HISTORY_EVERY = 100
HISTORY_PER_DAY = 40


def history_days(years: float) -> int:
    return max(1, round(365 * years))


def small_sizes(n: int, largest: int, smallest: int = 10) -> list[int]:
    """`n` sizes from `smallest` to `largest`, evenly spread on a log scale."""
    if n == 1:
        return [largest]
    ratio = (largest / smallest) ** (1 / (n - 1))
    return [max(1, round(smallest * ratio**i)) for i in range(n)]


def seed_all(ctx: Ctx, today: date) -> dict[str, Any]:
    """Every table of the suite; their tables.yaml entries and row counts."""
    args = ctx.args
    days = history_days(args.history_years)
    hist = f"hist_{days}d"
    first = today - timedelta(days=days)
    rows = {hist: history_table(ctx.mysql, hist, first, days, HISTORY_EVERY, HISTORY_PER_DAY)}
    entries = [{"name": f"{SCHEMA}.{hist}", "start": first.isoformat(), "primary_key": ["id"],
                "partition": args.history_partition}]
    smalls = []
    for i, n in enumerate(small_sizes(args.small_tables, args.small_max), start=1):
        name = f"small_{i:02d}"
        small_table(ctx.mysql, name, n, today - timedelta(days=1))
        rows[name] = n
        smalls.append(name)
        entries.append({"name": f"{SCHEMA}.{name}",
                        "start": (today - timedelta(days=4)).isoformat()})
    big = f"big_{args.rows}"
    end = datetime.combine(today - timedelta(days=1), datetime.min.time()) + timedelta(hours=22)
    demo_table(ctx.mysql, big, args.rows, end)
    rows[big] = args.rows
    entries.append({"name": f"{SCHEMA}.{big}", "start": (today - timedelta(days=1)).isoformat(),
                    "primary_key": ["id"], "chunk_rows": args.chunk_rows,
                    "parallelism": args.parallelism, "reader": args.reader})
    return {"hist": hist, "smalls": smalls, "big": big, "rows": rows, "entries": entries}


def sync_figures(res: SyncResult) -> dict[str, Any]:
    return {"seconds": res.seconds, "timed_out": res.timed_out,
            "spark_startup_s": res.spark_startup, "runs": res.runs}


def record_sizes(sync: SyncEnv, names: list[str]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for n in names:
        try:
            out[n] = sync.record_bytes(f"{SCHEMA}.{n}")
        except Exception:  # never written (the sync failed or was killed)
            out[n] = None
    return out


def run_syncs(ctx: Ctx, sync: SyncEnv, t: dict[str, Any]) -> dict[str, SyncResult]:
    """First syncs, the big table's set-up sync, unchanged re-syncs, then the increment."""
    q = lambda names: [f"{SCHEMA}.{n}" for n in names]  # noqa: E731
    timeout = ctx.args.sync_timeout
    out: dict[str, SyncResult] = {}
    say(f"==> shape: first sync of {t['hist']} ({ctx.args.history_partition}, "
        f"{ctx.args.history_years} years)")
    out["hist_first"] = sync.sync(q([t["hist"]]), timeout=timeout)
    say(f"==> shape: first sync of {len(t['smalls'])} small tables (one process)")
    out["small_first"] = sync.sync(q(t["smalls"]), timeout=timeout)
    say(f"==> shape: set-up sync of {t['big']}")
    out["big_first"] = sync.sync(q([t["big"]]), timeout=timeout)
    say("==> shape: second syncs, nothing new")
    out["hist_second"] = sync.sync(q([t["hist"]]), timeout=timeout)
    out["small_second"] = sync.sync(q(t["smalls"]), timeout=timeout)
    n, rows = ctx.args.increment, ctx.args.rows
    end = (datetime.now(UTC) - timedelta(minutes=20)).replace(tzinfo=None, microsecond=0)
    say(f"==> shape: {n:,}-row increment on {t['big']}")
    add_demo_rows(ctx.mysql, t["big"], rows + 1, n, end)
    try:
        out["big_increment"] = sync.sync(q([t["big"]]), timeout=timeout)
    finally:
        mysql_exec(ctx.mysql, f"DELETE FROM `{t['big']}` WHERE id > {rows}")
    return out


def per_table_grid(t: dict[str, Any], res: dict[str, SyncResult],
                   sizes: dict[str, int | None]) -> str:
    """table, rows, first sync s, second sync s, record bytes (runs of that table)."""
    grid = []
    for name, first, second in [(t["hist"], "hist_first", "hist_second")] + [
        (s, "small_first", "small_second") for s in t["smalls"]
    ] + [(t["big"], "big_first", "big_increment")]:
        runs1 = res[first].runs.get(f"{SCHEMA}.{name}", [])
        runs2 = res[second].runs.get(f"{SCHEMA}.{name}", [])
        grid.append((name, f"{t['rows'][name]:,}",
                     f"{res[first].table_seconds(f'{SCHEMA}.{name}'):.1f} ({len(runs1)})",
                     f"{res[second].table_seconds(f'{SCHEMA}.{name}'):.1f} ({len(runs2)})",
                     "-" if sizes[name] is None else f"{sizes[name]:,}"))
    head = ("table", "rows", "first sync s (runs)", "second sync s (runs)", "record bytes")
    return render_grid(head, grid, right={1, 2, 3, 4})


def run(ctx: Ctx) -> Report:
    rep = Report("shape")
    today = datetime.now(UTC).date()
    t = seed_all(ctx, today)
    ensure_pg(ctx.pg)
    sync = SyncEnv(ctx.mysql, ctx.pg, ctx.bucket, "shape", t["entries"])
    res = run_syncs(ctx, sync, t)
    sizes = record_sizes(sync, [t["hist"], *t["smalls"], t["big"]])
    rep.details.update(tables=t["rows"], record_bytes=sizes,
                       syncs={k: sync_figures(v) for k, v in res.items()})
    add_lines(ctx, rep, t, res)
    rep.summary.append("per table: the Dagster runs of that table (second sync of the big "
                       "table = the increment)")
    rep.summary.extend(per_table_grid(t, res, sizes).splitlines())
    rep.summary.extend(targets(t, res, sizes))
    for k, v in res.items():
        if v.timed_out:
            rep.notes.append(f"{k}: killed after --sync-timeout {ctx.args.sync_timeout:.0f} s")
    return rep


def add_lines(ctx: Ctx, rep: Report, t: dict[str, Any], res: dict[str, SyncResult]) -> None:
    small_rows = sum(t["rows"][s] for s in t["smalls"])
    hist_rows = t["rows"][t["hist"]]
    n = len(t["smalls"])
    span = f"{ctx.args.history_years} years {ctx.args.history_partition}"
    for key, stage, tool, rows in (
        ("hist_first", "first", f"{t['hist']}: {span}", hist_rows),
        ("small_first", "first", f"{n} small tables, total", small_rows),
        ("big_first", "setup", f"{t['big']} first sync", ctx.args.rows),
        ("hist_second", "second", f"{t['hist']}, nothing new", hist_rows),
        ("small_second", "second", f"{n} small tables, nothing new", small_rows),
        ("big_increment", "incr", f"{t['big']} + {ctx.args.increment:,} rows",
         ctx.args.increment),
    ):
        r = res[key]
        rep.add(stage, tool + (" (KILLED)" if r.timed_out else ""), rows, r.seconds, key=key)
        rep.add(stage, f"  of which Spark start-up ({key})", None, r.spark_startup,
                key=f"{key}_spark")


def targets(t: dict[str, Any], res: dict[str, SyncResult],
            sizes: dict[str, int | None]) -> list[str]:
    """Issue 8's targets from the figures above."""
    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    h, s1, s2, inc = (res[k] for k in ("hist_first", "small_first", "small_second",
                                       "big_increment"))
    spark = max(r.spark_startup for r in res.values()) or None
    hist_after = h.seconds - h.spark_startup
    out = [
        f"long history first sync after Spark start-up: {hist_after:.1f} s (target <= 30 s: "
        f"{verdict(hist_after <= 30 and not h.timed_out)})",
        f"small tables first sync: {s1.seconds:.1f} s (target <= 60 s: "
        f"{verdict(s1.seconds <= 60)}); unchanged re-sync {s2.seconds:.1f} s incl. Spark "
        f"start-up (target <= 15 s: {verdict(s2.seconds <= 15)})",
    ]
    if spark:
        out.append(f"increment {inc.seconds:.1f} s = {inc.seconds / spark:.1f}x the largest Spark "
                   f"start-up seen ({spark:.1f} s) (target <= 2x: "
                   f"{verdict(inc.seconds <= 2 * spark)})")
    size = sizes.get(t["hist"])
    if size is not None:
        out.append(f"long history record: {size:,} bytes (target <= 16 KB: "
                   f"{verdict(size <= 16 * 1024)})")
    return out
