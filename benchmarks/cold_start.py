"""Cold Spark start-up, measured in one fresh process: getOrCreate, the resource's warm-up
(synchronous before issue 19's cut, in the background after), then a first "chunk" job
(`jdbc_task` over two rows, each task writing one parquet object to S3) run while the
driver would be planning. Prints wall times, the Python workers' CPU seconds and module
counts (counts are what to compare on a loaded machine).

    python benchmarks/cold_start.py ENDPOINT BUCKET [PLAN_SECONDS [sync]]
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def _workers_cpu(marker: bytes = b"pyspark.daemon") -> tuple[int, float]:
    """Processes of this driver running pyspark's daemon/workers (or the JVM: b"java")
    and their CPU seconds (user+system)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, list[str]] = {}
    cmds: dict[int, bytes] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmds[int(pid)] = f.read()
            with open(f"/proc/{pid}/stat") as f:
                stats[int(pid)] = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue

    def ours(pid: int) -> bool:  # a descendant of this driver (other sessions run Spark too)
        while pid > 1 and pid in stats:
            pid = int(stats[pid][1])
            if pid == os.getpid():
                return True
        return False

    n, cpu = 0, 0.0
    for pid, fields in stats.items():
        cmd = cmds.get(pid, b"")
        if (marker in cmd.split(b"\0")[0] if marker == b"java" else marker in cmd) and ours(pid):
            n += 1  # utime + stime + the exited children's (workers the daemon reaped)
            cpu += sum(int(x) for x in fields[11:15]) / tick
    return n, cpu


def _probe(batches: Any) -> Any:
    import sys as _sys

    import pyarrow as _pa

    for _ in batches:
        pass
    yield _pa.RecordBatch.from_pydict({
        "modules": [len(_sys.modules)],
        "dagster": ["dagster" in _sys.modules],
        "boto3": ["boto3" in _sys.modules],
        "pandas": ["pandas" in _sys.modules],
    })


def main() -> None:
    endpoint, bucket = sys.argv[1], sys.argv[2]
    plan = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    import pyarrow as pa

    from s3rs_assets.backup import extract
    from s3rs_assets.resources import SparkResource, spark_defaults

    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    res = SparkResource(spark_config=spark_defaults("local[2]"))
    if len(sys.argv) > 4 and sys.argv[4] == "sync":  # the warm-up waited for, as before
        from s3rs_assets.resources import get_spark, warm_up

        session = get_spark(res)
        warm_up(session)
    else:
        session = res.spark_session  # getOrCreate + warm-up (sync before, background after)
    out["session_s"] = round(time.perf_counter() - t0, 2)
    time.sleep(plan)  # the driver's planning (MySQL probes), if any
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us"))])
    spec = extract.WriteSpec(
        bucket=bucket,
        schema_ipc=schema.serialize().to_pybytes(),
        cursor="ts",
        s3={"endpoint_url": endpoint, "region_name": "us-east-1", "max_attempts": 3,
            "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
            "aws_session_token": None},
        keys=("cold/a.parquet", "cold/b.parquet"),
    )
    df = session.range(0, 2, numPartitions=2).selectExpr(
        "id", "timestamp'2026-01-01 00:00:00' as ts"
    )
    jvm0, w0 = _workers_cpu(b"java")[1], _workers_cpu()[1]
    t1 = time.perf_counter()
    manifest = ("part int, key string, rows long, bytes long, md5 string, "
                "cursor_min timestamp, cursor_max timestamp, zero_dates long")
    rows = df.mapInArrow(extract.jdbc_task(spec), manifest).collect()
    out["first_chunk_s"] = round(time.perf_counter() - t1, 2)
    out["total_s"] = round(time.perf_counter() - t0, 2)
    out["first_chunk_jvm_cpu_s"] = round(_workers_cpu(b"java")[1] - jvm0, 2)
    out["first_chunk_worker_cpu_s"] = round(_workers_cpu()[1] - w0, 2)
    t2 = time.perf_counter()
    df.mapInArrow(extract.jdbc_task(spec), manifest).collect()
    out["second_chunk_s"] = round(time.perf_counter() - t2, 2)
    assert len(rows) == 2, rows
    out["workers"], out["worker_cpu_s"] = _workers_cpu()
    probe = session.range(0, 2, numPartitions=2).mapInArrow(
        _probe, "modules long, dagster boolean, boto3 boolean, pandas boolean").collect()
    out["worker_modules"] = [r.modules for r in probe]
    out["dagster_in_worker"] = any(r.dagster for r in probe)
    out["boto3_in_worker"] = any(r.boto3 for r in probe)
    out["pandas_in_worker"] = any(r.pandas for r in probe)
    out["load"] = os.getloadavg()[0]
    print(json.dumps(out))
    session.stop()


if __name__ == "__main__":
    main()
