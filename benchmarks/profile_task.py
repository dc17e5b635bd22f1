# ruff: noqa: B023 - every lambda here is called at once, inside its own loop turn
"""Where one backup task's time goes, outside Spark: the work `extract.connectorx_task` does
for one sub-range, step by step (connectorx read, unscaled decimals, cast, parquet encode,
MD5, PUT), wall and this process's CPU per step, averaged over a few sub-ranges.

    S3RS_BENCH_SCHEMA=... python -m benchmarks.profile_task --table t --rows 50000 --repeat 4

The table must exist (a core suite run seeds it); moto is started as the benchmark does.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import time
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.services import SCHEMA, bucket, mysql_base, s3_endpoint, url_text
from s3rs_assets.backup.extract import DICTIONARY_PAGE_LIMIT, _client
from s3rs_assets.config import TableConfig
from s3rs_assets.cursor import Position
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.source import describe, plan_chunk
from s3rs_assets.types import arrow_schema, decimal_from_unscaled, reads_unscaled


class Steps:
    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.order: list[str] = []

    def time(self, name: str, fn: Any) -> Any:
        if name not in self.order:
            self.order.append(name)
        w, c = time.perf_counter(), time.process_time()
        out = fn()
        self.wall[name] += time.perf_counter() - w
        self.cpu[name] += time.process_time() - c
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", default="t")
    ap.add_argument("--rows", type=int, default=50_000, help="rows per sub-range")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--compression", default="snappy")
    ap.add_argument("--day", default="2025-01-02",
                    help="the day read (the decimal suite's table: yesterday)")
    ap.add_argument("--protocol", default="", help="connectorx cxprotocol (binary, text)")
    args = ap.parse_args()
    u = mysql_base()
    mysql = MySQLResource(url=url_text(u, "mysql", SCHEMA))
    day = datetime.fromisoformat(args.day)
    cfg = TableConfig.from_dict({"name": f"{SCHEMA}.{args.table}",
                                 "start": f"{day - timedelta(days=1):%Y-%m-%d}",
                                 "primary_key": ["id"]})
    with mysql.connection() as conn:
        src = describe(conn, cfg)
        plan = plan_chunk(conn, src, Position(c=day, pk=None),
                          day + timedelta(days=1), args.rows * args.repeat, args.repeat)
    assert plan is not None
    schema = arrow_schema(src.columns)
    select = f"SELECT {src.select_list('connectorx')} FROM {src.qualified} WHERE "
    plain = f"SELECT * FROM {src.qualified} WHERE "
    unscaled = [c.name for c in src.columns if reads_unscaled(c)]
    import connectorx as cx

    st = Steps()
    url = mysql.connectorx_url() + (f"?cxprotocol={args.protocol}" if args.protocol else "")
    nbytes = 0
    with s3_endpoint(), bucket() as name:
        s3 = S3Resource(bucket=name, prefix="p")
        client = _client(s3.task_config())
        for i, r in enumerate(plan.ranges):
            pred = r.predicate(src.keys)
            table = st.time("connectorx read (s3rs select list)", lambda: cx.read_sql(
                url, select + pred, return_type="arrow",
                pre_execution_query=list(mysql.session_setup())))
            st.time("mariadb CLI, same range, SELECT * (floor)", lambda: _cli(u, plain + pred))
            for n in unscaled:
                j = table.schema.get_field_index(n)
                table = st.time("unscaled -> decimal128", lambda j=j, n=n: table.set_column(
                    j, n, decimal_from_unscaled(table.column(j), schema.field(n).type)))
            table = st.time("cast to the Arrow schema", lambda: pa.table(
                [table.column(f.name).cast(f.type) for f in schema], schema=schema))
            buf = io.BytesIO()
            st.time(f"parquet write ({args.compression})", lambda: pq.write_table(
                table, buf, compression=args.compression, row_group_size=131_072,
                dictionary_pagesize_limit=DICTIONARY_PAGE_LIMIT))
            body = buf.getvalue()
            nbytes += len(body)
            digest = st.time("md5", lambda: hashlib.md5(body))  # noqa: S324
            st.time("put_object (moto)", lambda: client.put_object(
                Bucket=name, Key=f"p/{i}.parquet", Body=body,
                ContentMD5=base64.b64encode(digest.digest()).decode()))
    n = len(plan.ranges)
    print(f"{n} sub-ranges of ~{plan.rows // n:,} rows, {nbytes / n / 1e6:.2f} MB parquet each")
    print(f"{'step':45} {'wall s':>8} {'cpu s':>8}  (per sub-range)")
    for k in st.order:
        print(f"{k:45} {st.wall[k] / n:8.3f} {st.cpu[k] / n:8.3f}")


def _cli(u: Any, sql: str) -> None:
    import subprocess

    from benchmarks.services import cli_env, mysql_cli_args

    subprocess.run(mysql_cli_args(u, sql), stdout=subprocess.DEVNULL, env=cli_env(mysql=u),
                   check=True)


if __name__ == "__main__":
    main()
