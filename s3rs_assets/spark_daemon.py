"""PySpark's Python worker daemon (`spark.python.daemon.module`, set for a local master by
`spark_session.spark_defaults`) with what every s3rs task imports loaded before it forks.

Spark starts this daemon at a session's first Python task (the warm-up job,
`spark_session.warm_up`) and forks one worker per task slot from it. Stock, each fork then
imports pyarrow, pandas, connectorx and botocore's S3 model on its own (~1.2 CPU-s a
worker, all at once, while the cold `s3rs sync`'s main thread sets up Dagster); loaded here
once, the workers share it copy-on-write, and the collector's permanent generation keeps
their collections short (`spark_tasks.settle_heap`). A failed preload is reported on
stderr and the daemon starts anyway: the workers then import as before.
"""

from __future__ import annotations

import gc
import sys


def preload() -> None:
    """`spark_tasks.preload`, never raising; then freeze what it left (shared by forks)."""
    try:
        from s3rs_assets.spark_tasks import preload as load

        load()
    except Exception as e:  # noqa: BLE001 - the daemon must start: workers import themselves
        print(f"s3rs: Python worker preload failed ({type(e).__name__}: {e}); workers "
              "import on their own", file=sys.stderr)
    gc.collect()
    gc.freeze()


if __name__ == "__main__":
    preload()
    from pyspark import daemon

    daemon.manager()
