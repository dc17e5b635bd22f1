"""Stage 1's Spark side: read sub-ranges of the (cursor, pk) keyset and write parquet to S3.

`Extractor.read(items)` runs one Spark job for a batch of items (sub-ranges of one or more
partitions, planned by `backup/run.py`). Each item is read by a Spark task (connectorx inside
the task, or Spark's JDBC source with one predicate per item) and written as one parquet
object straight to S3 (pyarrow + botocore, Content-MD5 checked by S3; the task code is
`spark_tasks.py`, which is all a Python worker imports), under a key that
depends only on (table, partition, sub-range start): a re-read item overwrites its own
object instead of adding a new one. The driver then checks every object (size and ETag ==
MD5 of what the task wrote) before the caller may checkpoint past it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Any

from s3rs_assets.clock import names_utc
from s3rs_assets.cursor import SubRange, position_token
from s3rs_assets.errors import ConfigError, IntegrityError
from s3rs_assets.source import SourceTable
from s3rs_assets.spark_pools import classic_context, same_workers_as_sql  # noqa: F401 (tests)
from s3rs_assets.spark_tasks import (  # noqa: F401 (re-exported: the task side)
    DICTIONARY_PAGE_LIMIT,
    MANIFEST_SCHEMA,
    WriteSpec,
    _client,
    connectorx_rows,
    connectorx_task,
    jdbc_task,
    manifest_schema,
    store_object,
    upload_parquet,
)
from s3rs_assets.types import (
    arrow_schema,
    reads_unscaled,
)
from s3rs_assets.watermark import FileEntry, Position

FETCH_SIZE = 10_000
#: How a Spark task reads its sub-range: connectorx (Rust, to Arrow) or Spark's JDBC source.
READERS = ("connectorx", "jdbc")


@dataclass(frozen=True)
class Item:
    """One sub-range of one partition: read by one Spark task (or part of one), written as
    one object under that partition's prefix."""

    partition_key: str
    rows: SubRange


class Extractor:
    """Reads batches of sub-ranges of one table with Spark and writes them to S3."""

    def __init__(
        self,
        *,
        spark: Any,
        mysql: Any,
        s3: Any,
        src: SourceTable,
        table_name: str,
        reader: str = "connectorx",
        parallelism: int = 2,
        spark_pool: str | None = None,
    ):
        if reader not in READERS:
            raise ConfigError(f"unknown reader {reader!r}: use one of {', '.join(READERS)}")
        self.reader = reader
        self.spark = spark
        self.mysql = mysql
        self.s3 = s3
        self.src = src
        self.table_name = table_name
        self.parallelism = parallelism
        self.spark_pool = spark_pool
        self.schema = arrow_schema(src.columns)
        if reader == "jdbc" and any(c.data_type in ("datetime", "timestamp") for c in src.columns):
            # the session may have changed zone since it was made (shared, Spark Connect)
            check_utc(spark, f"{table_name}: cannot read its DATETIME/TIMESTAMP columns "
                      "through Spark JDBC")
        #: zero dates (and zero-in-date values) read as NULL so far: reported by the run
        self.zero_dates = 0
        if reader == "jdbc":
            # Spark pads CHAR(n), ENUM and SET values (the driver reports them as CHAR) to
            # n characters when reading; MySQL returns them unpadded.
            spark.conf.set("spark.sql.readSideCharPadding", "false")

    def object_key(self, partition_key: str, start: Position) -> str:
        return self.s3.layout.data_object(
            self.src.schema, self.src.table, partition_key, position_token(start)
        )

    def use_pool(self) -> None:
        """Run this thread's Spark jobs in the table's own FAIR scheduler pool (tables
        synced side by side share one session; the caller names it, `names.pool_name`). A
        Spark Connect session has no local properties: its server schedules."""
        if self.spark_pool is None:
            return
        try:
            sc = self.spark.sparkContext
        except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext on the client
            return
        sc.setLocalProperty("spark.scheduler.pool", self.spark_pool)

    def read(self, items: list[Item]) -> list[FileEntry | None]:
        """One Spark job for every item; returns each item's verified file (None when the
        item held no row any more: it changed between planning and reading)."""
        self.use_pool()
        spec = WriteSpec(
            bucket=self.s3.bucket,
            schema_ipc=self.schema.serialize().to_pybytes(),
            cursor=self.src.cursor,
            s3=self.s3.task_config(),
            keys=tuple(self.object_key(i.partition_key, i.rows.start) for i in items),
            cursor_date=self.src.cursor_is_date,
            date_columns=tuple(self.src.zero_date_columns()),
        )
        if self.reader == "connectorx":
            spec = replace(
                spec,
                queries=tuple(connectorx_query(self.src, i.rows) for i in items),
                source_url=self.mysql.connectorx_url(),
                session_setup=tuple(self.mysql.session_setup()),
                unscaled=tuple(c.name for c in self.src.columns if reads_unscaled(c)),
            )
            # a task reads several small items with one S3 client when there are many
            slices = max(1, min(len(items), self.parallelism))
            sc = classic_context(self.spark)
            if sc is not None:
                # an RDD job: no query to analyse, plan and code-generate, no Arrow round
                # trip of the ids; about a third of a DataFrame job's JVM CPU per chunk.
                # Its tasks run in the same Python workers as the warm-up's.
                same_workers_as_sql(self.spark, sc)
                ids = sc.parallelize(range(len(items)), slices)
                manifest = ids.mapPartitions(connectorx_rows(spec)).collect()
            else:  # Spark Connect: DataFrames only
                ranges = self.spark.range(0, len(items), 1, slices)
                out = _spark_manifest_schema(spec.cursor_date)
                manifest = ranges.mapInArrow(connectorx_task(spec), out).collect()
        else:
            props = dict(self.mysql.jdbc_properties())
            props["fetchsize"] = str(FETCH_SIZE)
            predicates = [i.rows.predicate(self.src.keys) for i in items]
            df = self.spark.read.jdbc(
                self.mysql.jdbc_url(), jdbc_subquery(self.src), predicates=predicates,
                properties=props,
            )
            out = _spark_manifest_schema(spec.cursor_date)
            manifest = df.mapInArrow(jdbc_task(spec), out).collect()
        files: list[FileEntry | None] = [None] * len(items)
        for r in manifest:
            files[r["part"]] = FileEntry(
                key=r["key"],
                rows=r["rows"],
                bytes=r["bytes"],
                md5=r["md5"],
                cursor_min=r["cursor_min"],
                cursor_max=r["cursor_max"],
            )
            self.zero_dates += r["zero_dates"]
        self.verify([f for f in files if f is not None])
        return files

    def verify(self, files: list[FileEntry]) -> None:
        """Independent check from the driver: each object is there with the size and MD5
        its task reported, before the cursor may move past it (HEADs in parallel)."""
        client = self.s3.client()

        def check(f: FileEntry) -> None:
            head = client.head_object(Bucket=self.s3.bucket, Key=f.key)
            if head["ContentLength"] != f.bytes or head["ETag"].strip('"') != f.md5:
                raise IntegrityError(
                    f"{f.key}: S3 has {head['ContentLength']} bytes / ETag {head['ETag']}, "
                    f"the task wrote {f.bytes} bytes / MD5 {f.md5}"
                )

        if len(files) <= 1:
            for f in files:
                check(f)
            return
        with ThreadPoolExecutor(max_workers=min(8, len(files))) as pool:
            list(pool.map(check, files))


