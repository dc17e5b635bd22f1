"""`s3rs sync`: plan each table from the truth (work.prepare: MySQL probes, the warehouse's
load ledger, S3), then run only where there is work, through Dagster in this process (the
runs show in the UI).

Planning uses the plain connections (connections.py): Dagster is imported and its instance
opened at a table's first run (`_Instance`), so an unchanged table costs no Dagster at all
(issue 19, "small operations instant"; test_imports.py counts the modules).

Exit codes (DESIGN.md): 0 every table's data moved and its checks passed; 1 a run or a check
failed, or rows could not be moved (the finding is printed); 2 a table's configuration, or
MySQL, S3 or the warehouse could not be used before anything ran — nothing of it changed.
With several tables, 1 wins over 2."""

from __future__ import annotations

import logging
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import click

from s3rs_assets import stopping, work
from s3rs_assets.cli.common import (
    INTERRUPTED_EXIT,
    _not_yet,
    _s3_checked,
    _say,
    _store,
    _tables,
    echo,
    friendly_errors,
)
from s3rs_assets.config import TableConfig
from s3rs_assets.connections import mysql_from_env, warehouse_configured, warehouse_from_env
from s3rs_assets.errors import S3rsError
from s3rs_assets.watermark.edits import fmt as _fmt

OK, FAILED, UNUSABLE = 0, 1, 2
log = logging.getLogger("s3rs.cli")


class _Instance:
    """The Dagster instance, imported and opened by the first run that needs it (shared by
    the tables' threads): planning needs none of it."""

    def __init__(self, threads: bool) -> None:
        self._threads = threads
        self._inst: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._inst is None:
                from s3rs_assets import runner

                inst = runner.instance()
                self._inst = runner.for_threads(inst) if self._threads else inst
            return self._inst


@click.command()
@click.option("-t", "--table", "names", multiple=True, help="schema.table (repeatable)")
@click.option("--all", "all_", is_flag=True, help="Every configured table.")
@click.option("--backup-only", is_flag=True, help="Only MySQL -> S3 (materialize s3_parquet).")
@click.option("--redshift-only", is_flag=True, help="Only S3 -> Redshift (redshift_table).")
@click.option("--limit", type=click.IntRange(min=1), help="Read at most N rows per table.")
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress line (default: on when stderr is a terminal, else log lines).",
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 32),
    default=1,
    show_default=True,
    help="Tables synced at once: each its own Dagster run and watermark, sharing one Spark "
    "(each table in its own FAIR scheduler pool).",
)
@click.pass_context
@friendly_errors
def sync(
    ctx: click.Context,
    names: tuple[str, ...],
    all_: bool,
    backup_only: bool,
    redshift_only: bool,
    limit: int | None,
    progress: bool | None,
    parallel: int,
) -> None:
    """Sync tables through Dagster, running only where MySQL has rows or S3 has files to load.

    Each table is first probed in MySQL (index-only queries below the safety bound): empty
    stretches of partitions are closed in the watermark without a run, and Dagster runs
    (visible in the UI) cover only the partitions with work; a table with nothing new gets
    no run. A failed table does not stop the others, and the command exits 1 naming every
    table that failed.

    With --parallel N, N tables run side by side in threads of this process: one
    SparkSession, a Spark scheduler pool per table, every output line prefixed with its
    table (the live progress line is replaced by log lines).
    """
    if backup_only and redshift_only:
        raise click.UsageError("--backup-only and --redshift-only exclude each other")
    if redshift_only and limit is not None:
        raise click.UsageError("--limit applies to the backup stage, not --redshift-only")
    tables = _tables(names, all_)
    stages = ("backup",) if backup_only else ("load",) if redshift_only else ("backup", "load")
    from s3rs_assets import runner  # imports no Dagster: that waits for a run

    runner.check_home()
    # an unreachable S3 is one error (exit 2) before any table
    s3 = _s3_checked()
    side_by_side = parallel > 1 and len(tables) > 1
    tty = (sys.stderr.isatty() if progress is None else progress) and not side_by_side
    inst = _Instance(threads=side_by_side)
    if side_by_side:
        inst.get()  # a dagster.yaml that cannot run threads is refused before any table

    def one(table: TableConfig) -> int:
        try:
            return _sync_table(ctx, table, stages, limit, inst=inst, s3=s3, tty=tty)
        except Exception as e:  # noqa: BLE001 - one table's failure must not stop others
            echo(f"{table.name}: FAILED: {e}", err=True, fg="red")
            return FAILED

    stopping.STOP.clear()  # a process that runs commands one after another (tests, server)
    not_started: list[str] = []
    if side_by_side:
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="s3rs-sync") as pool:
            futures = [pool.submit(one, t) for t in tables]
            try:
                results = [f.result() for f in futures]
            except KeyboardInterrupt:  # only this thread hears it: the runs are asked
                stopping.STOP.set()
                pool.shutdown(wait=False, cancel_futures=True)
                echo("interrupted: the runs under way stop after the chunk or transaction "
                     "in flight", err=True, fg="red")
                not_started = [t.name for t, f in zip(tables, futures, strict=True)
                               if f.cancelled()]
                results = [INTERRUPTED_EXIT if f.cancelled() else f.result() for f in futures]
    else:
        results = []
        for t in tables:
            results.append(one(t))
            if results[-1] == INTERRUPTED_EXIT:
                not_started = [t.name for t in tables[len(results):]]
                break
    if INTERRUPTED_EXIT in results:
        if not_started:  # an interrupted table says so itself
            echo(f"interrupted; not started: {', '.join(not_started)}", err=True, fg="red")
        sys.exit(INTERRUPTED_EXIT)
    failed = [t.name for t, code in zip(tables, results, strict=True) if code != OK]
    if failed:
        echo(f"failed: {', '.join(failed)}", err=True, fg="red")
        sys.exit(FAILED if FAILED in results else UNUSABLE)


