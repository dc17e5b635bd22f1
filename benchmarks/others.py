"""The other tools, timed on the same tables: dlt (connectorx -> PostgreSQL), Sling (its Go
binary from the `sling-linux-amd64` wheel) and reladiff.

All are optional (the `bench` extra, installed only into .venv-bench): `missing()` says
why a tool cannot run, and the suites then skip its line with that note.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from typing import Any

from benchmarks.context import Ctx
from benchmarks.harness import Report, say
from benchmarks.services import SCHEMA, pg_checkpoint, pg_count, url_text
from s3rs_assets.config import DatabaseURL


def missing(module: str) -> str | None:
    """None when `module` imports here, else the skip note."""
    if importlib.util.find_spec(module) is None:
        return (f"{module} is not installed in this environment ({os.sys.executable}): "
                "run `bash benchmarks/venv.sh` and use .venv-bench (make bench does)")
    return None


SLING_PACKAGE = "sling_linux_amd64"


def sling_binary() -> str | None:
    """The Sling executable the `sling-linux-amd64` wheel carries, or None."""
    spec = importlib.util.find_spec(SLING_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "bin", "sling-linux-amd64")
    return path if os.access(path, os.X_OK) else None


def run_sling(mysql: DatabaseURL, pg: DatabaseURL, table: str, mode: str) -> dict[str, Any]:
    """Sling 1.4 MySQL -> PostgreSQL into `sling_<mode>.<table>`, in `mode` "incremental"
    (keyed on id / update_at) or "full-refresh"; wall time of the whole command (a fresh
    target each time). Offline: telemetry off, connections as URLs in the environment."""
    binary = sling_binary()
    if binary is None:
        raise RuntimeError(missing(SLING_PACKAGE) or "sling binary not found")
    schema = f"sling_{mode.replace('-', '_')}"
    env = {
        **os.environ,
        "SLING_DISABLE_TELEMETRY": "true",
        "SLING_HOME_DIR": tempfile.mkdtemp(prefix="s3rs-bench-sling-"),
        "BENCH_MYSQL": url_text(mysql, "mysql", SCHEMA),
        "BENCH_PG": url_text(pg, "postgresql", SCHEMA) + "?sslmode=disable",
    }
    args = [binary, "run", "--src-conn", "BENCH_MYSQL", "--src-stream", f"{SCHEMA}.{table}",
            "--tgt-conn", "BENCH_PG", "--tgt-object", f"{schema}.{table}", "--mode", mode]
    if mode == "incremental":
        args += ["--primary-key", "id", "--update-key", "update_at"]
    import psycopg

    with psycopg.connect(url_text(pg, "postgresql", SCHEMA), autocommit=True) as c:
        c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    try:
        t0 = time.perf_counter()
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=3600)
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(env["SLING_HOME_DIR"], ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"sling {mode} exited {done.returncode}: {done.stderr[-400:]}")
    return {"seconds": wall, "mode": mode, "rows_in_target": pg_count(pg, table, schema)}


def run_dlt(mysql: DatabaseURL, pg: DatabaseURL, table: str) -> dict[str, Any]:
    """dlt's sql_table source with the connectorx backend into PostgreSQL (dataset
    `dlt_<table>`, replace), its own pipeline directory; wall time of `pipeline.run`."""
    import dlt  # optional: only in .venv-bench (the `bench` extra)
    from dlt.sources.sql_database import sql_table

    os.environ.setdefault("RUNTIME__DLTHUB_TELEMETRY", "false")
    workdir = tempfile.mkdtemp(prefix="s3rs-bench-dlt-")
    try:
        source = sql_table(
            credentials=url_text(mysql, "mysql+pymysql", SCHEMA),
            table=table,
            backend="connectorx",
            backend_kwargs={"conn": url_text(mysql, "mysql", SCHEMA)},
            reflection_level="full_with_precision",
        )
        pipeline = dlt.pipeline(
            pipeline_name=f"bench_{table}",
            destination=dlt.destinations.postgres(credentials=url_text(pg, "postgresql", SCHEMA)),
            dataset_name=f"dlt_{table}",
            pipelines_dir=workdir,
        )
        t0 = time.perf_counter()
        pipeline.run(source, write_disposition="replace")
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"seconds": wall, "rows_in_target": pg_count(pg, table, f"dlt_{table}")}


def run_reladiff(mysql: DatabaseURL, pg: DatabaseURL, table: str, key: str, cursor: str,
                 columns: tuple[str, ...] = (), pg_schema: str = "") -> dict[str, Any]:
    """reladiff between `s3rs_bench.<table>` in MySQL and in PostgreSQL, keyed on `key`
    (bisection with checksums in both databases); counts per kind, like s3rs reconcile."""
    import reladiff  # optional: only in .venv-bench (the `bench` extra)

    # shared=False: reladiff otherwise reuses one cached MySQL connection whose REPEATABLE
    # READ snapshot predates the changes the suite makes between two diffs
    dbs = [reladiff.connect(url_text(mysql, "mysql", SCHEMA), thread_count=2, shared=False),
           reladiff.connect(url_text(pg, "postgresql", SCHEMA), thread_count=2, shared=False)]
    try:
        mine = reladiff.connect_to_table(dbs[0], table, key, update_column=cursor,
                                         extra_columns=columns)
        theirs = reladiff.connect_to_table(dbs[1], (pg_schema or SCHEMA, table), key,
                                           update_column=cursor, extra_columns=columns)
        t0 = time.perf_counter()
        diff = list(reladiff.diff_tables(mine, theirs, threaded=True, max_threadpool_size=2))
        wall = time.perf_counter() - t0
    finally:
        for db in dbs:
            db.close()
    sides: dict[Any, set[str]] = {}
    for sign, row in diff:
        sides.setdefault(row[0], set()).add(sign)
    kinds = Counter(
        "differs" if len(s) == 2 else "missing" if s == {"-"} else "extra" for s in sides.values()
    )
    return {"seconds": wall, "counts": dict(kinds), "total": sum(kinds.values())}


def sling_lines(ctx: Ctx, rep: Report, table: str, efloor: float) -> None:
    """Sling, a peer a user would pick instead, in both its modes (issue 19)."""
    why = missing(SLING_PACKAGE)
    if why:
        rep.notes.append(f"sling skipped: {why}")
        return
    for mode in ("incremental", "full-refresh"):
        say(f"==> sling {mode}: MySQL -> PostgreSQL")
        pg_checkpoint(ctx.pg)
        r = run_sling(ctx.mysql, ctx.pg, table, mode)
        rep.details[f"sling_{mode}"] = r
        rep.add("e2e", f"Sling 1.4 ({mode})", r["rows_in_target"], r["seconds"], efloor,
                key=f"sling_{mode}")
