"""Redshift's COPY step: `COPY ... FORMAT AS PARQUET MANIFEST` from S3, through a manifest
listing exactly the files to load.

Redshift reads the files itself; s3rs reads only each file's parquet footer, through
`pyarrow.fs.S3FileSystem` built with the S3 resource's endpoint, region and credentials
(one HEAD, one ranged GET): its size and ETag (the md5 of a single-part upload) must match
the manifest entry, its row count too, and its column names decide how it is copied.
COPY maps parquet columns by position, so files are grouped by their column list: files
written before a source column was added go through a staging table of their own columns,
moved into the main one by name.

Manifests are written under `Layout.copy_manifest` with a name deterministic in the file
list (a retried load rewrites its own manifest).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from s3rs_assets.errors import ConfigError, IntegrityError
from s3rs_assets.load.sql import (
    create_stage_sql,
    drop_stage_sql,
    manifest,
    manifest_digest,
    redshift_copy_sql,
    stage_fill_sql,
)
from s3rs_assets.load.target import STAGE_TABLE, LoadTarget
from s3rs_assets.resources import S3Resource
from s3rs_assets.warehouse import WarehouseConnection, WarehouseResource
from s3rs_assets.watermark import FileEntry


def s3_filesystem(s3: S3Resource) -> pafs.S3FileSystem:
    """pyarrow's S3 client, seeing what the resource's boto3 clients see (same endpoint,
    region, credential chain and standard-mode retries)."""
    cfg = s3.task_config()
    endpoint = cfg.get("endpoint_url")
    return pafs.S3FileSystem(
        access_key=cfg.get("aws_access_key_id"),
        secret_key=cfg.get("aws_secret_access_key"),
        session_token=cfg.get("aws_session_token"),
        region=cfg["region_name"],
        endpoint_override=endpoint,
        scheme="http" if endpoint and endpoint.startswith("http://") else "https",
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=cfg["max_attempts"]),
    )


def file_columns(fs: pafs.FileSystem, bucket: str, f: FileEntry) -> list[str]:
    """The column names of a parquet object, from its footer; checks size, md5 (ETag of a
    single-part upload) and row count against the manifest entry."""
    where = f"s3://{bucket}/{f.key}"
    try:
        handle = fs.open_input_file(f"{bucket}/{f.key}")
    except FileNotFoundError:
        raise IntegrityError(
            f"{where} is missing, but a manifest lists it; nothing was loaded"
        ) from None
    with handle:
        size = handle.size()
        etag = handle.metadata().get("ETag", b"").decode().strip('"')
        if size != f.bytes or ("-" not in etag and etag and etag != f.md5):
            raise IntegrityError(
                f"{where}: {size} bytes, ETag {etag}, but its manifest says {f.bytes} bytes, "
                f"md5 {f.md5}; nothing was loaded"
            )
        meta = pq.ParquetFile(handle).metadata
    if meta.num_rows != f.rows:
        raise IntegrityError(
            f"{where}: {meta.num_rows} rows, but its manifest says {f.rows}; nothing was loaded"
        )
    return list(meta.schema.to_arrow_schema().names)


def manifest_key(
    s3: S3Resource, target: LoadTarget, partition_key: str, files: Sequence[FileEntry]
) -> str:
    return s3.layout.copy_manifest(
        target.schema, target.table, partition_key, manifest_digest(files)
    )


def copy_redshift(
    conn: WarehouseConnection,
    warehouse: WarehouseResource,
    s3: S3Resource,
    target: LoadTarget,
    partition_key: str,
    files: Sequence[FileEntry],
) -> None:
    """Fill the staging table from `files`, one COPY per column list."""
    if not warehouse.iam_role:
        raise ConfigError(
            "the warehouse is Redshift but no IAM role is configured (S3RS_REDSHIFT_IAM_ROLE): "
            "COPY needs one to read s3://" + s3.bucket
        )
    fs = s3_filesystem(s3)
    known = {c.name for c in target.columns}
    groups: dict[tuple[str, ...], list[FileEntry]] = {}
    for f in files:
        cols = tuple(file_columns(fs, s3.bucket, f))
        unknown = [c for c in cols if c not in known]
        if unknown or len(set(cols)) != len(cols):
            raise IntegrityError(
                f"s3://{s3.bucket}/{f.key}: columns {list(cols)} do not fit "
                f"{target.qualified}'s source columns"
            )
        groups.setdefault(cols, []).append(f)
    client = s3.client()
    for n, (cols, group) in enumerate(groups.items()):
        key = manifest_key(s3, target, partition_key, group)
        client.put_object(
            Bucket=s3.bucket,
            Key=key,
            Body=json.dumps(manifest(s3.bucket, group), indent=1).encode(),
            ContentType="application/json",
        )
        url = f"s3://{s3.bucket}/{key}"
        if list(cols) == target.column_names:
            conn.execute(redshift_copy_sql(url, warehouse.iam_role))
        else:
            side = f"{STAGE_TABLE}_{n}"
            conn.execute(create_stage_sql(target, "redshift", cols, name=side))
            conn.execute(redshift_copy_sql(url, warehouse.iam_role, table=side))
            conn.execute(stage_fill_sql(cols, side))
            conn.execute(drop_stage_sql(side))