def _prepare(table: TableConfig, stages: tuple[str, ...], store: Any, s3: Any) -> Any:
    """work.prepare with a MySQL connection of this table's own (closed afterwards): the
    ledger's answer, the probes, the closing of empty stretches and the plans."""
    mysql = mysql_from_env() if "backup" in stages else None
    # --backup-only asks the ledger too when there is a warehouse (work.prepare: lost files)
    wanted = "load" in stages or warehouse_configured()
    warehouse = warehouse_from_env() if wanted else None
    return work.prepare(table, mysql, warehouse, s3, store, stages)


def _nothing_new(table: TableConfig, prepared: Any, stages: tuple[str, ...]) -> str:
    if "backup" not in stages:
        return (
            f"{table.name}: nothing to load: the warehouse's load ledger holds every extracted "
            f"file ({prepared.loaded_files:,} file version(s) in "
            f"{table.target_schema}.{table.target_table})"
        )
    return (
        f"{table.name}: nothing new below the safety bound {_fmt(prepared.bound)} "
        "(MySQL clock) and nothing waiting to be loaded: no run"
    )


def _sync_table(
    ctx: click.Context,
    table: TableConfig,
    stages: tuple[str, ...],
    limit: int | None,
    *,
    inst: _Instance,
    s3: Any,
    tty: bool,
) -> int:
    """Plan and run one table's sync, in at most two rounds (plan, runs; plan again once
    when the bound was held back); its exit code (OK, FAILED, UNUSABLE, INTERRUPTED_EXIT),
    the reason printed. Safe to run for several tables at once: it builds its own watermark
    store and MySQL connection, and prints only lines starting with the table's name."""
    store = _store(s3)
    budget, checks_failed = limit, False
    for again in (False, True):
        code, prepared = _prepared(table, stages, store, s3)
        if prepared is None:
            return code
        if not again and _report_prepared(table, prepared, stages) != OK:
            return FAILED
        if not prepared.plans:
            if not again:
                echo(_nothing_new(table, prepared, stages))
            if "backup" in stages and (prepared.held or not again):
                _report_waiting(ctx, table, prepared.bound)
            break
        code, budget, failed = _run_plans(
            ctx, table, prepared, budget, limit, inst=inst, s3=s3, tty=tty, store=store
        )
        checks_failed = checks_failed or failed
        if code != OK:
            return code
        if not prepared.held or budget == 0:
            break
        # The plan's bound was held back by another thread's transaction: partitions whose
        # rows all lay above it got no run, while the runs themselves read to a later bound.
        # Plan once more (a failed check, a finding about rows already moved, does not stop
        # it), so rows committed before this sync are read now, or said to wait.
    return FAILED if checks_failed else OK


