"""What any fresh `s3rs sync` process with a run costs before s3rs does anything of its own
(issue 19, "a 1,000-row increment <= 1.5 s"): each step in a fresh interpreter, in turns,
wall and CPU seconds (the child's user + system).

    python -m benchmarks.increment_floor [TURNS]

Steps: `python` alone; `import dagster`; everything an increment's process imports (the sync
command, one table's job with dagster-aws and dagster-pyspark, the progress monitor, the
Spark Connect client with pandas, pyarrow and gRPC); that plus the Dagster instance opened
(a fresh DAGSTER_HOME with the repository's dagster.yaml); that plus one run of a trivial
one-asset job on it (`execute_job`, in-process executor: SQLite run, event log and shard).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import children_cpu

REPO = Path(__file__).resolve().parents[1]
IMPORTS = (
    "import s3rs_assets.cli.sync, s3rs_assets.table_job, s3rs_assets.progress, "
    "pyspark.sql.connect.session"
)
RUN = (
    "; import dagster as dg; i = dg.DagsterInstance.get(); "
    "dg.execute_job(dg.build_reconstructable_job('benchmarks.increment_floor', 'floor_job'),"
    " instance=i)"
)
STEPS = {
    "python": "pass",
    "import dagster": "import dagster",
    "increment's imports": IMPORTS,
    "+ instance": IMPORTS + "; import dagster as dg; dg.DagsterInstance.get()",
    "+ one trivial run": IMPORTS + RUN,
}


def floor_job():  # noqa: ANN201 - dagster is imported by the steps only
    """A one-asset job that does nothing: Dagster's own cost of a run."""
    import dagster as dg

    @dg.asset
    def one() -> int:
        return 1

    return dg.Definitions(
        assets=[one],
        jobs=[dg.define_asset_job("floor", selection=[one])],
        executor=dg.in_process_executor,
    ).resolve_job_def("floor")


def main(turns: int) -> None:
    home = tempfile.mkdtemp(prefix="s3rs-floor-home-")
    shutil.copy(REPO / "dagster.yaml", home)
    env = dict(os.environ, DAGSTER_HOME=home, PYTHONPATH=str(REPO))
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in STEPS}
    loads = [os.getloadavg()]
    try:
        for _ in range(turns):
            for key, code in STEPS.items():
                c0, t0 = children_cpu(), time.perf_counter()
                subprocess.run(
                    [sys.executable, "-c", code], env=env, check=True, cwd=REPO,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                got[key].append((time.perf_counter() - t0, children_cpu() - c0))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    loads.append(os.getloadavg())
    print(f"load average {' -> '.join('/'.join(f'{x:.1f}' for x in la) for la in loads)}")
    for key, values in got.items():
        wall = [w for w, _ in values]
        cpu = [c for _, c in values]
        print(
            f"{key:30s} wall median {statistics.median(wall):.2f} s (min {min(wall):.2f}), "
            f"CPU median {statistics.median(cpu):.2f} s (min {min(cpu):.2f})"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
