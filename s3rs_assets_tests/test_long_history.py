"""Long histories (issue 18 item 7): a 20-year daily table whose rows lie on days years
apart is caught up in one run (the `s3rs_catchup` op job), not one run per data day, and
ends exactly equal to MySQL with a small record.

Real MariaDB, moto S3, PostgreSQL, Spark and Dagster, through the `s3rs` command line
(the stack and the table list of test_cli.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from s3rs_assets.catchup import JOB_NAME
from s3rs_assets_tests.cli_stack import Stack, day, empty_warehouse, invoke, key_of, mysql, pg
from s3rs_assets_tests.helpers import insert_rows, make_ties_table

# the stack of test_cli.py, whose table list holds `cli_history`

TABLE = "cli_history"
#: data days over 20 years: years apart, quiet months, two adjacent days
DATA_DAYS = (7290, 6000, 4700, 3650, 2000, 1999, 900, 400, 45, 3)


def _rows() -> list:
    rows, n = [], 1
    for d in DATA_DAYS:
        # ties at the chunk boundary (chunk_rows 8): 12 rows share one timestamp
        for _ in range(12):
            rows.append((n, day(d) + timedelta(hours=5)))
            n += 1
        rows.append((n, day(d) + timedelta(hours=20)))
        n += 1
    return rows


@pytest.fixture
def history(stack):
    with mysql(stack.db) as conn:
        make_ties_table(conn, TABLE, _rows())
    empty_warehouse(stack, TABLE)
    return stack.name(TABLE)


def _runs(stack: Stack) -> list:
    import dagster as dg

    with dg.DagsterInstance.from_config(str(stack.home)) as inst:
        return list(inst.get_runs(filters=dg.RunsFilter(tags={"s3rs/table": stack.name(TABLE)})))


def _equal(stack: Stack) -> int:
    with mysql(stack.db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, update_at, amount, note FROM {TABLE} ORDER BY id")
        want = [tuple(r) for r in cur.fetchall()]
    with pg(stack) as c:
        got = [
            tuple(r)
            for r in c.execute(
                f'SELECT id, update_at, amount, note FROM "{stack.db}"."{TABLE}" ORDER BY id'
            )
        ]
    assert got == want
    return len(got)


def _size(stack: Stack, name: str) -> int:
    key = stack.resource.layout.watermark_primary(name)
    return stack.s3.head_object(Bucket=stack.bucket, Key=key)["ContentLength"]


class Crash(RuntimeError):
    """An injected crash (not transient: no retry policy reruns it)."""


def _count_loads(monkeypatch) -> dict[str, int]:
    """ensure_target calls and load transactions (attempts), counted on the real ones."""
    from s3rs_assets.load import transaction

    n = {"ddl": 0, "transactions": 0}

    def counted(name: str, real: Any) -> Any:
        def call(*a: Any, **kw: Any) -> Any:
            n[name] += 1
            return real(*a, **kw)

        return call

    monkeypatch.setattr(transaction, "ensure_target",
                        counted("ddl", transaction.ensure_target))
    monkeypatch.setattr(transaction, "_load_once",
                        counted("transactions", transaction._load_once))
    return n


def _ledger_matches_manifests(stack: Stack, name: str) -> None:
    """One ledger entry per manifest file (key, md5, partition, rows): what one load per
    partition writes."""
    rec = stack.store.read(name)
    want = sorted((f.key, f.md5, k, f.rows) for k, p in rec.partitions.items() for f in p.files)
    with pg(stack) as c:
        got = sorted(tuple(r) for r in c.execute(
            f'SELECT file_key, file_md5, partition_key, row_count FROM "{stack.db}".'
            "s3rs_load_ledger WHERE table_name = %s", (TABLE,)))
    assert got == want


def test_scattered_days_are_caught_up_in_one_run_exactly(stack, history, monkeypatch):
    import dagster as dg

    loads = _count_loads(monkeypatch)
    r = invoke("sync", "-t", history, "--no-progress")
    assert r.exit_code == 0, r.output
    runs = _runs(stack)
    assert len(runs) == 1 and runs[0].job_name == JOB_NAME, [x.job_name for x in runs]
    assert _equal(stack) == len(_rows())
    # the ten data days' files in one load transaction, the target's DDL checked once
    assert loads == {"ddl": 1, "transactions": 1}
    _ledger_matches_manifests(stack, history)
    rec = stack.store.read(history)
    assert set(rec.partitions) == {key_of(day(d)) for d in DATA_DAYS}
    assert rec.mysql_rows_extracted == rec.redshift_rows_loaded == len(_rows())
    # the record's size (issue 18's 16 KB target) needs the file lists of settled
    # partitions folded out of it: not done yet (see DESIGN.md); it stays bounded here
    assert _size(stack, history) < 64 * 1024
    # each data day materialized for both assets, with its partition key; checks passed
    with dg.DagsterInstance.from_config(str(stack.home)) as inst:
        for stage in ("s3_parquet", "redshift_table"):
            ak = dg.AssetKey([*history.split("."), stage])
            got = inst.get_materialized_partitions(ak)
            assert got == {key_of(day(d)) for d in DATA_DAYS}, stage
        evals = [
            e.dagster_event.event_specific_data
            for e in inst.all_logs(runs[0].run_id)
            if e.dagster_event and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
        ]
    assert evals and all(e.passed for e in evals)
    # nothing new: no run
    again = invoke("sync", "-t", history, "--no-progress")
    assert again.exit_code == 0 and len(_runs(stack)) == 1, again.output
    # rows arrive on two old days far apart, below their partitions' cursors: a
    # `watermark set` before the first reopens it and the later days, and one more run
    # re-materializes them all
    with mysql(stack.db) as conn:
        insert_rows(
            conn,
            TABLE,
            [(9001, day(6000) + timedelta(hours=21)), (9002, day(400) + timedelta(hours=22))],
        )
    ts = day(6000) + timedelta(hours=20, minutes=30)
    r = invoke("watermark", "set", "-t", history, "--timestamp", f"{ts:%Y-%m-%d %H:%M:%S}", "-y")
    assert r.exit_code == 0, r.output
    r = invoke("sync", "-t", history, "--no-progress")
    assert r.exit_code == 0, r.output
    assert len(_runs(stack)) == 2
    assert _equal(stack) == len(_rows()) + 2
    verify = invoke("verify", "-t", history)
    assert verify.exit_code == 0, verify.output


def test_a_crash_inside_the_catchup_load_leaves_nothing_and_the_retry_loads_once(
        stack, history, monkeypatch):
    """The compose crash "load_direct_before_commit" on the fifth data day: the four days
    copied before it were in the same transaction, so nothing of the load commits; the
    backup's checkpoints stay, and the next sync loads every row once."""
    from s3rs_assets.load import transaction
    from s3rs_assets_tests.compose import crash_at

    with crash_at(monkeypatch, transaction, "_copy_direct", Crash, after=4) as calls:
        r = invoke("sync", "-t", history, "--no-progress")
    assert r.exit_code == 1 and calls[0] == 5, r.output
    with pg(stack) as c:
        assert c.execute(f'SELECT count(*) FROM "{stack.db}"."{TABLE}"').fetchone() == (0,)
        assert c.execute(f'SELECT count(*) FROM "{stack.db}".s3rs_load_ledger WHERE '
                         "table_name = %s", (TABLE,)).fetchone() == (0,)
    rec = stack.store.read(history)
    assert rec.mysql_rows_extracted == len(_rows()) and rec.redshift_rows_loaded == 0
    loads = _count_loads(monkeypatch)
    r = invoke("sync", "-t", history, "--no-progress")
    assert r.exit_code == 0, r.output
    assert loads == {"ddl": 1, "transactions": 1}
    assert _equal(stack) == len(_rows())
    _ledger_matches_manifests(stack, history)
    assert stack.store.read(history).redshift_rows_loaded == len(_rows())


