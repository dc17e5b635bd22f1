"""Stage 1: MySQL -> S3 parquet, read and written by Spark.

Per partition window [start, end) and per run:

1. The safety bound `upper` is taken once, on the MySQL clock, before any chunk is planned
   (source.safety_bound); nothing at or above it is read this run.
2. The next chunk is planned from the partition's cursor with an index-only query: its end
   is the (c, pk) of its N-th row, and the seams split it into `parallelism` disjoint
   sub-ranges (source.plan_chunk).
3. Spark reads the sub-ranges over JDBC, one predicate per task, and each task writes its
   rows as one parquet object straight to S3 (pyarrow + boto3, Content-MD5 checked by S3),
   under a key that depends only on (table, partition, sub-range start): a re-read chunk
   overwrites its own files instead of adding new ones.
4. The driver checks every object (size and ETag == MD5 of what the task wrote) and only
   then moves the partition's cursor to the chunk's end, compare-and-swap (checkpoint).

A crash anywhere loses at most the chunk in flight, which the next run re-reads. A
partition is `complete` once it has been read up to its window end and the bound was past
that end; re-materializing a complete partition reads its window again (a backfill).
"""

from __future__ import annotations

import base64
import hashlib
import io
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import pyarrow as pa

from s3rs_assets.cursor import ChunkPlan, position_token
from s3rs_assets.errors import ConfigError, IntegrityError, WatermarkConflict
from s3rs_assets.source import SourceTable, plan_chunk
from s3rs_assets.types import arrow_schema
from s3rs_assets.watermark import FileEntry, PartitionState, Position, WatermarkRecord, utcnow

