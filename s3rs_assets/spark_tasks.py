"""The code Spark's Python workers run for the backup: read a sub-range (connectorx or the
JDBC rows Spark hands over), write it as one parquet object to S3 with its Content-MD5, and
return its manifest row; plus the warm-up task that imports all of it in a fresh worker.

Kept apart from `backup/extract.py` (the driver's side: planning, Spark jobs, checks), so a
worker imports only this module, pyarrow, connectorx, botocore and `s3rs_assets.types`:
a task function is pickled by reference to its module, and a worker imports that module
with everything it imports (extract.py's package pulls in the MySQL planning: pymysql,
cryptography, pydantic; resources.py pulls in Dagster).
"""

from __future__ import annotations

import base64
import gc
import hashlib
import io
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from s3rs_assets.errors import IntegrityError
from s3rs_assets.types import count_zero_dates, decimal_from_unscaled


def manifest_schema(cursor_date: bool = False) -> pa.Schema:
    """One manifest row per object written; the cursor range has the cursor's own type (a
    DATE cursor's is date32: a timestamp field refuses dates)."""
    cursor = pa.date32() if cursor_date else pa.timestamp("us")
    return pa.schema(
        [
            ("part", pa.int32()),
            ("key", pa.string()),
            ("rows", pa.int64()),
            ("bytes", pa.int64()),
            ("md5", pa.string()),
            ("cursor_min", cursor),
            ("cursor_max", cursor),
            ("zero_dates", pa.int64()),
        ]
    )


MANIFEST_SCHEMA = manifest_schema()
#: A column's dictionary stops growing past this many bytes and its later pages are PLAIN
#: (standard parquet, as parquet-mr writes past its own limit; Redshift COPY reads both): low-
#: cardinality columns keep their dictionary, near-unique ones (keys, amounts, timestamps)
#: stop paying for one. Measured on the bench table: encode -40 %, files -20 % vs 1 MiB.
DICTIONARY_PAGE_LIMIT = 65_536


@dataclass(frozen=True)
class WriteSpec:
    """Everything a Spark task needs to write its files; plain data, pickled to executors."""

    bucket: str
    schema_ipc: bytes  # target Arrow schema, serialized
    cursor: str
    s3: dict[str, Any]  # boto3 client kwargs incl. credentials: never logged
    keys: tuple[str, ...] = ()  # object key per sub-range (= per Spark partition for jdbc)
    queries: tuple[str, ...] = ()  # connectorx: the SELECT of each sub-range
    source_url: str = ""  # connectorx: mysql:// URL incl. password: never logged
    session_setup: tuple[str, ...] = ()  # connectorx: run first on its connection (clock.py)
    cursor_date: bool = False  # a DATE cursor: the manifest's cursor range is date32
    unscaled: tuple[str, ...] = ()  # connectorx: DECIMAL columns selected as v * 10^s
    date_columns: tuple[str, ...] = ()  # whose zero dates are read as NULL and counted


def s3_client(cfg: dict[str, Any]) -> Any:
    """This worker process's S3 client for `cfg` (`WriteSpec.s3`: endpoint, region, attempts,
    credentials), built once and reused by later tasks (Spark reuses its Python workers).

    botocore's own client on the shared S3 loader (`botocore_s3`), as the CLI's
    (`connections.s3_client`): boto3 and s3transfer (managed transfers a task does not use)
    are not imported, and the parsed S3 model is read once per worker, not per task.
    Standard-mode retries; the Content-MD5 each upload sends is the task's own
    (`upload_parquet`). Clients are thread-safe."""
    key = tuple(sorted(cfg.items()))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            from botocore.config import Config

            from s3rs_assets.botocore_s3 import s3_session

            kw = dict(cfg)
            attempts = kw.pop("max_attempts", 6)
            client = s3_session().create_client(
                "s3", config=Config(retries={"mode": "standard", "max_attempts": attempts}),
                **kw,
            )
            if len(_CLIENTS) >= _CLIENTS_MAX:  # rotated credentials (a long-lived server)
                _CLIENTS.clear()
            _CLIENTS[key] = client
        return client


