"""Every operation composes (issue 16, DESIGN.md invariant 5): a hypothesis state machine
drives one small table through any sequence of changes in MySQL, syncs with every flag,
watermark edits, reconciles, damage to the target and to the record, crashes at named
points of a run, a UI re-materialization and `s3clean --force`, against the real MariaDB,
PostgreSQL, moto S3, Spark and Dagster (the `s3rs` command in-process, compose.py).

The model keeps only what a correct system cannot be asked to know by itself: the keys
whose MySQL row an incremental sync cannot see (`dirty`: deleted in MySQL, updated without
moving the cursor forward, inserted with an old cursor value, deleted by hand in the
target). After every rule the claims of the command are checked against the truth:

* `sync` (both stages, no limit) that exited 0 — or 1 only for a failed matches_mysql
  check while something is dirty — left no unloaded file, and the warehouse holds every
  MySQL row below the run's safety bound that is not dirty, exactly, and no row MySQL does
  not hold except dirty ones;
* `sync --backup-only` exited 0: each such row's exact version is in a manifest file in S3
  (or already in the warehouse); `--redshift-only` exited 0: no unloaded file is left;
* `reconcile --apply` exited 0: keys and cursors (`--columns all`: every column) equal
  MySQL below its bound; afterwards only the rows it cannot see stay dirty;
* always: the record's counters are the sums of its manifests and its load mirror is the
  part of them the warehouse's ledger holds.

At the end of every example a sync and `reconcile --apply --columns all` must leave the
warehouse equal to MySQL, and a further sync must keep it so and exit 0.

`S3RS_STATEMACHINE_EXAMPLES` (default 3) and `S3RS_STATEMACHINE_STEPS` (default 6) size the
run; each example prints its seconds and steps when `S3RS_STATEMACHINE_TIMES` is set;
`S3RS_STATEMACHINE_SHRINK=0` reports a failure as drawn, without shrinking it.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from s3rs_assets import load_stage
from s3rs_assets.backup.run import BackupRun
from s3rs_assets.load import transaction
from s3rs_assets.source import probes
from s3rs_assets.work import unloaded
from s3rs_assets_tests import compose
from s3rs_assets_tests.cli_stack import ensure_definitions
from s3rs_assets_tests.compose import Row, World, invoke, midnight

EXAMPLES = int(os.environ.get("S3RS_STATEMACHINE_EXAMPLES", "3"))
STEPS = int(os.environ.get("S3RS_STATEMACHINE_STEPS", "6"))
TIMES = bool(os.environ.get("S3RS_STATEMACHINE_TIMES"))
#: 0: report a failing example as drawn (shrinking replays it dozens of times)
SHRINK = os.environ.get("S3RS_STATEMACHINE_SHRINK", "1") != "0"
START_DAYS_AGO = 2
BOUND = re.compile(r"safety bound (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)")


class Crash(RuntimeError):
    """The injected crash (not a transient error: no retry policy reruns it)."""


#: name -> (object, attribute, calls that pass first). Points inside a stage's body: the
#: error stops the run (stage_results.dagster_step: no step retry for it). A crash in the
#: IO manager (S3RSIOManager.handle_output) is retried by Dagster's retry policy after
#: STEP_RETRY_DELAY_SECONDS (the step then succeeds): too slow for every example.
CRASHES = {
    "backup_checkpoint": (BackupRun, "_apply", 0),
    "backup_second_checkpoint": (BackupRun, "_apply", 1),
    "load_before_commit": (transaction, "_stage", 0),
    # a partition the ledger never saw is copied straight into the target (no _stage)
    "load_direct_before_commit": (transaction, "_copy_direct", 0),
    "load_after_commit": (load_stage, "PartitionLoad", 0),
}


@pytest.fixture(scope="session")
def cli_tables_file(tmp_path_factory, mysql_db):
    return compose.tables_file(tmp_path_factory.mktemp("compose_sm"), mysql_db,
                               start_days_ago=START_DAYS_AGO)


@pytest.fixture
def world(monkeypatch, mysql_db, mysql_url, pg_url, s3_client, tmp_path, cli_tables_file,
          spark) -> World:
    """The environment of the CLI for this module's table (spark: the session's shared
    SparkSession is started before the first example is timed)."""
    monkeypatch.setenv("S3RS_TABLES", str(cli_tables_file))
    monkeypatch.setenv("S3RS_S3_PREFIX", compose.PREFIX)
    monkeypatch.setenv("S3RS_MYSQL_URL", mysql_url)
    monkeypatch.setenv("S3RS_REDSHIFT_URL", pg_url)
    for var in ("S3RS_LOG_FORMAT", "S3RS_SSH_HOST", "S3RS_SOURCE_TIMEZONE"):
        monkeypatch.delenv(var, raising=False)
    # sub-ranges of a few rows read by their key span too (`probes.with_key_spans`), so both
    # ways of reading take part in every example
    monkeypatch.setattr(probes, "MIN_SPAN_ROWS", 1)
    ensure_definitions(cli_tables_file)
    return World(mysql_db, pg_url, s3_client, monkeypatch, tmp_path)


def initial_rows(n: int, stamps: int) -> dict[int, Row]:
    """`n` rows over the complete days, `stamps` distinct instants per day (ties at every
    chunk boundary with chunks of 4), ids interleaved against time."""
    out: dict[int, Row] = {}
    for i in range(1, n + 1):
        d = midnight(START_DAYS_AGO - (i % 2))
        out[i * 3] = (d + timedelta(hours=(i * 7) % stamps), Decimal(f"{i}.5000"), f"r{i}")
    return out


class Composition(RuleBasedStateMachine):
    """One example: a table, its sequence of operations, the checks after each."""

    world: World  # set by the test before the machine runs
    monkeypatch: pytest.MonkeyPatch

    def __init__(self) -> None:
        super().__init__()
        self.dirty: set[int] = set()
        self.ever_dirty: set[int] = set()
        self.next_id = 1000
        self.t0 = time.monotonic()
        self.steps: list[str] = []

    # ------------------------------------------------------------------ helpers

    @property
    def w(self) -> World:
        return self.world

    def run(self, *args: str):
        self.steps.append(" ".join(args))
        return invoke(*args, "-t", self.w.name) if args[0] == "sync" else invoke(*args)

    def sync(self, *flags: str):
        before = self.w.mysql_now()
        r = invoke("sync", "-t", self.w.name, "--no-progress", *flags)
        self.steps.append("sync " + " ".join(flags))
        return r, self.bound_of(r.output, before)

    def bound_of(self, output: str, before: datetime) -> datetime:
        """The safety bound the command used: the earliest it printed (a run logs its own;
        'nothing new' names it), else the time before it started (no row was read)."""
        found = [datetime.fromisoformat(m) for m in BOUND.findall(output)]
        return min(found) if found else before

    def mark_dirty(self, ids: set[int]) -> None:
        self.dirty |= ids
        self.ever_dirty |= ids

    def mysql_visible(self, bound: datetime) -> dict[int, Row]:
        return {i: r for i, r in self.w.mysql_rows().items() if r[0] < bound}

    def assert_warehouse_has_visible(self, bound: datetime) -> None:
        mysql, wh = self.w.mysql_rows(), self.w.warehouse_rows()
        for i, row in mysql.items():
            if i not in self.dirty and row[0] < bound:
                assert wh.get(i) == row, (i, row, wh.get(i))
        extra = set(wh) - set(mysql) - self.dirty
        assert not extra, f"rows MySQL does not hold: {sorted(extra)}"

    def assert_nothing_unloaded(self) -> None:
        """Every manifest file is in the ledger, and the record's load mirror says so."""
        rec, ledger = self.w.record(), self.w.ledger()
        left = unloaded(rec, ledger)
        assert not left, f"files left unloaded: {left}"
        if rec is not None:
            mirror = {k: set(s.files) for k, s in rec.loaded_partitions.items()}
            held = {k: {f.key for f in p.files} for k, p in rec.partitions.items() if p.files}
            assert mirror == held, "the record's load mirror is not the ledger's"

    # ------------------------------------------------------------------ set-up

    @initialize(n=st.integers(8, 20), stamps=st.integers(1, 4))
    def start(self, n: int, stamps: int) -> None:
        self.w.fresh(initial_rows(n, stamps))
        self.t0 = time.monotonic()

    # ------------------------------------------------------------------ MySQL

    @rule(k=st.integers(1, 5), data=st.data())
    def insert(self, k: int, data) -> None:
        """New rows at MySQL's clock, sharing one instant (ties), ids out of time order."""
        now = self.w.mysql_now()
        ids = data.draw(st.lists(st.integers(self.next_id, self.next_id + 50), min_size=k,
                                 max_size=k, unique=True))
        self.next_id += 51
        self.w.put({i: (now, Decimal("1.2500"), f"new {i}") for i in ids})
        self.steps.append(f"insert {ids} at {now}")

    @rule(offset=st.integers(0, 3600 * 24 * START_DAYS_AGO))
    def insert_late(self, offset: int) -> None:
        """A row whose cursor value is old (a late commit, a clock set back): only
        reconcile finds it."""
        i = self.next_id
        self.next_id += 1
        ts = midnight(START_DAYS_AGO) + timedelta(seconds=offset)
        self.w.put({i: (ts, Decimal("2.0000"), "late")})
        self.mark_dirty({i})
        self.steps.append(f"insert_late {i} at {ts}")

    @rule(data=st.data(), how=st.sampled_from(["later", "same", "earlier"]))
    def update(self, data, how: str) -> None:
        rows = self.w.mysql_rows()
        if not rows:
            return
        i = data.draw(st.sampled_from(sorted(rows)))
        ts, amount, note = rows[i]
        if how == "later":
            self.w.put({i: (self.w.mysql_now(), amount + 1, f"{note}+")})
            self.dirty.discard(i)  # the newest version: every merge keeps it
        elif how == "same":
            self.w.put({i: (ts, amount + 1, f"{note}=")})
            self.mark_dirty({i})
        else:
            self.w.put({i: (ts - timedelta(hours=1, microseconds=7), amount, f"{note}-")})
            self.mark_dirty({i})
        self.steps.append(f"update {how} {i}")

    @rule(data=st.data())
    def delete(self, data) -> None:
        rows = self.w.mysql_rows()
        if not rows:
            return
        ids = data.draw(st.lists(st.sampled_from(sorted(rows)), min_size=1, max_size=4,
                                 unique=True))
        self.w.delete(ids)
        self.mark_dirty(set(ids))
        self.steps.append(f"delete {ids}")

    # ------------------------------------------------------------------ syncs

    @rule()
    def sync_both(self) -> None:
        r, bound = self.sync()
        self.check_sync(r, bound)

    def check_sync(self, r, bound: datetime) -> None:
        if r.exit_code == 1 and "FAILED its check matches_mysql" in r.output:
            # the warehouse differs: allowed only where the model knows it may
            assert self.dirty, r.output
        else:
            assert r.exit_code == 0, r.output
        self.assert_nothing_unloaded()
        self.assert_warehouse_has_visible(bound)

    @rule()
    def sync_backup_only(self) -> None:
        r, bound = self.sync("--backup-only")
        assert r.exit_code == 0, r.output
        rec = self.w.record()
        there = self.w.objects()
        keys = [f.key for p in rec.partitions.values() for f in p.files
                if there.get(f.key) == f.md5]
        versions = self.w.file_rows(keys)
        wh = self.w.warehouse_rows()
        for i, row in self.mysql_visible(bound).items():
            if i not in self.dirty:
                assert (i, row) in versions or wh.get(i) == row, (i, row)

    @rule()
    def sync_redshift_only(self) -> None:
        r, _ = self.sync("--redshift-only")
        if r.exit_code == 1 and "FAILED its check matches_mysql" in r.output:
            return  # the check compares with MySQL: anything not yet extracted differs
        if r.exit_code == 1 and "lost files that were never loaded" in r.output:
            return  # `s3clean --force` took the only copy: only a backup can read it again
        assert r.exit_code == 0, r.output
        self.assert_nothing_unloaded()

    @rule(n=st.integers(1, 9))
    def sync_limit(self, n: int) -> None:
        r, _ = self.sync("--limit", str(n))
        if r.exit_code == 1 and "FAILED its check matches_mysql" in r.output:
            return  # a partial backup leaves rows for the next sync: the check says so
        assert r.exit_code == 0, r.output

    @rule(crash=st.sampled_from(sorted(CRASHES)))
    def sync_crashes(self, crash: str) -> None:
        target, attr, after = CRASHES[crash]
        with compose.crash_at(self.monkeypatch, target, attr, Crash, after) as calls:
            r, bound = self.sync()
        self.steps[-1] += f" (crash at {crash}, {calls[0]} call(s))"
        if r.exit_code == 0:  # not reached, or Dagster's retry policy ran the step again
            self.check_sync(r, bound)
        else:
            assert r.exit_code == 1, r.output
            assert calls[0] <= after or "injected crash" in r.output, r.output

    @rule(which=st.integers(0, 10))
    def rematerialize_partition(self, which: int) -> None:
        """As the UI's Materialize of one complete partition (both assets) does."""
        import dagster as dg

        from s3rs_assets.definitions import sync_job

        rec = self.w.record()
        done = sorted(k for k, p in (rec.partitions.items() if rec else []) if p.status ==
                      "complete")
        if not done:
            return
        key = done[which % len(done)]
        self.steps.append(f"rematerialize {key}")
        with dg.DagsterInstance.get() as instance:
            result = sync_job(self.w.name).execute_in_process(
                partition_key=key, instance=instance, raise_on_error=False)
        assert result.success, [e.message for e in result.all_events if e.is_failure]

    # ------------------------------------------------------------------ watermark edits

    @rule(offset=st.integers(0, 3600 * 24 * (START_DAYS_AGO + 1)))
    def watermark_set(self, offset: int) -> None:
        ts = min(midnight(START_DAYS_AGO) + timedelta(seconds=offset),
                 self.w.mysql_now() - timedelta(seconds=1))
        ts = ts.replace(microsecond=0)
        r = self.run("watermark", "set", "-t", self.w.name, "--timestamp",
                     f"{ts:%Y-%m-%d %H:%M:%S}", "--yes")
        assert r.exit_code == 0, r.output
        # the operator said "start from ts": rows before it never extracted are skipped
        # (the files holding extracted ones are kept); only reconcile brings the rest
        self.mark_dirty({i for i, row in self.w.mysql_rows().items() if row[0] < ts})

    @rule(side=st.sampled_from(["", "--mysql-only", "--redshift-only"]))
    def watermark_reset(self, side: str) -> None:
        r = self.run("watermark", "reset", "-t", self.w.name, "--yes", *([side] if side else []))
        assert r.exit_code == 0, r.output

    @rule(copy=st.booleans(), data=st.data())
    def lose_record(self, copy: bool, data) -> None:
        if copy:
            keys = self.w.copy_keys()
            if not keys:
                return
            key = data.draw(st.sampled_from(sorted(keys)))
        else:
            key = self.w.primary_key()
        self.w.s3.delete_object(Bucket=self.w.bucket, Key=key)
        self.steps.append(f"lose {key}")

    # ------------------------------------------------------------------ reconcile

    @rule(apply=st.booleans(), columns=st.sampled_from(["key", "all"]))
    def reconcile(self, apply: bool, columns: str) -> None:
        import json

        rec = self.w.record()
        r = self.run("reconcile", "-t", self.w.name, "--columns", columns, "--json",
                     *(["--apply"] if apply else []))
        if rec is None or not self.w.target_exists():
            assert r.exit_code in (0, 1, 2), r.output  # never synced: a clear refusal
            return
        assert r.exit_code in (0, 1), r.output
        doc = json.loads(r.stdout)
        if not apply:
            assert (r.exit_code == 0) == (doc["total_differences"] == 0), r.output
            return
        assert r.exit_code == 0, r.output
        bound = datetime.fromisoformat(doc["safety_bound"])
        mysql = {i: row for i, row in self.w.mysql_rows().items() if row[0] < bound}
        wh = {i: row for i, row in self.w.warehouse_rows().items() if row[0] < bound}
        if columns == "all":
            assert wh == mysql
            self.dirty = {i for i in self.dirty if i in mysql and mysql[i][0] >= bound}
        else:
            assert {i: r[0] for i, r in wh.items()} == {i: r[0] for i, r in mysql.items()}
            # a row changed without moving its cursor is invisible to the key hash
            self.dirty = {i for i in self.dirty if i in mysql and wh.get(i) != mysql[i]}

    # ------------------------------------------------------------------ the target

    @rule(how=st.sampled_from(["truncate", "drop", "drop_recreate"]))
    def damage_target(self, how: str) -> None:
        if not self.w.target_exists():
            return
        if how == "truncate":
            self.w.target_sql("TRUNCATE {t}")
        elif how == "drop":
            self.w.drop_target()
        else:
            copy = f'"{self.w.db}"."{self.w.table}_copy"'
            self.w.target_sql(f"CREATE TABLE {copy} (LIKE {{t}} INCLUDING ALL)")
            self.w.drop_target()  # re-created empty, as a rebuild or a restore does
            self.w.target_sql(f'ALTER TABLE {copy} RENAME TO "{self.w.table}"')
        # a reload brings back every version S3 holds: what reconcile settled may differ
        self.dirty |= self.ever_dirty
        self.steps.append(f"target {how}")

    @rule(data=st.data())
    def delete_target_row(self, data) -> None:
        wh = self.w.warehouse_rows()
        if not wh:
            return
        i = data.draw(st.sampled_from(sorted(wh)))
        self.w.target_sql(f"DELETE FROM {{t}} WHERE id = {int(i)}")
        self.mark_dirty({i})
        self.steps.append(f"delete target row {i}")

    # Hypothesis enables a random subset of the rules per example (swarm testing), and one
    # with little else enabled repeated `s3clean --force` for most of its steps (about a
    # third of all steps in a 44-example run): a second one in a row changes nothing.
    @precondition(lambda self: not (self.steps and self.steps[-1].startswith("s3clean")))
    @rule()
    def s3clean_force(self) -> None:
        r = self.run("s3clean", "clean", "-t", self.w.name, "--force")
        if not self.w.target_exists() and r.exit_code == 2:
            return
        assert r.exit_code == 0, r.output

    # ------------------------------------------------------------------ always

    @invariant()
    def counters_are_the_truth(self) -> None:
        if not self.w.bucket:
            return
        rec = self.w.record()
        if rec is None:
            return
        files = [f for p in rec.partitions.values() for f in p.files]
        assert rec.mysql_rows_extracted == sum(f.rows for f in files)
        assert rec.s3_file_count == len(files)
        for key, load in rec.loaded_partitions.items():
            manifest = {f.key: f.rows for f in rec.partitions[key].files}
            assert set(load.files) <= set(manifest), key
            assert load.rows == sum(manifest[k] for k in load.files), key
        assert rec.redshift_rows_loaded == sum(s.rows for s in rec.loaded_partitions.values())

    def teardown(self) -> None:
        if not self.w.bucket:
            return
        try:
            r, bound = self.sync()
            assert r.exit_code in (0, 1), r.output
            self.assert_nothing_unloaded()
            if not self.w.target_exists():
                # nothing was ever loaded: MySQL holds no row a sync must copy (rows skipped
                # by `watermark set` or dated below it late are reconcile's, which needs a
                # target to repair)
                must = set(self.mysql_visible(bound)) - self.dirty
                assert not must, r.output
                return
            r = invoke("reconcile", "-t", self.w.name, "--apply", "--columns", "all", "--json")
            assert r.exit_code == 0, r.output
            import json

            bound = datetime.fromisoformat(json.loads(r.stdout)["safety_bound"])
            mysql = self.mysql_visible(bound)
            assert {i: x for i, x in self.w.warehouse_rows().items() if x[0] < bound} == mysql
            self.dirty.clear()
            r, bound = self.sync()
            assert r.exit_code == 0, r.output
            self.assert_warehouse_has_visible(bound)
        except BaseException:
            print(f"FAILED example {self.w.examples}, steps: {self.steps}")
            raise
        finally:
            if TIMES:
                print(f"example {self.w.examples}: {time.monotonic() - self.t0:.1f}s, "
                      f"{len(self.steps)} steps: {self.steps}")
            self.w.bucket = ""


