"""Stage 1: MySQL -> S3 parquet, read by Spark, checkpointed per chunk.

    run.py      BackupRun: a run over partitions — plans, batches, checkpoints
    scan.py     where a sync has backup work (index probes only) and closing empty stretches
    extract.py  the Spark tasks: read key ranges, write and verify parquet objects in S3

What s3rs asks MySQL (shape, safety bound, probes, chunk plans) is `source.py`, shared with
the load's checks and reconcile. Nothing here imports Dagster (`lint-imports`): the asset
in `assets.py` drives it.
"""

from typing import TYPE_CHECKING, Any

from s3rs_assets.backup.scan import Scan, close_empty, scan

if TYPE_CHECKING:
    from s3rs_assets.backup.run import BackupRun, PartitionRun, signature


def __getattr__(name: str) -> Any:
    """The run's names (with pyarrow, ~130 ms), imported on first use: planning
    (`work.prepare`: `scan`, `close_empty`) needs none of them."""
    if name in ("BackupRun", "PartitionRun", "signature"):
        from s3rs_assets.backup import run

        return getattr(run, name)
    raise AttributeError(name)


__all__ = ["BackupRun", "PartitionRun", "Scan", "close_empty", "scan", "signature"]