def connectorx_query(src: SourceTable, rows: SubRange) -> str:
    """A connectorx task's query of one sub-range (`SourceTable.read_from_for`)."""
    return (f"SELECT {src.select_list('connectorx')} FROM {src.read_from_for(rows)} "
            f"WHERE {rows.predicate(src.keys)}")


def jdbc_subquery(src: SourceTable) -> str:
    """The JDBC reader's table: Spark adds each sub-range's predicate around it (`SELECT ...
    FROM (this) WHERE predicate`); MariaDB merges the derived table into that query, and
    the hint inside (`SourceTable.read_from`) holds the merged read to the cursor index."""
    return f"(SELECT {src.select_list()} FROM {src.read_from}) AS s3rs_src"


def session_time_zones(session: Any) -> tuple[str | None, str | None]:
    """(spark.sql.session.timeZone, the driver JVM's default zone). The JVM's is None where
    it cannot be seen (Spark Connect: the client has no JVM)."""
    tz = session.conf.get("spark.sql.session.timeZone", None)
    jvm_tz = None
    with suppress(Exception):  # Spark Connect sessions have no sparkContext
        jvm_tz = str(session.sparkContext._jvm.java.util.TimeZone.getDefault().getID())
    return tz, jvm_tz


def check_utc(session: Any, why: str = "") -> None:
    """Refuse a session whose SQL time zone (or, where visible, its JVM's default zone) is
    not UTC: JDBC reads would shift every DATETIME by that zone's offset. Checked before
    every JDBC read of a table with DATETIME/TIMESTAMP columns (`why` names it), not once
    per session: a session that already existed, a Spark Connect server, or code sharing
    the session may have set another zone since."""
    tz, jvm_tz = session_time_zones(session)
    problems = []
    if not names_utc(tz):
        problems.append(f"spark.sql.session.timeZone is {tz!r}")
    if jvm_tz is not None and not names_utc(jvm_tz):
        problems.append(f"the JVM's default time zone (user.timezone) is {jvm_tz!r}")
    if problems:
        raise ConfigError(
            f"{why or 'the SparkSession'}: {' and '.join(problems)}, not UTC: Spark's JDBC "
            "reader would shift every DATETIME by that zone's offset. Set "
            "spark.sql.session.timeZone=UTC (spark.conf.set, or --conf on the Spark "
            "Connect server) and -Duser.timezone=UTC in spark.driver.extraJavaOptions and "
            "spark.executor.extraJavaOptions, or use reader: connectorx for this table"
        )


def _spark_manifest_schema(cursor_date: bool) -> Any:
    """`manifest_schema` as Spark types (DATE cursors: DateType)."""
    from pyspark.sql.types import (
        DateType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
    )

    cursor = DateType() if cursor_date else TimestampNTZType()
    return StructType(
        [
            StructField("part", IntegerType()),
            StructField("key", StringType()),
            StructField("rows", LongType()),
            StructField("bytes", LongType()),
            StructField("md5", StringType()),
            StructField("cursor_min", cursor),
            StructField("cursor_max", cursor),
            StructField("zero_dates", LongType()),
        ]
    )
