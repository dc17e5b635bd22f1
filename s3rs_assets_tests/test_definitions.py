"""The code location as Dagster loads it, and a sync run by `dagster job execute`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime

import dagster as dg
import pytest

from s3rs_assets.io_manager import store_for
from s3rs_assets_tests.conftest import REPO
from s3rs_assets_tests.helpers import make_ties_table, ties

TABLES_YAML = """
tables:
  - name: {db}.def_orders
    start: "2025-03-01"
    chunk_rows: 700
    lag: 0s
    target: dw_defs.def_orders
  - name: {db}.def_hourly
    partition: hourly
    start: "2025-03-04 00:00:00"
"""


@pytest.fixture
def tables_file(tmp_path, mysql_db, monkeypatch):
    p = tmp_path / "tables.yaml"
    p.write_text(TABLES_YAML.format(db=mysql_db))
    monkeypatch.setenv("S3RS_TABLES", str(p))
    return p


def _load_defs() -> dg.Definitions:
    from s3rs_assets.definitions import build_definitions

    return build_definitions()


def test_definitions_load_and_list_every_asset(tables_file, mysql_db):
    defs = _load_defs()
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert keys == {
        f"{mysql_db}/def_orders/s3_parquet", f"{mysql_db}/def_orders/redshift_table",
        f"{mysql_db}/def_hourly/s3_parquet", f"{mysql_db}/def_hourly/redshift_table",
    }
    job = defs.resolve_job_def(f"{mysql_db}__def_orders__sync")
    assert job.partitions_def.get_first_partition_key() == "2025-03-01"
    hourly = defs.resolve_job_def(f"{mysql_db}__def_hourly__sync")
    assert hourly.partitions_def.get_first_partition_key() == "2025-03-04-00:00"
    graph = defs.resolve_asset_graph()
    rs = dg.AssetKey([mysql_db, "def_orders", "redshift_table"])
    assert graph.get(rs).parent_keys == {dg.AssetKey([mysql_db, "def_orders", "s3_parquet"])}
    assert defs.resolve_asset_graph().get(rs).check_keys
    sensors = {s.name for s in defs.sensors}
    assert sensors == {"s3rs_watermark_guard", "s3rs_stage_chain", "s3rs_new_data"}


def test_definitions_validate_cli(tables_file):
    out = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-m",
         "s3rs_assets.definitions"],
        cwd=REPO, capture_output=True, text=True, env={**os.environ}, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]


def test_a_bad_tables_file_fails_loading_with_its_name(tmp_path, monkeypatch):
    p = tmp_path / "tables.yaml"
    p.write_text("tables:\n  - name: shop.orders; DROP TABLE x\n")
    monkeypatch.setenv("S3RS_TABLES", str(p))
    from s3rs_assets.errors import ConfigError

    with pytest.raises(ConfigError, match="invalid table"):
        _load_defs()


@pytest.mark.slow
def test_dagster_job_execute_syncs_a_range(tables_file, mysql_db, mysql_conn, mysql_url, pg_url,
                                           s3_resource, moto_endpoint, tmp_path):
    make_ties_table(mysql_conn, "def_orders", ties(1500, datetime(2025, 3, 3), 4)
                    + ties(500, datetime(2025, 3, 4), 2, 5001))
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {
        **os.environ,
        "S3RS_MYSQL_URL": mysql_url,
        "S3RS_S3_BUCKET": s3_resource.bucket,
        "S3RS_REDSHIFT_URL": pg_url,
        "S3RS_SPARK_MASTER": "local[2]",
        "DAGSTER_HOME": str(home),
        "PYSPARK_PYTHON": sys.executable,
    }
    tags = json.dumps({"dagster/asset_partition_range_start": "2025-03-02",
                       "dagster/asset_partition_range_end": "2025-03-04"})
    out = subprocess.run(
        [sys.executable, "-m", "dagster", "job", "execute", "-m", "s3rs_assets.definitions",
         "-j", f"{mysql_db}__def_orders__sync", "--tags", tags],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=600,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    rec = store_for(s3_resource).read(f"{mysql_db}.def_orders")
    assert rec.mysql_rows_extracted == 2000 and rec.redshift_rows_loaded == 2000
    assert {k: p.status for k, p in rec.partitions.items()} == {
        "2025-03-03": "complete", "2025-03-04": "complete"}
    assert rec.is_complete("2025-03-02", datetime(2025, 3, 2), datetime(2025, 3, 3))  # empty
    from dagster._core.instance.ref import InstanceRef

    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as instance:
        runs = instance.get_runs()
        assert len(runs) == 1 and runs[0].is_success
        mats = instance.get_materialized_partitions(
            dg.AssetKey([mysql_db, "def_orders", "redshift_table"]))
        assert mats == {"2025-03-02", "2025-03-03", "2025-03-04"}


def test_shipped_instance_config_serializes_runs_per_table(tmp_path, monkeypatch):
    """dagster.yaml: one run per table at a time (tag limit) and one step per table pool."""
    import shutil

    from s3rs_assets.config import TableConfig
    from s3rs_assets.names import TABLE_TAG, pool_name

    shutil.copy(REPO / "dagster.yaml", tmp_path / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    with dg.DagsterInstance.get() as instance:
        cfg = instance.get_concurrency_config()
    assert cfg.pool_config.default_pool_limit == 1
    # op granularity: steps claim the slot in every run, queued or in-process
    assert cfg.pool_config.pool_granularity.value == "op"
    limits = cfg.run_queue_config.tag_concurrency_limits
    assert {"key": TABLE_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in limits
    t = TableConfig.from_dict({"name": "shop.orders"})
    from s3rs_assets.assets import build_table_assets

    pools = {a.op.pool for a in build_table_assets(t)}
    assert pools == {pool_name(t)}