def test_catchup_refuses_to_overlap_another_run_of_its_table(tmp_path):
    """The catch-up op holds no table pool: another run of the table in progress (tagged
    by s3rs's launchers) stops it before any write."""
    import dagster as dg

    from s3rs_assets.catchup import _refuse_overlap
    from s3rs_assets.config import TableConfig
    from s3rs_assets.errors import ConfigError

    table = TableConfig(name="db.t", cursor="update_at", start="2020-01-01")

    class Ctx:  # the two attributes the guard reads of an op context
        def __init__(self, instance: dg.DagsterInstance, run_id: str) -> None:
            self.instance, self.run_id = instance, run_id

    with dg.instance_for_test(temp_dir=str(tmp_path)) as inst:
        mine = inst.add_run(
            dg.DagsterRun(
                job_name=JOB_NAME,
                run_id="a" * 36,
                tags={"s3rs/table": "db.t"},
                status=dg.DagsterRunStatus.STARTED,
            )
        )
        _refuse_overlap(Ctx(inst, mine.run_id), table)  # alone: fine
        inst.add_run(
            dg.DagsterRun(
                job_name="db__t__sync",
                run_id="b" * 36,
                tags={"s3rs/table": "db.t"},
                status=dg.DagsterRunStatus.STARTED,
            )
        )
        with pytest.raises(ConfigError, match="b{36}"):
            _refuse_overlap(Ctx(inst, mine.run_id), table)