def _report_prepared(table: TableConfig, prepared: Any, stages: tuple[str, ...]) -> int:
    """Print what planning found and did before any run (lost files, empty partitions
    closed); FAILED when lost files leave a --redshift-only sync nothing it may load."""
    for partition, keys in prepared.lost.items():
        echo(
            f"{table.name}: {len(keys)} unloaded file(s) of partition {partition} are no "
            f"longer in S3 (e.g. {keys[0]}): the partition is read again from MySQL",
            err=True,
            fg="yellow",
        )
    if prepared.closed:
        echo(
            f"{table.name}: {prepared.closed:,} empty partition(s) closed without a run "
            f"({prepared.probes} probe(s))"
        )
    if prepared.lost and "backup" not in stages:
        echo(
            f"{table.name}: FAILED: {len(prepared.lost)} partition(s) lost files that were "
            f"never loaded; run `s3rs sync -t {table.name}` (not --redshift-only) to read "
            "them again from MySQL",
            err=True,
            fg="red",
        )
        return FAILED
    return OK


def _prepared(table: TableConfig, stages: tuple[str, ...], store: Any, s3: Any) -> tuple[int, Any]:
    """`_prepare`, its failures printed: (OK, prepared) or (exit code, None)."""
    try:
        return OK, _prepare(table, stages, store, s3)
    except S3rsError as e:  # configuration, or a service it could not use: nothing ran
        echo(f"{table.name}: error before any run: {e}", err=True, fg="red")
        return UNUSABLE, None
    except Exception as e:  # noqa: BLE001 - this table fails, the others still run
        echo(f"{table.name}: FAILED before any run: {e}", err=True, fg="red")
        return FAILED, None


def _run_plans(
    ctx: click.Context,
    table: TableConfig,
    prepared: Any,
    budget: int | None,
    limit: int | None,
    *,
    inst: _Instance,
    s3: Any,
    tty: bool,
    store: Any,
) -> tuple[int, int | None, bool]:
    """Launch `prepared`'s runs in order, reading at most `budget` rows (what is left of
    --limit `limit`): (OK or the exit code of a run that failed, rows left of --limit (0
    when used up), whether a check failed)."""
    checks_failed = False
    try:
        _start_spark(table, prepared.plans)  # before Dagster's import (progress, the instance)
    except S3rsError as e:  # a missing JDBC jar: nothing ran
        echo(f"{table.name}: error before any run: {e}", err=True, fg="red")
        return UNUSABLE, budget, checks_failed
    from s3rs_assets import runner
    from s3rs_assets.progress import (
        SYNC_TAG,
        SyncMonitor,
        failure_reasons,
        interrupted,
        run_retries,
    )

    try:
        dagster = inst.get()
    except S3rsError as e:  # its configuration: nothing ran
        echo(f"{table.name}: error before any run: {e}", err=True, fg="red")
        return UNUSABLE, budget, checks_failed
    for plan in prepared.plans:
        echo(f"{table.name}: {' + '.join(plan.stages)}, partitions {plan.start} .. {plan.end}")
        before = _rows_extracted(store, table) if budget is not None else 0  # --limit only
        token = uuid.uuid4().hex
        # the record before the run: the store's answer after planning (no GET)
        monitor = SyncMonitor(
            table, plan.stages, dagster, s3, token, tty=tty, base=store.read(table.name)
        )
        monitor.start()
        try:
            result = _execute(runner, plan, dagster, budget, {SYNC_TAG: token}, quiet=True)
        except Exception as e:  # noqa: BLE001 - one table's failure must not stop others
            echo(f"{table.name}: FAILED before the run started: {e}", err=True, fg="red")
            return FAILED, budget, checks_failed
        finally:  # a Ctrl-C before Dagster holds the signal too
            monitor.stop()
        retries = run_retries(result)
        after = f" after {retries} retr{'y' if retries == 1 else 'ies'}" if retries else ""
        if not result.success:
            if interrupted(result):
                echo(
                    f"{table.name}: run {result.run_id} interrupted; "
                    f"`s3rs sync -t {table.name}` resumes from its last checkpoint",
                    err=True,
                    fg="red",
                )
                return INTERRUPTED_EXIT, budget, checks_failed
            echo(f"{table.name}: run {result.run_id} FAILED{after}", err=True, fg="red")
            for reason in failure_reasons(result):
                echo(f"  {table.name}: {reason}", err=True, fg="red")
            return FAILED, budget, checks_failed
        if _failed_checks(ctx, table, result):
            # the data moved and the finding is printed: the table's other runs still move
            # theirs (a late row in one old partition must not hold back every new one)
            checks_failed = True
        else:
            echo(f"{table.name}: run {result.run_id} succeeded{after}")
            _report_timings(ctx, table, result, monitor)
        _report_unread_rows(ctx, table, store, "backup" in plan.stages, monitor.final)
        if budget is not None and "backup" in plan.stages:
            budget -= max(0, _rows_extracted(store, table) - before)
            if budget <= 0:
                echo(f"{table.name}: --limit {limit:,} reached; the next sync resumes there")
                return OK, 0, checks_failed
    return OK, budget, checks_failed


