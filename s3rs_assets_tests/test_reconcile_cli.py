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
    def run(table, *args, command="reconcile", env_vars=None, **raw_cfg):
        tables = tmp_path / "tables.yaml"
        raw = {"name": table.name, "start": "2025-01-01", "lag": "0s", "target": table.target,
               **raw_cfg}
        tables.write_text(yaml.safe_dump({"tables": [raw]}))
        monkeypatch.setenv("S3RS_TABLES", str(tables))
        monkeypatch.setenv("S3RS_MYSQL_URL", mysql_url)
        monkeypatch.setenv("S3RS_REDSHIFT_URL", pg_url)
        monkeypatch.setenv("S3RS_S3_BUCKET", bucket)
        monkeypatch.setenv("S3RS_S3_PREFIX", "s3rs")
        for k, v in (env_vars or {}).items():
            monkeypatch.setenv(k, v)
        return CliRunner().invoke(main, [command, *args], catch_exceptions=False)

    return run


def snapshot(env: Env, target) -> dict:
    """Everything a command could change: every S3 object (ETag, LastModified), the
    warehouse table (rows, columns) and the load ledger."""
    c = env.s3.client()
    objects = {
        o["Key"]: (o["ETag"], o["LastModified"])
        for page in c.get_paginator("list_objects_v2").paginate(Bucket=env.s3.bucket)
        for o in page.get("Contents", [])
    }
    t = f'"{target.schema}"."{target.table}"'
    return {
        "s3": objects,
        "rows": sorted(map(repr, env.pg(f"SELECT * FROM {t}"))),
        "columns": env.pg(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND "
            "table_name = %s ORDER BY 1", (target.schema, target.table)),
        "ledger": sorted(map(repr, env.pg(
            f'SELECT * FROM "{target.schema}"."s3rs_load_ledger"'))),
    }


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
    assert rec.reconcile.found == {"missing": 1, "extra": 0, "differs": 0}  # the --apply pass
    assert rec.reconcile.applied and len(rec.reconcile.repairs) == 1


def test_bad_input_exits_2_and_changes_nothing(env, cli):
    table, _ = _make(env, "int", n=10)
    res = cli(table, "-t", "nope.nothing")
    assert res.exit_code == 2 and "unknown table 'nope.nothing'" in res.output
    res = cli(table, "-t", table.name, "--from", "9", "--to", "3", "--apply")
    assert res.exit_code == 2 and "--from 9 is after --to 3" in res.output
    assert env.store().read(table.name, fresh=True).reconcile is None


def test_without_apply_nothing_is_written_anywhere(env, cli):
    """Issue 16 item 8: a reconcile without --apply rewrote the primary record."""
    table, target = _make(env, "int", n=60, deletes="soft")
    env.store().write_copies(table.name)
    w, p = _pg_where("int", 7)
    env.pg(f'DELETE FROM "{target.schema}"."{target.table}" WHERE {w}', p)
    env.mysql_exec(f"DELETE FROM `{table.table}` WHERE id = 9")  # extra, soft deletes
    before = snapshot(env, target)
    for args in ((), ("--columns", "all"), ("--json",), ("--threshold", "2")):
        res = cli(table, "-t", table.name, *args, deletes="soft")
        assert res.exit_code == 1, res.output
        assert snapshot(env, target) == before, args
    # the primary record lost: read-only reconcile neither recovers nor writes it
    c = env.s3.client()
    primary = env.s3.layout.watermark_primary(table.name)
    c.delete_object(Bucket=env.s3.bucket, Key=primary)
    before = snapshot(env, target)
    res = cli(table, "-t", table.name, deletes="soft")
    assert res.exit_code == 1 and "no watermark record" in res.stdout
    assert snapshot(env, target) == before
    # with --apply it writes: the record is recovered, the repair lands
    res = cli(table, "-t", table.name, "--apply", deletes="soft")
    assert res.exit_code == 0, res.output
    assert cli(table, "-t", table.name, deletes="soft").exit_code == 0


def test_exit_codes_of_bad_configuration_and_unreachable_services(env, cli, mysql_url, pg_url):
    table, target = _make(env, "int", n=20)
    w, p = _pg_where("int", 3)
    env.pg(f'DELETE FROM "{target.schema}"."{target.table}" WHERE {w}', p)
    before = snapshot(env, target)
    bad_mysql = mysql_url.replace("root:@", "root:wrong-pw@").replace("root@", "root:wrong-pw@")
    cases = [
        ({"cursor": "update_att"}, {}, "update_att"),
        ({"primary_key": ["nope"]}, {}, "nope"),
        ({}, {"S3RS_MYSQL_URL": bad_mysql}, "cannot connect to MySQL"),
        ({}, {"S3RS_REDSHIFT_URL": "postgresql://postgres@127.0.0.1:1/x"},
         "cannot connect to the warehouse"),
        ({}, {"S3RS_REDSHIFT_URL": pg_url.replace("://postgres", "://no_such_role")},
         "cannot connect to the warehouse"),
    ]
    for command in ("reconcile", "verify"):
        for cfg, env_vars, named in cases:
            for extra in ((), ("--apply",)) if command == "reconcile" else ((),):
                res = cli(table, "-t", table.name, *extra, command=command, env_vars=env_vars,
                          **cfg)
                assert res.exit_code == 2, (command, cfg, env_vars, res.output)
                assert named in res.output, (command, named, res.output)
                assert "wrong-pw" not in res.output
                assert "Traceback" not in res.output
                assert snapshot(env, target) == before, (command, cfg, env_vars)
    # the finding: exit 1 without --apply (reconcile and verify), 0 once repaired
    assert cli(table, "-t", table.name).exit_code == 1
    res = cli(table, "-t", table.name, command="verify")
    assert res.exit_code == 1 and "MISMATCH" in res.output
    assert cli(table, "-t", table.name, "--apply").exit_code == 0
    assert cli(table, "-t", table.name).exit_code == 0
    assert cli(table, "-t", table.name, command="verify").exit_code == 0


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


def test_reconcile_imports_neither_dagster_nor_spark(env, cli, tmp_path, mysql_url, pg_url,
                                                      bucket, moto_endpoint):
    """Issue 19: `s3rs reconcile` starts without Dagster, dagster-aws, dagster-pyspark or
    Spark (most of its start-up): counted in a fresh process, on a real pass."""
    import os
    import subprocess
    import sys

    table, target = _make(env, "int", n=30)
    w, p = _pg_where("int", 4)
    env.pg(f'DELETE FROM "{target.schema}"."{target.table}" WHERE {w}', p)
    tables = tmp_path / "tables.yaml"
    raw = {"name": table.name, "start": "2025-01-01", "lag": "0s", "target": table.target}
    tables.write_text(yaml.safe_dump({"tables": [raw]}))
    script = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from s3rs_assets.cli import main\n"
        f"r = CliRunner().invoke(main, ['reconcile', '-t', {table.name!r}, '--json'])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('dagster', 'dagster_aws', 'dagster_pyspark', 'pyspark'))\n"
        "print(r.exit_code, len(heavy), heavy[:5])\n"
    )
    environ = {**os.environ, "S3RS_TABLES": str(tables), "S3RS_MYSQL_URL": mysql_url,
               "S3RS_REDSHIFT_URL": pg_url, "S3RS_S3_BUCKET": bucket,
               "S3RS_S3_PREFIX": "s3rs", "AWS_ENDPOINT_URL_S3": moto_endpoint}
    out = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[:2] == ["1", "0"], out  # the difference found (exit 1), no heavy module