def test_every_operation_composes(world, monkeypatch):
    Composition.world = world
    Composition.monkeypatch = monkeypatch
    planned = {"sub-ranges": 0, "by key span": 0}
    with_key_spans = probes.with_key_spans

    def counted(conn, src, plan):
        out = with_key_spans(conn, src, plan)
        planned["sub-ranges"] += len(out.ranges)
        planned["by key span"] += sum(r.span is not None for r in out.ranges)
        return out

    monkeypatch.setattr(probes, "with_key_spans", counted)
    t0 = time.monotonic()
    phases = list(Phase) if SHRINK else [Phase.explicit, Phase.reuse, Phase.generate]
    run_state_machine_as_test(Composition, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
        suppress_health_check=list(HealthCheck), database=None, phases=phases,
    ))
    if TIMES:
        print(f"{world.examples} examples in {time.monotonic() - t0:.0f}s "
              f"({(time.monotonic() - t0) / max(world.examples, 1):.1f}s per example); "
              f"sub-ranges read: {planned}")


@pytest.mark.slow
@pytest.mark.parametrize("when", ["first_file", "first_ledger_entry"])
def test_a_sync_killed_with_sigkill_composes(world, when):
    """`s3rs sync` as its own process, killed with SIGKILL (no handler runs, no session
    copy is written) once the first parquet file is in S3, or once the first load committed;
    an in-process sync afterwards loads every row exactly once and leaves nothing unloaded,
    and the record's counters are the sums of its manifests."""
    import signal
    import sys
    from pathlib import Path

    from s3rs_assets_tests.conftest import REPO
    from s3rs_assets_tests.processes import managed_process

    world.fresh(initial_rows(20, 3))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = world.tmp / f"killed-{when}.log"
    killed = False
    with managed_process([str(Path(sys.executable).parent / "s3rs"), "sync", "-t", world.name,
                          "--no-progress"], env, log, REPO) as proc:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            reached = (bool(world.objects()) if when == "first_file" else
                       world.target_exists() and bool(world.ledger()))
            if reached:
                os.killpg(proc.pid, signal.SIGKILL)  # the group this test started
                killed = True
                break
            time.sleep(0.05)
        proc.wait(timeout=30)
    assert killed, compose_log(log)
    r = invoke("sync", "-t", world.name, "--no-progress")
    assert r.exit_code == 0, r.output
    rows = world.mysql_rows()
    assert world.warehouse_rows() == rows and len(rows) == 20
    rec = world.record()
    assert not unloaded(rec, world.ledger())
    files = [f for p in rec.partitions.values() for f in p.files]
    assert rec.mysql_rows_extracted == sum(f.rows for f in files)
    assert rec.redshift_rows_loaded == rec.mysql_rows_extracted
    again = invoke("sync", "-t", world.name, "--no-progress")
    assert again.exit_code == 0 and "nothing new" in again.output, again.output