def _start_spark(table: TableConfig, plans: list[Any]) -> None:
    """Start the local Spark JVM and its warm-up now, in a background thread, when a run
    will read rows (a backup stage): it then starts while this thread imports Dagster,
    opens the instance and creates and starts the run, and the backup step takes it
    (spark_session.start_early; once per process). A missing JDBC jar is a ConfigError
    here, before any run."""
    if not any(p.backup_keys if p.catchup else "backup" in p.stages for p in plans):
        return
    from s3rs_assets import spark_session

    spark_session.start_early(
        spark_session.config_from_env(), None, jdbc_reads=table.reader == "jdbc"
    )


def _report_timings(ctx: click.Context, table: TableConfig, result: Any, monitor: Any) -> None:
    from s3rs_assets.progress import run_timings

    timings = run_timings(result, monitor)
    if ctx.obj and ctx.obj.get("log_format") == "json":
        log.info(
            timings.line(table.name),
            extra={
                "event": "run_timings",
                "table": table.name,
                "run_id": result.run_id,
                **timings.fields(),
            },
        )
    else:
        echo(timings.line(table.name))


def _rows_extracted(store: Any, table: TableConfig) -> int:
    rec = store.read(table.name, fresh=True)
    return rec.mysql_rows_extracted if rec else 0


def _failed_checks(ctx: click.Context, table: TableConfig, result: Any) -> bool:
    """Report every failed asset check of the run; True when there was one (exit 1): a
    sync whose data does not match MySQL has not succeeded."""
    evaluations = result.get_asset_check_evaluations()
    for c in evaluations:
        if not c.passed and c.severity.value != "ERROR":  # a warning: reported, not failed
            _say(
                ctx,
                logging.WARNING,
                f"warning: {table.name}: check {c.check_name}: {c.description}",
                event="check_warning",
                table=table.name,
            )
    bad = [c for c in evaluations if not c.passed and c.severity.value == "ERROR"]
    for c in bad:
        counts = {
            k: v.value for k, v in c.metadata.items() if k in ("mysql_rows", "warehouse_rows")
        }
        detail = ", ".join(f"{k} {v}" for k, v in counts.items())
        _say(
            ctx,
            logging.ERROR,
            f"{table.name}: run {result.run_id} FAILED its check {c.check_name} ({detail}): "
            f"{c.description}",
            event="check_failed",
            table=table.name,
            run_id=result.run_id,
            error=c.description,
        )
    return bool(bad)


def _report_unread_rows(
    ctx: click.Context, table: TableConfig, store: Any, backup: bool, after: Any = None
) -> None:
    """Warn about rows no run has copied (future-dated, NULL or zero cursors, before start),
    then say which rows wait above the run's safety bound and from when they are read.
    `after`: the record the monitor read from S3 once the run had ended (else read here)."""
    # after the run: not the plan's copy
    rec = after if after is not None else store.read(table.name, fresh=True)
    counts = rec.source_counts if rec else None
    for line in counts.warnings(table.name) if counts else []:
        _say(ctx, logging.WARNING, f"warning: {line}", event="rows_not_copied", table=table.name)
    if backup and counts is not None and counts.above_bound:
        _report_waiting(ctx, table, counts.upper_bound)


def _report_waiting(ctx: click.Context, table: TableConfig, upper: datetime | None) -> None:
    """ "Not yet": the rows at or above `upper` (the bound the plan or the run read below),
    when they become readable and what holds the bound back."""
    found = _not_yet(table, upper)
    for line in found.lines() if found else []:
        if ctx.obj and ctx.obj.get("log_format") == "json":
            log.info(line, extra={"event": "not_yet", "table": table.name, "rows": found.rows})
        else:
            echo(line)  # part of the answer, beside "nothing new" (stdout)


def _execute(runner: Any, plan: Any, inst: Any, limit: int | None, tags: dict, quiet: bool):
    """runner.execute, with Dagster's own console logger silenced when `quiet` (SyncMonitor
    then re-emits the run's log messages in s3rs's format, redacted)."""
    loggers = {"console": {"config": {"log_level": "CRITICAL"}}} if quiet else None
    if plan.catchup:  # scattered partitions: one op run (catchup.py), not a range run each
        from s3rs_assets.catchup import execute_catchup

        return execute_catchup(plan, inst, limit=limit, extra_tags=tags, loggers=loggers)
    return runner.execute(plan, inst, limit=limit, extra_tags=tags, loggers=loggers)
