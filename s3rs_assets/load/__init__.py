"""Stage 2: S3 parquet -> warehouse (Redshift, or PostgreSQL standing in), exactly once.

    target.py         LoadTarget: the warehouse table one MySQL table lands in
    sql.py            the SQL text, pure builders (ledger, stage, merge, COPY manifest)
    ddl.py            create / evolve target tables and the ledger: ensure_target
    ledger.py         the load ledger, tied to the target's identity; lookups
    transaction.py    load_files / load_partitions: one transaction per load, retried on races
    copy_postgres.py  COPY FROM STDIN of the parquet files (the local stand-in)
    pgbinary.py       Arrow -> PostgreSQL binary COPY format, vectorized
    copy_redshift.py  COPY FROM S3 through a manifest of exactly the files to load

The invariant all of it serves: a file's rows are merged into the target and the file is
recorded in the ledger in one transaction, and the ledger speaks only for the table that
exists now, so it never claims a file whose rows are not in the target.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from s3rs_assets.load.target import LEDGER_TABLE, LoadTarget

if TYPE_CHECKING:
    from s3rs_assets.load.copy_postgres import ValueTooLongError
    from s3rs_assets.load.ddl import ensure_target
    from s3rs_assets.load.ledger import clear as clear_ledger
    from s3rs_assets.load.ledger import ledger_files, ledger_versions, loaded_since
    from s3rs_assets.load.transaction import (
        CHECKPOINTS,
        LoadError,
        LoadResult,
        load_files,
        load_partitions,
    )

#: imported on first use: the load itself (and Dagster's logger with it) is not needed by
#: what only builds SQL or describes a target (reconcile, verify)
_LAZY = {
    "ValueTooLongError": ("copy_postgres", "ValueTooLongError"),
    "ensure_target": ("ddl", "ensure_target"),
    "clear_ledger": ("ledger", "clear"),
    "ledger_files": ("ledger", "ledger_files"),
    "ledger_versions": ("ledger", "ledger_versions"),
    "loaded_since": ("ledger", "loaded_since"),
    "CHECKPOINTS": ("transaction", "CHECKPOINTS"),
    "LoadError": ("transaction", "LoadError"),
    "LoadResult": ("transaction", "LoadResult"),
    "load_files": ("transaction", "load_files"),
    "load_partitions": ("transaction", "load_partitions"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _LAZY[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), attr)

__all__ = [
    "CHECKPOINTS",
    "LEDGER_TABLE",
    "LoadError",
    "LoadResult",
    "LoadTarget",
    "ValueTooLongError",
    "clear_ledger",
    "ensure_target",
    "ledger_files",
    "ledger_versions",
    "loaded_since",
    "load_files",
    "load_partitions",
]