def compose_log(path) -> str:
    from s3rs_assets_tests.processes import tail

    return tail(path)


# ------------------------------------------------------------- examples it found (shrunk)


def replay(world, monkeypatch, steps) -> None:
    """Run one example's steps (rule name, kwargs) on a fresh machine, then its teardown."""
    Composition.world = world
    Composition.monkeypatch = monkeypatch
    m = Composition()
    try:
        for name, kw in steps:
            getattr(m, name)(**kw)
            m.counters_are_the_truth()
    finally:
        m.teardown()


class Draw:
    """A stand-in for hypothesis' `data` that returns fixed values in order."""

    def __init__(self, *values):
        self.values = list(values)

    def draw(self, _strategy):
        return self.values.pop(0)


def test_example_a_crash_after_a_load_committed(world, monkeypatch):
    """Found by the SIGKILL test and replayed in-process: a run that stops after its first
    partition's load committed, before the record says so; the next sync finds nothing to
    load there (the ledger holds it), so the planner must rewrite the record's load mirror
    from the ledger (work.mirror_ledger) or its counters stay short."""
    replay(world, monkeypatch, [
        ("start", {"n": 12, "stamps": 2}),
        ("sync_crashes", {"crash": "load_after_commit"}),
        ("sync_both", {}),
    ])


