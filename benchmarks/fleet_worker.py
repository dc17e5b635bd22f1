"""Plan the run a sensor requests for the first configured table, as the daemon does, and
print the `dagster api execute_run` arguments of its run worker (the fleet suite times that
worker from its start to its first step).

    python -m benchmarks.fleet_worker DAGSTER_HOME CODE_DIR

The environment names the table list (S3RS_TABLES); CODE_DIR is the run's code pointer's
working directory (the code the worker loads: this checkout, or another to compare).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import dagster as dg
from dagster._core.instance.ref import InstanceRef
from dagster._grpc.types import ExecuteRunArgs
from dagster_shared.serdes import serialize_value

from s3rs_assets.config import load_tables
from s3rs_assets.names import ASSET_JOB, asset_key, job_name, per_table_jobs
from s3rs_assets.partitions import partitions_def
from s3rs_assets.sensors.common import partition_request
from s3rs_assets_tests.daemon_runs import code_location, create_run


def main(home: str, code_dir: str) -> None:
    warnings.filterwarnings("ignore")
    tables = load_tables()
    table = tables[0]
    with dg.DagsterInstance.from_ref(InstanceRef.from_dir(home)) as instance:
        location = code_location(instance, Path(code_dir))
        req = partition_request(
            run_key="bench",
            job=job_name(table) if per_table_jobs(len(tables)) else ASSET_JOB,
            keys=[partitions_def(table).get_first_partition_key()],
            assets=[asset_key(table, "redshift_table")],
            tags={},
            cfg=table,
        )
        run = create_run(instance, location, req)
        args = ExecuteRunArgs(
            job_origin=run.job_code_origin, run_id=run.run_id, instance_ref=instance.get_ref()
        )
        print(serialize_value(args))


if __name__ == "__main__":
    main(*sys.argv[1:3])
