"""Small helpers shared by tests: tables with many equal timestamps, S3 manifest reads."""

from __future__ import annotations

import io
from datetime import datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq

from s3rs_assets.config import TableConfig

TIES_DDL = (
    "CREATE TABLE `{t}` (id BIGINT NOT NULL PRIMARY KEY, update_at DATETIME(6) NOT NULL, "
    "amount DECIMAL(18,4) NOT NULL, note VARCHAR(64) NULL, KEY (update_at)) "
    "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)


def make_ties_table(conn, name: str, rows: list[tuple[int, datetime]]) -> None:
    """Create `name` holding (id, update_at) rows; amount and note derived from id."""
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        cur.execute(TIES_DDL.format(t=name))
        insert_rows(conn, name, rows)


def insert_rows(conn, name: str, rows: list[tuple[int, datetime]]) -> None:
    with conn.cursor() as cur:
        for i in range(0, len(rows), 5000):
            cur.executemany(
                f"INSERT INTO `{name}` (id, update_at, amount, note) VALUES (%s, %s, %s, %s)",
                [(i_, ts, f"{i_}.0001", f"row {i_} ✓") for i_, ts in rows[i : i + 5000]],
            )


def ties(n: int, day: datetime, groups: int, first_id: int = 1) -> list[tuple[int, datetime]]:
    """`n` rows spread over `groups` distinct timestamps within `day`; ids shuffled vs time."""
    stamps = [day + timedelta(hours=1 + g, microseconds=g) for g in range(groups)]
    # ids interleave across timestamps so (c, pk) order differs from pk order
    return [(first_id + i, stamps[(i * 7919) % groups]) for i in range(n)]


def table_cfg(schema: str, table: str, **kw) -> TableConfig:
    raw = {"name": f"{schema}.{table}", "start": "2025-01-01", "lag": "0s", **kw}
    return TableConfig.from_dict(raw)


def read_manifest_ids(s3_client, bucket: str, keys: list[str], pk: str = "id") -> list[int]:
    ids: list[int] = []
    for k in keys:
        body = s3_client.get_object(Bucket=bucket, Key=k)["Body"].read()
        ids.extend(pq.read_table(io.BytesIO(body), columns=[pk]).column(pk).to_pylist())
    return ids


def read_parquet(s3_client, bucket: str, keys: list[str]) -> pa.Table:
    tables = [
        pq.read_table(io.BytesIO(s3_client.get_object(Bucket=bucket, Key=k)["Body"].read()))
        for k in keys
    ]
    return pa.concat_tables(tables) if tables else pa.table({})


def resources(mysql_url: str, s3_resource, spark_resource, pg_url: str | None = None) -> dict:
    from s3rs_assets.io_manager import S3RSIOManager
    from s3rs_assets.resources import MySQLResource
    from s3rs_assets.warehouse import WarehouseResource

    res = {
        "mysql": MySQLResource(url=mysql_url),
        "s3": s3_resource,
        "spark": spark_resource,
        "s3rs_io_manager": S3RSIOManager(s3=s3_resource),
    }
    if pg_url:
        res["warehouse"] = WarehouseResource(url=pg_url)
    return res


def backup(cfg: TableConfig, res: dict, *, partition: str | None = None,
           start: str | None = None, end: str | None = None, instance=None,
           limit: int | None = None, raise_on_error: bool = True):
    """Materialize `s3_parquet` of `cfg` for one partition or a range, in this process."""
    import dagster as dg

    from s3rs_assets.assets import build_table_assets
    from s3rs_assets.names import asset_key

    key = asset_key(cfg, "s3_parquet")
    # the backup asset and its own check: nothing that needs the warehouse
    assets = [a for a in build_table_assets(cfg)
              if a.keys == {key} or {c.asset_key for c in a.check_keys} == {key}]
    tags = {}
    if start is not None:
        tags = {"dagster/asset_partition_range_start": start,
                "dagster/asset_partition_range_end": end or start}
    op = "__".join(asset_key(cfg, "s3_parquet").path)
    run_config = {"ops": {op: {"config": {"limit": limit}}}} if limit else None
    return dg.materialize(
        assets,
        selection=[key],
        resources=res,
        partition_key=partition,
        tags=tags or None,
        instance=instance,
        run_config=run_config,
        raise_on_error=raise_on_error,
    )


def manifest_keys(store, table: str, partition: str | None = None) -> list[str]:
    rec = store.read(table, fresh=True)  # runs wrote it since this store last looked
    parts = [rec.partitions[partition]] if partition else list(rec.partitions.values())
    return [f.key for p in parts for f in p.files]


def mysql_ids(conn, table: str, where: str = "1=1") -> list[int]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT id FROM `{table}` WHERE {where} ORDER BY id")
        return [r[0] for r in cur.fetchall()]


def list_keys(s3_client, bucket: str, prefix: str) -> list[str]:
    keys: list[str] = []
    for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(o["Key"] for o in page.get("Contents", []))
    return keys


def sync(cfg: TableConfig, res: dict, *, partition: str | None = None, start: str | None = None,
         end: str | None = None, instance=None, stages: tuple[str, ...] = ("s3_parquet",
         "redshift_table"), raise_on_error: bool = True, reconcile_check: bool = True):
    """Materialize both stages (or `stages`) of `cfg` in this process; without
    `reconcile_check`, as `s3rs sync`'s jobs do (SYNC_CHECKS: no `reconciled` check)."""
    import dagster as dg

    from s3rs_assets.assets import build_table_assets
    from s3rs_assets.checks import reconcile_check_key
    from s3rs_assets.names import asset_key

    selection = dg.AssetSelection.assets(*[asset_key(cfg, s) for s in stages])
    if not reconcile_check:
        selection = selection - dg.AssetSelection.checks(reconcile_check_key(cfg))
    tags = None
    if start is not None:
        tags = {"dagster/asset_partition_range_start": start,
                "dagster/asset_partition_range_end": end or start}
    return dg.materialize(
        build_table_assets(cfg),
        selection=selection,
        resources=res,
        partition_key=partition,
        tags=tags,
        instance=instance,
        raise_on_error=raise_on_error,
    )