def test_example_a_failed_check_does_not_hold_back_the_next_run(world, monkeypatch):
    """Found by the state machine (example 33 of a 300-example run): after `watermark set`
    and a late row below it, the sync's first run (the load of the old partition) fails
    `matches_mysql` — truly, the late row is only reconcile's — and the sync used to stop
    there, leaving the next partition's extracted files unloaded and its backup partial.
    A failed check is a finding about the rows already moved: the sync runs its other
    runs and exits 1 at the end."""
    replay(world, monkeypatch, [
        ("start", {"n": 8, "stamps": 1}),
        ("sync_crashes", {"crash": "backup_second_checkpoint"}),
        ("watermark_set", {"offset": 61757}),
        ("insert_late", {"offset": 10457}),
        ("sync_crashes", {"crash": "backup_second_checkpoint"}),
        ("sync_both", {}),
    ])


def test_example_backup_only_after_s3clean_force_reads_the_lost_files_again(world, monkeypatch):
    """Found by the state machine (example 48 of a run on main): `s3clean --force` deletes
    files no load has taken yet (their rows' only copy); `sync --backup-only` asks no
    warehouse, so it used to say "nothing new … no run" and exit 0 with the rows in
    neither S3 nor the warehouse. It now finds the record's unloaded files gone (by its
    load mirror) and reads their partitions again."""
    replay(world, monkeypatch, [
        ("start", {"n": 8, "stamps": 4}),
        ("sync_backup_only", {}),
        ("s3clean_force", {}),
        ("sync_backup_only", {}),
    ])


