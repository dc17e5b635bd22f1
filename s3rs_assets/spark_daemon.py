"""PySpark's Python worker daemon (`spark.python.daemon.module`, set for a local master by
`spark_session.spark_defaults`) with what every s3rs task imports loaded before it forks.

Spark starts this daemon at a session's first Python task (the warm-up job,
`spark_session.warm_up`) and forks one worker per task slot from it. Stock, each fork then
imports pyarrow, pandas, connectorx and botocore's S3 model on its own (~1.2 CPU-s a
worker, all at once, while the cold `s3rs sync`'s main thread sets up Dagster); loaded here
once, the workers share it copy-on-write, and the collector's permanent generation keeps
their collections short (`spark_tasks.settle_heap`). A failed preload is reported on
stderr and the daemon starts anyway: the workers then import as before.

PySpark itself is imported from the installed package, not from the `pyspark.zip` Spark
puts first on the workers' path (`installed_pyspark`).
"""

from __future__ import annotations

import gc
import importlib.util
import sys
from pathlib import Path

ZIP = "pyspark.zip"


def installed_pyspark() -> str | None:
    """Import `pyspark` from the pip-installed package that holds the `pyspark.zip` on
    sys.path (`<package>/python/lib/pyspark.zip`): the same files, with their bytecode.

    Spark puts that zip first on its Python workers' path, and zipimport compiles every
    module it loads from a zip of sources: ~110 of them in the daemon (0.4 s), then
    `pyspark.worker` again in each forked worker, on the cold sync's critical path. A
    Spark distribution's zip (`$SPARK_HOME/python/lib`, no package around it) is left to
    Python. Returns the package directory it imported from, or None."""
    for entry in sys.path:
        zipped = Path(entry)
        package = zipped.parent.parent.parent
        if (zipped.name == ZIP and zipped.parent.name == "lib"
                and zipped.parent.parent.name == "python" and package.name == "pyspark"
                and (package / "__init__.py").is_file() and "pyspark" not in sys.modules):
            spec = importlib.util.spec_from_file_location(
                "pyspark", package / "__init__.py", submodule_search_locations=[str(package)]
            )
            if spec is None or spec.loader is None:
                return None
            module = importlib.util.module_from_spec(spec)
            sys.modules["pyspark"] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules["pyspark"]
                raise
            return str(package)
    return None


def preload() -> None:
    """`spark_tasks.preload`, never raising; then freeze what it left (shared by forks)."""
    try:
        installed_pyspark()
    except Exception as e:  # noqa: BLE001 - the zip on the path still serves
        print(f"s3rs: PySpark not imported from its package ({type(e).__name__}: {e}); "
              "workers import it from pyspark.zip", file=sys.stderr)
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
