"""Shared set-up of the reconcile tests: a MySQL table copied into PostgreSQL through the
real load (load_files with the ledger), and a watermark record, as a sync leaves them."""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pyarrow.parquet as pq

from s3rs_assets.config import TableConfig
from s3rs_assets.io_manager import store_for
from s3rs_assets.load import LoadTarget, load_files
from s3rs_assets.reconcile import ReconcileOptions, ReconcileReport, reconcile_table
from s3rs_assets.reconcile.repair import rows_table
from s3rs_assets.reconcile.sql import mysql_select_list
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.source import describe
from s3rs_assets.warehouse import WarehouseResource
from s3rs_assets_tests.test_load import put_parquet

T0 = datetime(2025, 3, 1, 8, 0, 0)

KEY_DDL = {
    "int": "id BIGINT NOT NULL, PRIMARY KEY (id)",
    "composite": "id INT NOT NULL, code VARCHAR(20) NOT NULL, PRIMARY KEY (id, code)",
    "string": "code VARCHAR(40) NOT NULL, PRIMARY KEY (code)",
}


def key_of(kind: str, i: int) -> dict[str, Any]:
    """Row i's key columns; string keys mix case and accents (general_ci folds them)."""
    if kind == "int":
        return {"id": i}
    if kind == "composite":
        return {"id": i // 3, "code": f"c{i % 3}-Ä"}
    return {"code": f"Key-{i:05d}-é"}


@dataclass
class Env:
    mysql_conn: Any
    mysql: MySQLResource
    warehouse: WarehouseResource
    s3: S3Resource
    pg_url: str
    db: str

    def mysql_exec(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self.mysql_conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())

    def pg(self, sql: str, params: tuple = ()) -> list[tuple]:
        with psycopg.connect(self.pg_url, autocommit=True) as c:
            cur = c.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def store(self):
        return store_for(self.s3)

    def reconcile(self, cfg: TableConfig, **kw: Any) -> ReconcileReport:
        checkpoint = kw.pop("checkpoint", None)
        return reconcile_table(
            cfg, self.mysql, self.warehouse, self.s3, self.store(), ReconcileOptions(**kw),
            checkpoint=checkpoint,
        )


def make_env(mysql_conn, mysql_url, mysql_db, pg_url, s3_resource) -> Env:
    return Env(mysql_conn, MySQLResource(url=mysql_url), WarehouseResource(url=pg_url),
               s3_resource, pg_url, mysql_db)


def new_table(env: Env, columns_ddl: str, *, collate: str = "utf8mb4_general_ci",
              **cfg: Any) -> TableConfig:
    name = f"rc_{uuid.uuid4().hex[:8]}"
    env.mysql_exec(
        f"CREATE TABLE `{name}` ({columns_ddl}) ENGINE=InnoDB "
        f"DEFAULT CHARSET=utf8mb4 COLLATE={collate}"
    )
    raw = {"name": f"{env.db}.{name}", "start": "2025-01-01", "lag": "0s",
           "target": f"rc.{name}", **cfg}
    return TableConfig.from_dict(raw)


def target_of(env: Env, cfg: TableConfig) -> LoadTarget:
    src = describe(env.mysql_conn, cfg)
    return LoadTarget.from_table_config(cfg, src.columns, src.primary_key)


def copy_to_warehouse(env: Env, cfg: TableConfig, partition: str = "2025-03-01") -> LoadTarget:
    """Everything MySQL holds now, loaded as one backup file, and a watermark record."""
    target = target_of(env, cfg)
    rows = env.mysql_exec(
        f"SELECT {mysql_select_list(target)} FROM `{cfg.schema}`.`{cfg.table}`"
    )
    table = rows_table(target, rows)
    key = env.s3.layout.data_object(cfg.schema, cfg.table, partition, uuid.uuid4().hex[:8])
    entry = put_parquet(env.s3.client(), env.s3.bucket, key, table, cfg.cursor)
    load_files(env.warehouse, env.s3, target, partition, [entry])
    env.store().update(cfg.name, lambda rec: None)
    return target


def warehouse_rows(env: Env, target: LoadTarget, where: str = "TRUE") -> dict[str, tuple]:
    """Key text -> row, from the warehouse (soft-deleted rows included)."""
    cols = ", ".join(f'"{c}"' for c in target.column_names)
    rows = env.pg(f'SELECT {cols} FROM "{target.schema}"."{target.table}" WHERE {where}')
    nk = len(target.primary_key)
    idx = [target.column_names.index(k) for k in target.primary_key]
    return {"|".join(str(r[i]) for i in idx[:nk]): r for r in rows}


def mysql_rows(env: Env, cfg: TableConfig, target: LoadTarget) -> dict[str, tuple]:
    rows = env.mysql_exec(
        f"SELECT {mysql_select_list(target)} FROM `{cfg.schema}`.`{cfg.table}`"
    )
    table = rows_table(target, rows)  # the types the warehouse holds
    idx = [target.column_names.index(k) for k in target.primary_key]
    out = {}
    for r in table.to_pylist():
        vals = tuple(r[c] for c in target.column_names)
        out["|".join(str(vals[i]) for i in idx)] = vals
    return out


def read_repair_file(env: Env, key: str):
    body = env.s3.client().get_object(Bucket=env.s3.bucket, Key=key)["Body"].read()
    return pq.read_table(io.BytesIO(body))


def stamp(i: int) -> datetime:
    return T0 + timedelta(minutes=i % 50, microseconds=(i * 37) % 1000)