@contextlib.contextmanager
def held_until_planned(world, monkeypatch, wait: float):
    """Another connection's open write transaction holds the safety bound back; it commits
    between the sync's first plan and its runs (through a wrapper of the real `_prepare`).
    Yields the list of each plan's `held`."""
    import s3rs_assets.cli.sync as cli_sync

    writer = world.mysql()  # autocommit, but BEGIN opens a transaction until COMMIT
    try:
        with writer.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(
                f"INSERT INTO `{world.table}` (id, update_at, amount, note) "
                "VALUES (5000, NOW(6), 1, 'held')"
            )
        time.sleep(wait)
        real, held = cli_sync._prepare, []

        def prepare_then_commit(*args, **kwargs):
            prepared = real(*args, **kwargs)
            held.append(prepared.held)
            if len(held) == 1:
                writer.commit()  # the transaction ends between the plan and its runs
            return prepared

        monkeypatch.setattr(cli_sync, "_prepare", prepare_then_commit)
        yield held
    finally:
        writer.close()


def test_example_a_plan_held_back_by_another_transaction_is_made_again(world, monkeypatch):
    """Found by the state machine (example 67 of a run on main, with a benchmark writing to
    the same server): another thread's open transaction held the sync's plan back, so
    today's partition, whose new rows all lay above that bound, got no run; the transaction
    ended before the run for the older partitions started, which read to a later bound and
    printed none. The sync exited 0 with rows committed before it started neither copied
    nor said to wait. A plan made under a held-back bound is now made once more after its
    runs."""
    Composition.world = world
    Composition.monkeypatch = monkeypatch
    m = Composition()
    m.start(n=9, stamps=4)
    try:
        with held_until_planned(world, monkeypatch, wait=0.2) as held:
            m.insert(k=3, data=Draw([1001, 1002, 1003]))
            m.sync_both()
        assert held == [True, False], held
        assert {1001, 1002, 1003, 5000} <= set(world.warehouse_rows())
    finally:
        m.teardown()