#: per worker process, keyed by the whole config (credentials included: never logged)
_CLIENTS: dict[tuple[Any, ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()
_CLIENTS_MAX = 8
#: the name extract.py, reconcile and benchmarks knew it by
_client = s3_client


#: the worker processes whose heap was settled after their first object
_SETTLED: set[int] = set()


def settle_heap() -> None:
    """Move everything alive in this worker into the collector's permanent generation.

    PySpark's daemon runs a full `gc.collect()` after every task of a reused worker, and a
    full collection walks the whole heap: pyarrow, pandas, botocore's S3 model, connectorx,
    the S3 client. Measured with Spark warm: ~50 ms CPU per task, ~0.1 CPU-s per 2-task
    chunk job, 1 CPU-s of a 1M-row backup (benchmarks/rdd_job_cost.py); frozen, the
    collection after a task walks only what that task left. Frozen objects are still freed
    by reference counting; only cycles among them are never collected, and they are the
    imported modules and cached clients a worker keeps anyway. Not done where Spark does
    not reuse workers (each task a fresh process: no collection after it to save)."""
    if os.environ.get("SPARK_REUSE_WORKER") != "1":
        return
    gc.collect()
    gc.freeze()


def encode_parquet(table: pa.Table) -> bytes:
    """`table` as one parquet file (snappy, 128 Ki-row groups, dictionaries up to
    DICTIONARY_PAGE_LIMIT)."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(
        table,
        buf,
        compression="snappy",
        row_group_size=131_072,
        dictionary_pagesize_limit=DICTIONARY_PAGE_LIMIT,
    )
    return buf.getvalue()


def upload_parquet(client: Any, bucket: str, key: str, table: pa.Table) -> tuple[int, str]:
    """Write `table` as one parquet object and upload it with its Content-MD5 (S3 rejects a
    corrupted body); returns (bytes, md5) once the ETag confirms what S3 stored."""
    body = encode_parquet(table)
    digest = hashlib.md5(body)  # noqa: S324 - the S3 ETag of a single-part upload
    resp = client.put_object(
        Bucket=bucket,
        Key=key,
        Body=body,
        ContentMD5=base64.b64encode(digest.digest()).decode(),
        ContentType="application/vnd.apache.parquet",
    )
    if resp["ETag"].strip('"') != digest.hexdigest():
        raise IntegrityError(f"S3 ETag of {key} does not match the MD5 of the file written")
    return len(body), digest.hexdigest()


def store_object(
    table: pa.Table, key: str, part: int, spec: WriteSpec, client: Any
) -> pa.RecordBatch:
    """Cast to the table's Arrow schema, write one parquet object, upload it with its
    Content-MD5 (S3 rejects a corrupted body) and return its manifest row."""
    import pyarrow.compute as pc

    schema = pa.ipc.read_schema(pa.py_buffer(spec.schema_ipc))
    zero_dates = count_zero_dates(table, spec.date_columns)  # its column is left out
    # cast() refuses lossy conversions (e.g. a decimal that would need rounding)
    columns = []
    for f in schema:
        try:
            columns.append(table.column(f.name).cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise IntegrityError(
                f"{key}: column {f.name!r} read as {table.column(f.name).type} does not convert "
                f"exactly to {f.type}: {e}"
            ) from None
    table = pa.table(columns, schema=schema)
    size, md5 = upload_parquet(client, spec.bucket, key, table)
    cursor = table.column(spec.cursor)
    row = pa.RecordBatch.from_pydict(
        {
            "part": [part],
            "key": [key],
            "rows": [table.num_rows],
            "bytes": [size],
            "md5": [md5],
            "cursor_min": [pc.min(cursor).as_py()],
            "cursor_max": [pc.max(cursor).as_py()],
            "zero_dates": [zero_dates],
        },
        schema=manifest_schema(spec.cursor_date),
    )
    if os.getpid() not in _SETTLED:  # this worker's first object: what a task imports and
        _SETTLED.add(os.getpid())  # builds (clients, connectorx, parquet) is in its heap now
        settle_heap()
    return row


def jdbc_task(spec: WriteSpec) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow over the JDBC read: one Spark partition = one sub-range = one object."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        batches = [b for b in batches if b.num_rows]
        if batches:
            table = pa.Table.from_batches(batches)
            yield store_object(table, spec.keys[part], part, spec, s3_client(spec.s3))

    return run


def read_items(spec: WriteSpec, parts: Iterator[int]) -> Iterator[pa.RecordBatch]:
    """Each sub-range `part` read with connectorx (Rust, straight to Arrow) and written as
    one object; its manifest row (nothing for a sub-range that holds no row any more)."""
    import connectorx as cx

    schema = pa.ipc.read_schema(pa.py_buffer(spec.schema_ipc))
    client = None
    for part in parts:
        table = cx.read_sql(
            spec.source_url,
            spec.queries[part],
            return_type="arrow",
            pre_execution_query=list(spec.session_setup) or None,
        )
        if table.num_rows:
            for name in spec.unscaled:
                i = table.schema.get_field_index(name)
                values = decimal_from_unscaled(table.column(i), schema.field(name).type)
                table = table.set_column(i, name, values)
            client = client or s3_client(spec.s3)
            yield store_object(table, spec.keys[part], part, spec, client)


def connectorx_task(
    spec: WriteSpec,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow over `spark.range(n)` (Spark Connect): each id is a sub-range."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ids = (part for batch in batches for part in batch.column("id").to_pylist())
        yield from read_items(spec, ids)

    return run


def connectorx_rows(spec: WriteSpec) -> Callable[[Iterator[int]], Iterator[dict[str, Any]]]:
    """mapPartitions over `parallelize(range(n))` (a classic session): each int is a
    sub-range; its manifest row as a dict (the same keys and values as `connectorx_task`'s
    rows, which Spark hands back as Rows)."""

    def run(parts: Iterator[int]) -> Iterator[dict[str, Any]]:
        for row in read_items(spec, parts):
            yield row.to_pylist()[0]

    return run


def preload() -> None:
    """Import what a chunk task imports and parse botocore's S3 model, nothing more: run
    in PySpark's worker daemon before it forks the workers (`spark_daemon`), so each
    worker starts with it instead of importing it again (~1.2 CPU-s a worker, both at once
    on the cold command's critical path). Starts no thread and computes nothing, so the
    forked workers inherit no thread pool; `warm` does the rest in each worker."""
    import connectorx  # noqa: F401
    import pandas  # noqa: F401 - pyarrow converts datetimes through it (`warm`)
    import pyarrow.compute  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    from s3rs_assets.botocore_s3 import s3_loader, s3_session

    s3_loader(s3_session()).load_service_model("s3", "service-2")


def warm(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The warm-up job's task (`spark_session.warm_up`): do in a fresh Python worker what a
    chunk task does first, short of reading and uploading: import this module, connectorx,
    botocore with its S3 model, encode a one-row parquet file and build a manifest row
    (pyarrow converts datetimes through pandas, ~330 modules imported on first use).
    Pickled by reference: the worker imports this module alone, not the Dagster layer."""
    import datetime

    import connectorx  # noqa: F401
    import pyarrow.compute as pc

    from s3rs_assets.botocore_s3 import s3_loader, s3_session

    s3_loader(s3_session()).load_service_model("s3", "service-2")
    ts = pa.array([datetime.datetime(2000, 1, 1)], pa.timestamp("us"))
    body = encode_parquet(pa.table({"ts": ts}))
    pa.RecordBatch.from_pydict(
        {"part": [0], "key": ["warm-up"], "rows": [1], "bytes": [len(body)],
         "md5": [hashlib.md5(body).hexdigest()],  # noqa: S324 - as upload_parquet
         "cursor_min": [pc.min(ts).as_py()], "cursor_max": [pc.max(ts).as_py()],
         "zero_dates": [0]},
        schema=MANIFEST_SCHEMA,
    )
    settle_heap()  # the imports above stay out of the collection after every later task
    yield from batches


def warm_rows(parts: Iterator[int]) -> Iterator[int]:
    """`warm` as an RDD task (mapPartitions over `parallelize(range(cores))`): a first RDD
    job costs a fresh JVM ~1.2 CPU-s against ~4 for a first mapInArrow job (query planning,
    code generation, their JIT), and the backup's connectorx chunks are RDD jobs on a
    classic session (`extract.Extractor.read`). Run it with `spark_pools.same_workers_as_sql`
    so a JDBC read's mapInArrow tasks find the same warmed workers."""
    for _ in warm(iter(())):
        pass
    yield from parts

