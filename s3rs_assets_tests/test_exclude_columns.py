"""`exclude_columns`: secrets and PII never leave MySQL.

The end-to-end test syncs through a MySQL user that may see the `password` column in the
catalog (REFERENCES privilege) but not SELECT it: any statement s3rs sent that selected
it would fail. Both readers, the load, the `matches_mysql` check and a reconcile over
every column run through that user.
"""

from __future__ import annotations

import io
import uuid
from datetime import datetime, timedelta

import dagster as dg
import psycopg
import pyarrow.parquet as pq
import pytest

from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError, SourceSchemaError
from s3rs_assets.io_manager import store_for
from s3rs_assets.load import LoadTarget
from s3rs_assets.load.ddl import create_table_sql, plan_target_ddl
from s3rs_assets.names import CHECK_NAME
from s3rs_assets.reconcile import ReconcileOptions, reconcile_table
from s3rs_assets.reconcile.keys import Segment
from s3rs_assets.reconcile.sql import TableSQL, mysql_select_list
from s3rs_assets.resources import MySQLResource
from s3rs_assets.source import describe
from s3rs_assets.verify import mysql_checksum_sql
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets_tests.conftest import MYSQL_HOST, MYSQL_PORT
from s3rs_assets_tests.helpers import resources, sync, table_cfg

DDL = (
    "CREATE TABLE `{t}` (id BIGINT NOT NULL PRIMARY KEY, update_at DATETIME(6) NOT NULL, "
    "name VARCHAR(40) NULL, Password VARCHAR(64) NULL, ssn CHAR(11) NULL, "
    "KEY (update_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)
T0 = datetime(2025, 3, 1, 9, 0)


# ----------------------------------------------------------------------------- config


def test_config_accepts_a_list_and_keeps_the_names():
    t = TableConfig.from_dict({"name": "shop.users", "exclude_columns": ["password", "ssn"]})
    assert t.exclude_columns == ("password", "ssn")
    assert TableConfig.from_dict({"name": "shop.users"}).exclude_columns == ()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"exclude_columns": ["update_at"]}, r"cannot exclude 'update_at' \(the cursor\)"),
        ({"exclude_columns": ["UPDATE_AT"]}, r"cannot exclude 'UPDATE_AT' \(the cursor\)"),
        ({"primary_key": ["id"], "exclude_columns": ["ssn", "id"]},
         r"cannot exclude 'id' \(a primary key column\)"),
        ({"exclude_columns": ["pw", "PW"]}, r"lists \['PW', 'pw'\] more than once"),
        ({"exclude_columns": ["pass word"]}, "exclude_columns entry"),
        ({"exclude_columns": "x`; drop"}, "exclude_columns entry"),
        ({"exclude_columns": []}, "non-empty list"),
        ({"exclude_columns": {"a": 1}}, "non-empty list"),
    ],
)
def test_config_refuses_bad_exclusions_by_name(raw, message):
    with pytest.raises(ConfigError, match=message) as e:
        TableConfig.from_dict({"name": "shop.users", **raw})
    assert "shop.users" in str(e.value)


# ------------------------------------------------------------------- MySQL's catalog