def test_example_a_held_plan_whose_run_fails_its_check_is_made_again(world, monkeypatch):
    """Found by the state machine (example 278 of a 12-step run): the plan was held back by
    another connection's statement and was load-only (files of a sync that crashed before
    its COPY committed); its `matches_mysql` failed, truly (a late row below the cursor is
    reconcile's), and the sync skipped the second plan, so rows committed before it started
    were neither read nor said to wait. The second plan runs whenever the runs themselves
    ran; the exit stays 1 for the failed check."""
    Composition.world = world
    Composition.monkeypatch = monkeypatch
    m = Composition()
    m.start(n=12, stamps=3)
    m.insert(k=2, data=Draw([1001, 1002]))
    m.sync_crashes(crash="load_direct_before_commit")
    m.insert_late(offset=3600 * 20)  # a row below an extracted partition's cursor
    try:
        # the held bound falls before the new rows
        with held_until_planned(world, monkeypatch, wait=1.1) as held:
            m.insert(k=3, data=Draw([2001, 2002, 2003]))
            r, _ = m.sync()
        assert held == [True, False], (held, r.output)
        assert r.exit_code == 1 and "FAILED its check matches_mysql" in r.output, r.output
        assert "check reconciled" not in r.output, r.output  # a load-only run: its check only
        assert {1001, 1002, 2001, 2002, 2003, 5000} <= set(world.warehouse_rows()), r.output
        m.assert_nothing_unloaded()
    finally:
        m.teardown()


def test_example_backup_only_after_s3clean_force_and_a_recreated_target(world, monkeypatch):
    """Found by the state machine (example 49 of a run on main, stop 27): every file was
    loaded, `s3clean --force` deleted them, then the target was dropped and re-created
    empty; `sync --backup-only` decided from the record's load mirror (every file loaded)
    that nothing was lost, and exited 0 with the rows in neither S3 nor the warehouse."""
    replay(world, monkeypatch, [
        ("start", {"n": 11, "stamps": 4}),
        ("sync_both", {}),
        ("s3clean_force", {}),
        ("damage_target", {"how": "drop_recreate"}),
        ("sync_backup_only", {}),
    ])
