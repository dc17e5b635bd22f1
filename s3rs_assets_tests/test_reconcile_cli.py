"""`s3rs reconcile` on real services: the short table, the stable --json document, exit
codes and bad input; the `reconciled` asset check run on its own; the stopped schedules."""

from __future__ import annotations

import json

import dagster as dg
import pytest
import yaml
from click.testing import CliRunner

from s3rs_assets.checks import (
    build_reconcile_check,
    build_reconcile_schedules,
    reconcile_job_name,
)
from s3rs_assets.cli import main
from s3rs_assets.names import RECONCILE_CHECK_NAME
from s3rs_assets_tests.reconcile_fixtures import Env, make_env
from s3rs_assets_tests.test_reconcile import _make, _pg_where


@pytest.fixture
def env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource) -> Env:
    return make_env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource)


@pytest.fixture
def cli(env, tmp_path, monkeypatch, mysql_url, pg_url, bucket):
    def run(table, *args):
        tables = tmp_path / "tables.yaml"
        raw = {"name": table.name, "start": "2025-01-01", "lag": "0s", "target": table.target}
        tables.write_text(yaml.safe_dump({"tables": [raw]}))
        monkeypatch.setenv("S3RS_TABLES", str(tables))
        monkeypatch.setenv("S3RS_MYSQL_URL", mysql_url)
        monkeypatch.setenv("S3RS_REDSHIFT_URL", pg_url)
        monkeypatch.setenv("S3RS_S3_BUCKET", bucket)
        monkeypatch.setenv("S3RS_S3_PREFIX", "s3rs")
        return CliRunner().invoke(main, ["reconcile", *args], catch_exceptions=False)

    return run


def test_json_document_exit_codes_and_apply(env, cli):
    table, target = _make(env, "int", n=100)
    w, p = _pg_where("int", 7)
    env.pg(f'DELETE FROM "{target.schema}"."{target.table}" WHERE {w}', p)
    res = cli(table, "-t", table.name, "--json")
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    assert doc["version"] == 1 and doc["counts"] == {"missing": 1, "extra": 0, "differs": 0}
    assert doc["differences"] == [
        {"kind": "missing", "key": [7], "mysql_cursor": doc["differences"][0]["mysql_cursor"],
         "warehouse_cursor": None}
    ]
    assert {"diff", "total", "validate"} <= set(doc["timings"])
    assert doc["mysql_rows"] == 100 and doc["warehouse_rows"] == 99
    res = cli(table, "-t", table.name, "--apply")
    assert res.exit_code == 0, res.output
    assert "missing" in res.stdout and "repaired: 1 row(s) re-read from MySQL" in res.stdout
    assert cli(table, "-t", table.name).exit_code == 0
    rec = env.store().read(table.name, fresh=True)
    assert rec.reconcile.found == {"missing": 0, "extra": 0, "differs": 0}
    assert len(rec.reconcile.repairs) == 1


def test_bad_input_exits_2_and_changes_nothing(env, cli):
    table, _ = _make(env, "int", n=10)
    res = cli(table, "-t", "nope.nothing")
    assert res.exit_code == 2 and "unknown table 'nope.nothing'" in res.output
    res = cli(table, "-t", table.name, "--from", "9", "--to", "3", "--apply")
    assert res.exit_code == 2 and "--from 9 is after --to 3" in res.output
    assert env.store().read(table.name, fresh=True).reconcile is None


def test_check_runs_alone_and_schedules_are_stopped(env, mysql_url, pg_url, s3_resource):
    from s3rs_assets.resources import MySQLResource
    from s3rs_assets.warehouse import WarehouseResource

    table, target = _make(env, "int", n=50)
    w, p = _pg_where("int", 3)
    env.pg(f'UPDATE "{target.schema}"."{target.table}" SET update_at = NULL WHERE {w}', p)

    @dg.asset(key=dg.AssetKey([table.schema, table.table, "redshift_table"]))
    def redshift_table() -> None: ...

    schedules = build_reconcile_schedules([table])
    defs = dg.Definitions(
        assets=[redshift_table],
        asset_checks=[build_reconcile_check(table)],
        schedules=schedules,
        resources={"mysql": MySQLResource(url=mysql_url), "s3": s3_resource,
                   "warehouse": WarehouseResource(url=pg_url)},
    )
    assert schedules[0].default_status == dg.DefaultScheduleStatus.STOPPED
    result = defs.resolve_job_def(reconcile_job_name(table)).execute_in_process()
    evals = result.get_asset_check_evaluations()
    assert [e.check_name for e in evals] == [RECONCILE_CHECK_NAME]
    ev = evals[0]
    assert not ev.passed and ev.severity == dg.AssetCheckSeverity.WARN
    assert ev.metadata["differs"].value == 1 and ev.metadata["missing"].value == 0
    run_config = {"ops": {_check_op(defs, table): {"config": {"apply": True}}}}
    again = defs.resolve_job_def(reconcile_job_name(table)).execute_in_process(
        run_config=run_config
    )
    assert again.get_asset_check_evaluations()[0].passed


def _check_op(defs, table) -> str:
    job = defs.resolve_job_def(reconcile_job_name(table))
    return next(iter(job.graph.node_dict))
