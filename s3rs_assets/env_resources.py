"""The resources from the environment, built in one place for the definitions and the CLI.

Definitions get `EnvVar`s for the secrets (Dagster reads them when a run starts, so no
secret is stored in the definitions or shown in the UI); `s3rs sync`, which uses the
resources outside a run to plan it, gets the values now (`resolved=True`), read through
connections.py's `*_from_env` (the same variables, the same "is not set" errors).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import dagster as dg

from s3rs_assets.config import TableConfig
from s3rs_assets.connections import mysql_from_env, s3_from_env, warehouse_from_env
from s3rs_assets.io_manager import S3RSIOManager
from s3rs_assets.resources import MySQLResource, S3Resource, SparkResource
from s3rs_assets.spark_session import config_from_env
from s3rs_assets.warehouse import WarehouseResource

#: every resource key the definitions bind
NAMES = ("mysql", "s3", "spark", "warehouse", "s3rs_io_manager")


def _build(
    name: str, resolved: bool, s3: S3Resource | None, tables: Iterable[TableConfig] | None = None
) -> Any:
    if name == "mysql":
        url = mysql_from_env().url if resolved else dg.EnvVar("S3RS_MYSQL_URL")
        return MySQLResource(url=url)
    if name == "s3":
        if resolved:
            plain = s3_from_env()
            return S3Resource(bucket=plain.bucket, prefix=plain.prefix)
        return S3Resource(
            bucket=dg.EnvVar("S3RS_S3_BUCKET"), prefix=os.environ.get("S3RS_S3_PREFIX", "s3rs")
        )
    if name == "spark":
        return SparkResource(
            spark_config=config_from_env(),
            # not known (None): assume one does, so `auto` keeps the JVM's full JIT
            jdbc_reads=tables is None or any(t.reader == "jdbc" for t in tables),
        )
    if name == "warehouse":
        if resolved:
            plain = warehouse_from_env()
            return WarehouseResource(url=plain.url, iam_role=plain.iam_role)
        return WarehouseResource(
            url=dg.EnvVar("S3RS_REDSHIFT_URL"),
            iam_role=os.environ.get("S3RS_REDSHIFT_IAM_ROLE") or None,
        )
    if name == "s3rs_io_manager":
        return S3RSIOManager(s3=s3 or _build("s3", resolved, None))
    raise ValueError(f"no resource {name!r}")


def resources_from_env(
    *,
    resolved: bool = False,
    names: Iterable[str] = NAMES,
    tables: Iterable[TableConfig] | None = None,
) -> dict[str, Any]:
    """The resources `names` (default: all the definitions bind), configured from the
    environment: secrets as `EnvVar`s, or with `resolved` their values now (ConfigError
    naming an unset variable, for the ones asked for only). `tables`: the tables the
    resources serve, when known (the Spark JVM's start-up tunings depend on their readers)."""
    out: dict[str, Any] = {}
    tables = None if tables is None else list(tables)
    for name in names:
        out[name] = _build(name, resolved, out.get("s3"), tables)
    return out
