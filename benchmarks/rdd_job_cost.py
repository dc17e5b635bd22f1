"""What one empty RDD job of the backup's shape costs each process, with Spark warm: the
JVM, the Python workers and the driver, per job (no row read: the orchestration alone),
against the JVM's idle CPU over the same time. Variants: tasks per job, the spec's size.

    python -m benchmarks.rdd_job_cost --jobs 20
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator
from typing import Any

from benchmarks.decimal_turns import Sampler


def noop(spec: bytes) -> Any:
    def run(parts: Iterator[int]) -> Iterator[dict[str, Any]]:
        for p in parts:
            yield {"part": p, "n": len(spec)}
    return run


def freeze(parts: Iterator[int]) -> Iterator[int]:
    import gc

    gc.collect()
    gc.freeze()
    yield from parts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--idle", type=float, default=4.0)
    args = ap.parse_args()
    os.environ.setdefault("S3RS_SPARK_MASTER", "local[2]")
    from benchmarks.stages import spark_resource, stop_spark, wait_warm_up
    from s3rs_assets.spark_pools import same_workers_as_sql

    res = spark_resource()
    session = res.session()
    wait_warm_up()
    sc = session.sparkContext
    s = Sampler(0.05, None)
    s.start()
    time.sleep(1.0)

    def window(label: str, fn: Any, n: int) -> None:
        t0 = time.perf_counter()
        c0 = time.process_time()
        fn()
        t1 = time.perf_counter()
        c1 = time.process_time()
        time.sleep(0.2)
        cpu = s.between(t0, t1)
        per = {k: round(v / n, 4) for k, v in cpu.items() if k != "machine_busy"}
        print(f"{label}: wall {(t1 - t0) / n:.4f} s/job, driver process_time "
              f"{(c1 - c0) / n:.4f}, per job {per}", flush=True)

    window("idle (per second)", lambda: time.sleep(args.idle), int(args.idle))
    variants = [(2, 3000), (1, 3000), (2, 30000), ("freeze", 0), (2, 3000)]
    for slices, size in variants:
        if slices == "freeze":  # gc.freeze() in each worker: its daemon's gc.collect()
            # after every task then walks only what later tasks left
            sc.parallelize(range(2), 2).mapPartitions(freeze).collect()
            print("workers' heaps frozen", flush=True)
            continue
        spec = os.urandom(size)

        def jobs(slices: int = slices, spec: bytes = spec) -> None:
            for _ in range(args.jobs):
                same_workers_as_sql(session, sc)
                sc.parallelize(range(2), slices).mapPartitions(noop(spec)).collect()

        window(f"{slices} task(s), spec {size} B", jobs, args.jobs)
    s.end()
    stop_spark(res, session)


if __name__ == "__main__":
    main()
