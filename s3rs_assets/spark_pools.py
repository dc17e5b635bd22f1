"""Which Python workers a Spark job of the driver runs in (no Dagster: the backup stage
and the resources both use it).

Spark pools its Python workers per environment. Its SQL jobs (mapInArrow, UDFs) run with
SPARK_SIMPLIFIED_TRACEBACK set and RDD jobs without it, so an RDD job would start (and
import into) workers of its own. `same_workers_as_sql` gives RDD jobs the SQL jobs'
environment: the warm-up and every chunk then share the same warm workers. This relies on
Spark 4's internals; if a later Spark differs, rows stay the same and only start-up is
paid again (test_extract_rdd checks the process ids).
"""

from __future__ import annotations

from typing import Any


def classic_context(session: Any) -> Any:
    """The session's SparkContext, or None for a Spark Connect session (no RDDs there)."""
    try:
        return session.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext on the client
        return None


#: Set by Spark on the environment of its SQL Python workers (mapInArrow, UDFs) and not on
#: an RDD's: workers are pooled per environment, so an RDD job would start new ones.
SIMPLIFIED_TRACEBACK = "SPARK_SIMPLIFIED_TRACEBACK"


def same_workers_as_sql(session: Any, sc: Any) -> None:
    """Give RDD jobs the environment of the SQL jobs' Python workers, so they run in the
    workers the warm-up job (`spark_session.warm_up`) started and imported into
    rather than in fresh ones (about 0.7 CPU-s of imports each)."""
    conf = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"
    if str(session.conf.get(conf, "true")).lower() == "true":
        sc.environment.setdefault(SIMPLIFIED_TRACEBACK, "1")