MANIFEST_SCHEMA = pa.schema(
    [
        ("part", pa.int32()),
        ("key", pa.string()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
        ("md5", pa.string()),
        ("cursor_min", pa.timestamp("us")),
        ("cursor_max", pa.timestamp("us")),
    ]
)
FETCH_SIZE = 10_000
#: How a Spark task reads its sub-range: connectorx (Rust, to Arrow) or Spark's JDBC source.
READERS = ("connectorx", "jdbc")


@dataclass(frozen=True)
class WriteSpec:
    """Everything a Spark task needs to write its files; plain data, pickled to executors."""

    bucket: str
    schema_ipc: bytes  # target Arrow schema, serialized
    cursor: str
    s3: dict[str, Any]  # boto3 client kwargs incl. credentials: never logged
    keys: tuple[str, ...] = ()  # object key per sub-range (= per Spark partition for jdbc)
    predicates: tuple[str, ...] = ()  # connectorx: WHERE clause per sub-range
    source_url: str = ""  # connectorx: mysql:// URL incl. password: never logged
    select: str = ""  # connectorx: "SELECT ... FROM ... WHERE " to which a predicate is added


def _client(cfg: dict[str, Any]) -> Any:
    import boto3
    from botocore.config import Config

    kw = dict(cfg)
    attempts = kw.pop("max_attempts", 6)
    return boto3.client(
        "s3", config=Config(retries={"mode": "standard", "max_attempts": attempts}), **kw
    )


def store_object(
    table: pa.Table, key: str, part: int, spec: WriteSpec, client: Any
) -> pa.RecordBatch:
    """Cast to the table's Arrow schema, write one parquet object, upload it with its
    Content-MD5 (S3 rejects a corrupted body) and return its manifest row."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    schema = pa.ipc.read_schema(pa.py_buffer(spec.schema_ipc))
    # cast() refuses lossy conversions (e.g. a decimal that would need rounding)
    table = pa.table([table.column(f.name).cast(f.type) for f in schema], schema=schema)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="snappy", row_group_size=131_072)
    body = buf.getvalue()
    digest = hashlib.md5(body)
    resp = client.put_object(
        Bucket=spec.bucket,
        Key=key,
        Body=body,
        ContentMD5=base64.b64encode(digest.digest()).decode(),
        ContentType="application/vnd.apache.parquet",
    )
    if resp["ETag"].strip('"') != digest.hexdigest():
        raise IntegrityError(f"S3 ETag of {key} does not match the MD5 of the file written")
    cursor = table.column(spec.cursor)
    return pa.RecordBatch.from_pydict(
        {
            "part": [part],
            "key": [key],
            "rows": [table.num_rows],
            "bytes": [len(body)],
            "md5": [digest.hexdigest()],
            "cursor_min": [pc.min(cursor).as_py()],
            "cursor_max": [pc.max(cursor).as_py()],
        },
        schema=MANIFEST_SCHEMA,
    )


def jdbc_task(spec: WriteSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow over the JDBC read: one Spark partition = one sub-range = one object."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        batches = [b for b in batches if b.num_rows]
        if batches:
            table = pa.Table.from_batches(batches)
            yield store_object(table, spec.keys[part], part, spec, _client(spec.s3))

    return run


def connectorx_task(
    spec: WriteSpec,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow over `spark.range(n)`: each id is a sub-range, read with connectorx
    (Rust, straight to Arrow) and written as one object."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import connectorx as cx

        client = None
        for batch in batches:
            for part in batch.column("id").to_pylist():
                sql = spec.select + spec.predicates[part]
                table = cx.read_sql(spec.source_url, sql, return_type="arrow")
                if table.num_rows:
                    client = client or _client(spec.s3)
                    yield store_object(table, spec.keys[part], part, spec, client)

    return run


@dataclass
class ChunkResult:
    plan: ChunkPlan
    files: list[FileEntry]
    rows_read: int
    seconds: float


class Extractor:
    """Reads chunks of one table with Spark and writes them to S3."""

    def __init__(
        self,
        *,
        spark: Any,
        mysql: Any,
        s3: Any,
        src: SourceTable,
        table_name: str,
        reader: str = "connectorx",
    ):
        if reader not in READERS:
            raise ConfigError(f"unknown reader {reader!r}: use one of {', '.join(READERS)}")
        self.reader = reader
        self.spark = spark
        self.mysql = mysql
        self.s3 = s3
        self.src = src
        self.table_name = table_name
        self.schema = arrow_schema(src.columns)

    def data_prefix(self, partition_key: str) -> str:
        return self.s3.key("data", self.src.schema, self.src.table, partition_key)

    def object_key(self, partition_key: str, start: Position) -> str:
        return f"{self.data_prefix(partition_key)}/part-{position_token(start)}.parquet"

    def read_chunk(self, plan: ChunkPlan, partition_key: str) -> ChunkResult:
        t0 = time.monotonic()
        keys = self.src.keys
        predicates = [r.predicate(keys) for r in plan.ranges]
        object_keys = tuple(self.object_key(partition_key, r.start) for r in plan.ranges)
        spec = WriteSpec(
            bucket=self.s3.bucket,
            schema_ipc=self.schema.serialize().to_pybytes(),
            cursor=self.src.cursor,
            s3=self.s3.task_config(),
            keys=object_keys,
        )
        if self.reader == "connectorx":
            spec = replace(
                spec,
                predicates=tuple(predicates),
                source_url=self.mysql.connectorx_url(),
                select=(
                    f"SELECT {self.src.select_list('connectorx')} "
                    f"FROM {self.src.qualified} WHERE "
                ),
            )
            # spark.range, like the warm-up job, so the warmed Python workers are reused
            ranges = self.spark.range(0, len(predicates), 1, len(predicates))
            manifest = ranges.mapInArrow(connectorx_task(spec), _spark_manifest_schema()).collect()
        else:
            props = dict(self.mysql.jdbc_properties())
            props["fetchsize"] = str(FETCH_SIZE)
            subquery = f"(SELECT {self.src.select_list()} FROM {self.src.qualified}) AS s3rs_src"
            df = self.spark.read.jdbc(
                self.mysql.jdbc_url(), subquery, predicates=predicates, properties=props
            )
            manifest = df.mapInArrow(jdbc_task(spec), _spark_manifest_schema()).collect()
        files = [
            FileEntry(
                key=r["key"],
                rows=r["rows"],
                bytes=r["bytes"],
                md5=r["md5"],
                cursor_min=r["cursor_min"],
                cursor_max=r["cursor_max"],
            )
            for r in sorted(manifest, key=lambda r: r["part"])
        ]
        self.verify(files)
        rows = sum(f.rows for f in files)
        return ChunkResult(plan, files, rows, time.monotonic() - t0)

    def verify(self, files: list[FileEntry]) -> None:
        """Independent check from the driver: each object is there with the size and MD5
        its task reported, before the cursor may move past it."""
        client = self.s3.client()
        for f in files:
            head = client.head_object(Bucket=self.s3.bucket, Key=f.key)
            if head["ContentLength"] != f.bytes or head["ETag"].strip('"') != f.md5:
                raise IntegrityError(
                    f"{f.key}: S3 has {head['ContentLength']} bytes / ETag {head['ETag']}, "
                    f"the task wrote {f.bytes} bytes / MD5 {f.md5}"
                )


def _spark_manifest_schema() -> Any:
    from pyspark.sql.types import (
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
    )

    return StructType(
        [
            StructField("part", IntegerType()),
            StructField("key", StringType()),
            StructField("rows", LongType()),
            StructField("bytes", LongType()),
            StructField("md5", StringType()),
            StructField("cursor_min", TimestampNTZType()),
            StructField("cursor_max", TimestampNTZType()),
        ]
    )


@dataclass
class PartitionRun:
    """What one run did to one partition."""

    partition_key: str
    window_start: datetime
    window_end: datetime
    cursor_from: Position | None
    cursor_to: Position | None = None
    status: str = "partial"
    rows: int = 0
    files: list[FileEntry] = field(default_factory=list)
    chunks: int = 0
    seconds: float = 0.0
    recomputed: bool = False
    plan_seconds: float = 0.0
    read_seconds: float = 0.0
    checkpoint_seconds: float = 0.0


def backup_partition(
    ex: Extractor,
    store: Any,
    *,
    partition_key: str,
    window: tuple[datetime, datetime],
    upper: datetime,
    chunk_rows: int,
    parallelism: int,
    run_id: str | None,
    row_budget: int | None = None,
    source_now: datetime | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> PartitionRun:
    """Read one partition window from its cursor up to min(window end, upper)."""
    t0 = time.monotonic()
    start, end = window
    table = ex.table_name
    # reading validates the record against the source clock and recovers a lost primary
    record = store.read(table, now=source_now) or WatermarkRecord.new(table)
    prior = record.partitions.get(partition_key)
    recompute = prior is not None and prior.status == "complete"
    seen = _signature(prior)
    resume = prior is not None and not recompute and prior.cursor is not None
    pos = prior.cursor if resume else Position(c=start, pk=None)
    run = PartitionRun(
        partition_key, start, end, prior.cursor if prior else None, recomputed=recompute
    )
    hi = min(end, upper)
    first_write = True
    with ex.mysql.connect() as conn:
        while True:
            n = chunk_rows if row_budget is None else min(chunk_rows, row_budget - run.rows)
            if n <= 0:
                break
            t_plan = time.monotonic()
            plan = plan_chunk(conn, ex.src, pos, hi, n, parallelism)
            run.plan_seconds += time.monotonic() - t_plan
            if plan is None:
                break
            result = ex.read_chunk(plan, partition_key)
            run.read_seconds += result.seconds
            if result.rows_read != plan.rows:
                log(
                    f"{table} {partition_key}: chunk planned {plan.rows} rows, read "
                    f"{result.rows_read} (rows changed while reading; they are picked up by "
                    "their new cursor value)"
                )
            reset = first_write and (recompute or prior is None)

            def change(
                rec: WatermarkRecord,
                plan: ChunkPlan = plan,
                res: ChunkResult = result,
                reset: bool = reset,
                seen: tuple = seen,
            ) -> None:
                cur = rec.partitions.get(partition_key)
                if _signature(cur) != seen and _signature(cur) != (plan.end.key(), "partial"):
                    raise WatermarkConflict(
                        f"{table} partition {partition_key} was changed by another run "
                        f"(cursor now {cur.cursor if cur else None}); stopping without "
                        "overwriting its progress"
                    )
                if reset or cur is None:
                    cur = PartitionState(
                        window_start=start,
                        window_end=end,
                        recomputes=(prior.recomputes + 1) if recompute else 0,
                    )
                names = {f.key for f in res.files}
                cur.files = [f for f in cur.files if f.key not in names] + res.files
                cur.cursor = plan.end
                cur.status = "partial"
                cur.run_id = run_id
                cur.updated_at = utcnow()
                rec.partitions[partition_key] = cur

            t_ckpt = time.monotonic()
            store.update(table, change)
            run.checkpoint_seconds += time.monotonic() - t_ckpt
            seen = (plan.end.key(), "partial")
            first_write = False
            pos = plan.end
            run.rows += result.rows_read
            run.files.extend(result.files)
            run.chunks += 1
            log(
                f"{table} {partition_key}: chunk {run.chunks} {result.rows_read} rows in "
                f"{result.seconds:.1f}s (plan {run.plan_seconds:.2f}s, checkpoint "
                f"{run.checkpoint_seconds:.2f}s so far), cursor -> {plan.end}"
            )
            if plan.rows < n:
                break
    exhausted = row_budget is None or run.rows < row_budget
    status = "complete" if exhausted and upper >= end else "partial"

    def close(rec: WatermarkRecord) -> None:
        cur = rec.partitions.get(partition_key)
        # Another run that reached the same end and closed the partition the same way is
        # compatible (it merged); anything else is progress we must not overwrite.
        if _signature(cur) not in (seen, (seen[0], status)):
            raise WatermarkConflict(
                f"{table} partition {partition_key} was changed by another run "
                f"(cursor now {cur.cursor if cur else None}); not closing it"
            )
        if cur is None or (first_write and recompute):
            cur = PartitionState(
                window_start=start,
                window_end=end,
                recomputes=(prior.recomputes + 1) if recompute else 0,
            )
            if recompute and first_write:
                cur.cursor = None
        cur.status = status
        cur.run_id = run_id
        cur.updated_at = utcnow()
        rec.partitions[partition_key] = cur

    final = store.update(table, close).record.partitions[partition_key]
    run.status = final.status
    run.cursor_to = final.cursor
    run.seconds = time.monotonic() - t0
    return run


def _signature(state: PartitionState | None) -> tuple:
    """What identifies a partition's progress for compare-and-swap merging."""
    if state is None:
        return (None, None)
    return (state.cursor.key() if state.cursor else None, state.status)