@pytest.fixture
def users(mysql_conn, mysql_db):
    name = f"users_{uuid.uuid4().hex[:8]}"
    with mysql_conn.cursor() as cur:
        cur.execute(DDL.format(t=name))
        cur.executemany(
            f"INSERT INTO `{name}` (id, update_at, name, Password, ssn) "
            "VALUES (%s, %s, %s, %s, %s)",
            [
                (i, T0 + timedelta(minutes=i // 3), f"user {i}", f"hunter{i}",
                 f"078-05-{i:04d}")
                for i in range(1, 61)
            ],
        )
    yield name
    with mysql_conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")


def test_describe_drops_excluded_columns_case_insensitively(mysql_conn, mysql_db, users):
    cfg = table_cfg(mysql_db, users, exclude_columns=["password", "SSN"])
    src = describe(mysql_conn, cfg)
    assert [c.name for c in src.columns] == ["id", "update_at", "name"]
    assert "assword" not in src.select_list() and "ssn" not in src.select_list("connectorx")


def test_unknown_excluded_column_is_an_error_naming_it(mysql_conn, mysql_db, users):
    cfg = table_cfg(mysql_db, users, exclude_columns=["password", "pasword", "sssn"])
    with pytest.raises(SourceSchemaError, match=r"\['pasword', 'sssn'\].*does not have") as e:
        describe(mysql_conn, cfg)
    assert users in str(e.value)


def test_excluding_mysqls_own_primary_key_is_refused(mysql_conn, mysql_db, users):
    with pytest.raises(SourceSchemaError, match=r"primary key column\(s\) \['id'\]"):
        describe(mysql_conn, table_cfg(mysql_db, users, exclude_columns=["id"]))


def test_generated_sql_never_names_an_excluded_column(mysql_conn, mysql_db, users):
    cfg = table_cfg(mysql_db, users, exclude_columns=["password", "ssn"], target="dw.users")
    src = describe(mysql_conn, cfg)
    target = LoadTarget.from_table_config(cfg, src.columns, src.primary_key)
    texts = [
        src.select_list("jdbc"),
        src.select_list("connectorx"),
        mysql_select_list(target),
        mysql_checksum_sql(cfg.name, target, 3),
        TableSQL("mysql", cfg.schema, cfg.table, target, "all").leaf_rows(Segment(), None)[0],
        create_table_sql(target, "postgres"),
        create_table_sql(target, "redshift"),
        *[s for g in plan_target_ddl(target, {"id": "BIGINT"}, "postgres") for s in g],
    ]
    for text in texts:
        assert "assword" not in text.lower() and "ssn" not in text.lower(), text


# ------------------------------------------------------------------------ end to end


@pytest.fixture
def restricted_url(mysql_conn, mysql_db, users):
    """A user that sees `Password` in the catalog but may not SELECT it."""
    user, pw = f"s3rs_x{uuid.uuid4().hex[:8]}", "Pw-" + uuid.uuid4().hex[:8]
    with mysql_conn.cursor() as cur:
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{pw}'")
        cur.execute(
            f"GRANT SELECT (id, update_at, name, ssn), REFERENCES (Password) "
            f"ON `{mysql_db}`.`{users}` TO '{user}'@'%'"
        )
    yield f"mysql://{user}:{pw}@{MYSQL_HOST}:{MYSQL_PORT}/{mysql_db}"
    with mysql_conn.cursor() as cur:
        cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")


def _pg(pg_url: str, sql: str) -> list[tuple]:
    with psycopg.connect(pg_url) as c:
        return c.execute(sql).fetchall()


@pytest.mark.parametrize("reader", ["connectorx", "jdbc"])
def test_excluded_column_never_leaves_mysql(mysql_conn, mysql_db, users, restricted_url,
                                           pg_url, s3_resource, s3_client, spark_resource,
                                           reader):
    schema = f"dw_x_{reader}"
    res = resources(restricted_url, s3_resource, spark_resource, pg_url)
    # the user really cannot select it: a sync that tries fails
    plain = table_cfg(mysql_db, users, target=f"{schema}.plain", reader=reader,
                      exclude_columns=["ssn"])
    with dg.instance_for_test() as instance:
        failed = sync(plain, res, partition="2025-03-01", instance=instance,
                      raise_on_error=False)
    assert not failed.success

    cfg = table_cfg(mysql_db, users, target=f"{schema}.users", reader=reader, chunk_rows=25,
                    exclude_columns=["password"])
    with dg.instance_for_test() as instance:
        result = sync(cfg, res, partition="2025-03-01", instance=instance)
    (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == CHECK_NAME]
    assert check.passed

    rec = store_for(s3_resource).read(cfg.name, fresh=True)
    keys = [f.key for p in rec.partitions.values() for f in p.files]
    assert keys
    for k in keys:
        body = s3_client.get_object(Bucket=s3_resource.bucket, Key=k)["Body"].read()
        names = pq.read_schema(io.BytesIO(body)).names
        assert names == ["id", "update_at", "name", "ssn"]
        assert b"hunter" not in body
    cols = [r[0] for r in _pg(pg_url, "SELECT column_name FROM information_schema.columns "
                                     f"WHERE table_schema = '{schema}' AND table_name = 'users' "
                                     "ORDER BY ordinal_position")]
    assert cols == ["id", "update_at", "name", "ssn"]
    rows = _pg(pg_url, f'SELECT id, name, ssn FROM "{schema}"."users" ORDER BY id')
    with mysql_conn.cursor() as cur:
        cur.execute(f"SELECT id, name, ssn FROM `{users}` ORDER BY id")
        assert rows == list(cur.fetchall())

    report = reconcile_table(cfg, MySQLResource(url=restricted_url),
                             WarehouseResource(url=pg_url), s3_resource,
                             store_for(s3_resource), ReconcileOptions(columns="all"))
    assert report.total == 0 and report.columns == "all"
