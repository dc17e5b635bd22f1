"""One load: S3 parquet -> staging -> merge by primary key, with the ledger, exactly once.

One load is one transaction, whatever the dialect:

1. the ledger is settled against the target's identity (ledger.py: entries of a dropped
   table, or claiming rows an emptied table does not hold, are discarded), and the files
   it already holds for this identity (same key and md5) are dropped from the list;
2. a ledger row is inserted for each remaining file. The ledger's primary key is
   (table_name, file_key, file_md5): on PostgreSQL a second loader racing on the same files
   blocks on these rows and fails with a unique violation once the first commits; on
   Redshift (whose keys are not enforced) the racing transaction fails with serializable
   isolation error 1023. Either way it rolls back, retries, and finds the files loaded;
3. `CREATE TEMP TABLE s3rs_stage` with the source columns in file order (no TRUNCATE:
   Redshift would commit there), then COPY (copy_redshift.py, copy_postgres.py). The staged
   row count must equal the files' manifest counts;
4. merge, the same SQL for both dialects (sql.py): delete target rows whose key is staged
   with a cursor older or equal to a staged one, then insert per key the newest staged row
   unless the target still holds the key (it can only be newer after the delete). Loading
   a file twice, or an older window after a newer one, therefore never moves a row back;
5. drop the staging table, record in the target-state table whether the target holds rows
   now (ledger.py: how s3rs tells its own deletes from a TRUNCATE), commit. Serialization
   failures (40001, 40P01, Redshift 1023) and racing-loader unique violations (23505)
   rerun the whole transaction, with backoff, a bounded number of times.

A partition never loaded (the warehouse ledger, the truth, holds no file of it for this
target) takes a shorter way on PostgreSQL: steps 3-4 become one `COPY` straight into the
target, behind a savepoint, in the same transaction as its ledger rows. The target's
primary key refuses a key it already holds (a row that moved in from another partition) or
one the files hold twice, and a binary format error refuses a column the target keeps
wider; either rolls back to the savepoint and the load takes the staging way. Redshift
enforces no key, so it always stages and merges.

The ledger's reads are one query for the partition (`partition_ledger`: what is loaded of
it, which also tells "never loaded" and gives the ledger rows after the load) besides the
lookup of the files' versions.

`load_partitions` runs steps 2-4 for several partitions inside one such transaction (the
ledger settled once in step 1, one target-state row and one commit in step 5): a catch-up
over 73 scattered days is one transaction, not 73, and commits all of them or none.

DDL (ddl.ensure_target) runs before, outside the transaction, once per call. `checkpoint=`
is the one observer a caller gets inside the transaction: it is called with each name of
CHECKPOINTS, and an exception it raises aborts the load there (tests crash loads that way).
`before_merge=` runs the caller's own statements on the load's connection after the COPY
and before the merge, in the same transaction (reconcile deletes keys there), so they
commit exactly when the files' ledger rows do, and never for a file already loaded.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from s3rs_assets import retry
from s3rs_assets.errors import ConfigError, IntegrityError, S3rsError
from s3rs_assets.load import ledger
from s3rs_assets.load.copy_postgres import copy_postgres
from s3rs_assets.load.copy_redshift import copy_redshift
from s3rs_assets.load.ddl import ensure_target
from s3rs_assets.load.sql import create_stage_sql, merge_sql, staged_stats_sql
from s3rs_assets.load.target import LoadTarget
from s3rs_assets.resources import S3Resource
from s3rs_assets.warehouse import (
    UNIQUE_VIOLATION,
    FirstAttempt,
    WarehouseConnection,
    WarehouseResource,
    is_driver_error,
    sqlstate,
)
from s3rs_assets.watermark import FileEntry, utcnow

#: Checkpoints a load passes, in order; `checkpoint=` callbacks receive these names (a
#: direct load passes "after_merge" right after its COPY: the rows are in the target).
CHECKPOINTS = ("after_ledger", "after_copy", "after_merge", "before_commit")

#: what the target's refusal of a direct COPY looks like (then the load stages): a key
#: it holds or a key twice (23505), a NULL key (23502), a column it keeps in another type
#: (22P03 binary format, 42804 datatype mismatch)
DIRECT_REFUSALS = ("23505", "23502", "22P03", "42804")
_SAVEPOINT = '"s3rs_direct"'

log = dg.get_dagster_logger("s3rs.load")
#: the per-partition detail of a committed load, not Dagster's: a step's caller
#: (load_stage.run_load) writes it into the run's log as one entry per transaction, and an
#: entry here too would be a second event-log write per partition (issue 19)
detail_log = logging.getLogger("s3rs.load.transaction")


class LoadError(S3rsError):
    """The load transaction failed and was rolled back: nothing of it is in the warehouse."""

    #: transient when its driver error is (retry.kind): Dagster's retry policy may rerun it
    classify_by_cause = True


@dataclass
class LoadResult:
    """What one `load_files` call did; every count comes from the warehouse."""

    table: str
    partition_key: str
    files_loaded: list[str] = field(default_factory=list)
    files_skipped: list[str] = field(default_factory=list)
    rows_staged: int = 0
    rows_inserted: int = 0
    rows_deleted: int = 0
    seconds: float = 0.0
    #: rows of this table and partition the ledger holds after the load (newest version
    #: of each file key): what the watermark's redshift side mirrors.
    ledger_rows: int = 0
    bytes_loaded: int = 0
    attempts: int = 0
    ddl: list[str] = field(default_factory=list)
    dialect: str = ""
    load_id: str = ""
    copy_seconds: float = 0.0
    merge_seconds: float = 0.0
    #: the target table's identity (pg_class oid / Redshift table_id) the ledger rows name
    target_id: int | None = None
    #: why ledger entries were discarded so that files load again (target re-created or
    #: found empty); "" when the ledger was trusted as it was
    reloaded_reason: str = ""
    ledger_discarded: int = 0
    #: partitions whose ledger entries were discarded: none of their files is in the target
    #: now, whatever the watermark's mirror of the ledger still says
    reload_partitions: list[str] = field(default_factory=list)
    #: the rows went straight into the target (a partition never loaded), no staging/merge
    direct: bool = False
    #: a direct COPY the target refused (so the load staged and merged): the SQLSTATE
    direct_refused: str = ""

    @property
    def rows_not_inserted(self) -> int:
        """Staged rows that lost to a newer version (staged or already in the target)."""
        return self.rows_staged - self.rows_inserted

    def metadata(self) -> dict[str, Any]:
        """Flat values for `dg.MaterializeResult(metadata=...)`."""
        return {
            "files_loaded": len(self.files_loaded),
            "files_skipped": len(self.files_skipped),
            "rows_staged": self.rows_staged,
            "rows_inserted": self.rows_inserted,
            "rows_deleted": self.rows_deleted,
            "rows_not_inserted": self.rows_not_inserted,
            "ledger_rows": self.ledger_rows,
            "bytes_loaded": self.bytes_loaded,
            "attempts": self.attempts,
            "seconds": round(self.seconds, 3),
            "copy_seconds": round(self.copy_seconds, 3),
            "merge_seconds": round(self.merge_seconds, 3),
            "dialect": self.dialect,
            "load_id": self.load_id,
            "target_id": self.target_id,
            "direct": self.direct,
            **(
                {
                    "reloaded_reason": self.reloaded_reason,
                    "ledger_entries_discarded": self.ledger_discarded,
                    "partitions_to_reload": len(self.reload_partitions),
                }
                if self.reloaded_reason
                else {}
            ),
        }

    def _begin_attempt(self, settled: ledger.Settled) -> None:
        self.files_loaded, self.files_skipped, self.bytes_loaded = [], [], 0
        self.rows_staged = self.rows_inserted = self.rows_deleted = 0
        self.target_id = settled.target_id
        self.reloaded_reason, self.ledger_discarded = settled.reason, settled.discarded
        self.reload_partitions = list(settled.partitions)
        self.direct, self.direct_refused = False, ""


def _check_files(target: LoadTarget, partition_key: str, files: Sequence[FileEntry]) -> None:
    if not isinstance(partition_key, str) or not partition_key or len(partition_key) > 64:
        raise ConfigError(f"{target.qualified}: invalid partition key {partition_key!r}")
    seen: set[str] = set()
    for f in files:
        if f.key in seen:
            raise ConfigError(f"{target.qualified}: file {f.key} is listed twice")
        seen.add(f.key)


def load_files(
    warehouse: WarehouseResource,
    s3: S3Resource,
    target: LoadTarget,
    partition_key: str,
    files: list[FileEntry],
    *,
    checkpoint: Callable[[str], None] | None = None,
    before_merge: Callable[[WarehouseConnection], None] | None = None,
    max_attempts: int = retry.WAREHOUSE_BACKOFF.attempts,
    backoff_seconds: float = retry.WAREHOUSE_BACKOFF.first,
    retries: retry.Retries | None = None,
    direct: bool = True,
) -> LoadResult:
    """Load `files` (one partition's parquet objects in `s3.bucket`) into `target`.

    Exactly once: files already in the ledger are skipped, the rest are merged (or, into a
    partition never loaded, copied straight in; `direct=False` always stages) and recorded
    in the ledger in one transaction. `checkpoint(name)` is called at each of CHECKPOINTS
    inside the transaction; what it raises aborts (and rolls back) the load. Transient
    errors rerun the transaction (retry.call, counted in `retries`). `load_partitions` with
    one partition.
    """
    return load_partitions(
        warehouse, s3, target, {partition_key: files}, checkpoint=checkpoint,
        before_merge=before_merge, max_attempts=max_attempts,
        backoff_seconds=backoff_seconds, retries=retries, direct=direct,
    )[partition_key]


def load_partitions(
    warehouse: WarehouseResource,
    s3: S3Resource,
    target: LoadTarget,
    parts: dict[str, list[FileEntry]],
    *,
    checkpoint: Callable[[str], None] | None = None,
    before_merge: Callable[[WarehouseConnection], None] | None = None,
    max_attempts: int = retry.WAREHOUSE_BACKOFF.attempts,
    backoff_seconds: float = retry.WAREHOUSE_BACKOFF.first,
    retries: retry.Retries | None = None,
    direct: bool = True,
) -> dict[str, LoadResult]:
    """Load several partitions' files in ONE transaction (a catch-up over scattered days
    pays one DDL check, one ledger settle and one commit, not one per partition). Each
    partition is loaded as `load_files` loads it (its own ledger rows, load id, direct COPY
    or staging and merge, counts) inside that transaction, in the order of `parts`; the
    transaction commits all of them or none, so a crash or retry loads nothing twice.
    `checkpoint` sees "after_ledger", "after_copy", "after_merge" per partition and
    "before_commit" once. One LoadResult per partition.
    """
    if not parts:
        return {}
    started = time.monotonic()
    for key, files in parts.items():
        _check_files(target, key, files)
    results = {
        key: LoadResult(table=target.qualified, partition_key=key, dialect=warehouse.dialect)
        for key in parts
    }
    # The DDL check runs on the first attempt's connection, in autocommit; the transaction
    # after it does not.
    first = warehouse.connect(autocommit=True)
    try:
        ddl = ensure_target(warehouse, target, first)  # once per transaction, not per partition
        first.autocommit = False
    except BaseException:
        first.close()
        raise
    spare = FirstAttempt(first)
    for r in results.values():
        r.ddl = ddl
    observe = checkpoint or (lambda name: None)
    what = (
        f"partition {next(iter(parts))}" if len(parts) == 1
        else f"{len(parts)} partitions {next(iter(parts))} .. {list(parts)[-1]}"
    )

    def attempt() -> None:
        for r in results.values():
            r.attempts += 1
        conn = spare.take() or warehouse.connect()
        try:
            _load_once(conn, s3, warehouse, target, parts, results, observe, before_merge,
                       direct)
        except Exception:
            conn.rollback()
            raise
        finally:
            conn.close()

    def transient(e: BaseException) -> str | None:
        if not is_driver_error(e):
            return None
        if sqlstate(e) == UNIQUE_VIOLATION:
            return "warehouse 23505 racing loader"
        return retry.kind(e)

    with spare:  # closes the first connection if no attempt ran
        try:
            retry.call(
                attempt,
                what=f"loading {target.qualified} {what}",
                retries=retries if retries is not None else retry.Retries(),
                backoff=retry.Backoff(max_attempts, backoff_seconds),
                transient=transient,
                log=log.warning,
            )
        except Exception as e:
            if is_driver_error(e):
                n = sum(len(f) for f in parts.values())
                attempts = max((r.attempts for r in results.values()), default=0)
                raise LoadError(
                    f"loading {n} file(s) into {target.qualified} ({what}) failed after "
                    f"{attempts} attempt(s); nothing was committed: {type(e).__name__}: {e}"
                ) from e
            raise
    if len(parts) == 1:
        next(iter(results.values())).seconds = time.monotonic() - started
    for key, result in results.items():
        detail_log.debug(
            f"{target.qualified} partition {key}: {len(result.files_loaded)} file(s) "
            f"loaded, {len(result.files_skipped)} skipped, {result.rows_staged} rows staged, "
            f"{result.rows_inserted} inserted, {result.rows_deleted} replaced, "
            f"{result.seconds:.2f}s ({result.dialect}, {result.attempts} attempt(s))"
        )
    return results


def _load_once(
    conn: WarehouseConnection,
    s3: S3Resource,
    warehouse: WarehouseResource,
    target: LoadTarget,
    parts: dict[str, list[FileEntry]],
    results: dict[str, LoadResult],
    checkpoint: Callable[[str], None],
    before_merge: Callable[[WarehouseConnection], None] | None = None,
    allow_direct: bool = True,
) -> None:
    """One attempt: steps 1-5 of the module docstring for every partition of `parts`, the
    ledger settled once and one commit (or none: raising rolls all of them back)."""
    settled = ledger.settle(conn, target)
    ident = settled.target_id
    # what the settle found and did is told once, by the first partition (as a load per
    # partition would: the later ones find the ledger settled)
    quiet = ledger.Settled(ident, False)
    for i, result in enumerate(results.values()):
        result._begin_attempt(settled if i == 0 else quiet)
        result.load_id = uuid.uuid4().hex
    every = [f for files in parts.values() for f in files]
    loaded = ledger.loaded_versions(conn, target, ident, every)
    moved = False
    for key, files in parts.items():
        t0 = time.monotonic()
        result = results[key]
        moved |= _load_partition(
            conn, warehouse, s3, target, key, files, loaded, result, checkpoint, before_merge,
            allow_direct,
        )
        result.seconds = time.monotonic() - t0
    if not moved:
        if settled.changed:
            ledger.write_state(conn, target, ident, next(iter(results.values())).load_id,
                               utcnow())
            conn.commit()
        else:
            conn.rollback()
        return
    # what this load leaves in the target: tells s3rs's own deletes from a TRUNCATE later
    last = [r for r in results.values() if r.files_loaded][-1]
    ledger.write_state(conn, target, ident, last.load_id, utcnow())
    checkpoint("before_commit")
    conn.commit()


def _load_partition(
    conn: WarehouseConnection,
    warehouse: WarehouseResource,
    s3: S3Resource,
    target: LoadTarget,
    partition_key: str,
    files: Sequence[FileEntry],
    loaded: set[tuple[str, str]],
    result: LoadResult,
    checkpoint: Callable[[str], None],
    before_merge: Callable[[WarehouseConnection], None] | None,
    allow_direct: bool,
) -> bool:
    """Steps 2-4 for one partition inside the open transaction; True when it moved files
    (`result.files_loaded` is then set: they commit with the transaction)."""
    todo = [f for f in files if (f.key, f.md5) not in loaded]
    result.files_skipped = [f.key for f in files if (f.key, f.md5) in loaded]
    # what of this partition is loaded: "never" allows the direct COPY (the ledger decides,
    # not the record's mirror), and with this load's files the ledger rows afterwards
    ident = result.target_id
    assert ident is not None
    before = ledger.partition_ledger(conn, target, ident, partition_key)
    result.ledger_rows = sum({**before, **{f.key: f.rows for f in todo}}.values())
    if not todo:
        return False

    # Ledger rows first: a racing loader blocks here (PostgreSQL), not after its COPY.
    ledger.record(conn, target, ident, partition_key, todo, result.load_id, utcnow())
    checkpoint("after_ledger")

    t0 = time.monotonic()
    direct = allow_direct and not before and before_merge is None and conn.dialect == "postgres"
    if direct and _copy_direct(conn, s3, target, partition_key, todo, result):
        staged = result.rows_inserted
        result.copy_seconds = time.monotonic() - t0
        checkpoint("after_copy")
        checkpoint("after_merge")
    else:
        staged = _stage_and_merge(
            conn, warehouse, s3, target, partition_key, todo, result, checkpoint, before_merge
        )
    result.rows_staged = staged
    result.files_loaded = [f.key for f in todo]
    result.bytes_loaded = sum(f.bytes for f in todo)
    return True


def _copy_direct(
    conn: WarehouseConnection,
    s3: S3Resource,
    target: LoadTarget,
    partition_key: str,
    files: Sequence[FileEntry],
    result: LoadResult,
) -> bool:
    """COPY `files` straight into the target behind a savepoint: True when it took them
    (`result` counts the rows), False when the target refused them (DIRECT_REFUSALS; rolled
    back to the savepoint, the ledger rows kept) and the load must stage and merge."""
    conn.execute(f"SAVEPOINT {_SAVEPOINT}")
    try:
        copied = copy_postgres(conn, s3, target, files, direct=True)
    except Exception as e:
        state = sqlstate(e) if is_driver_error(e) else None
        if state not in DIRECT_REFUSALS:
            raise
        conn.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
        result.direct_refused = str(state)
        log.debug(f"{target.qualified} partition {partition_key}: direct COPY refused "
                  f"({state}); staging and merging instead")
        return False
    expected = sum(f.rows for f in files)
    if copied != expected:
        raise IntegrityError(
            f"{target.qualified} partition {partition_key}: COPY wrote {copied} rows but the "
            f"file manifests list {expected}; nothing was loaded"
        )
    conn.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
    result.direct, result.rows_inserted, result.rows_deleted = True, copied, 0
    return True


def _stage_and_merge(
    conn: WarehouseConnection,
    warehouse: WarehouseResource,
    s3: S3Resource,
    target: LoadTarget,
    partition_key: str,
    files: Sequence[FileEntry],
    result: LoadResult,
    checkpoint: Callable[[str], None],
    before_merge: Callable[[WarehouseConnection], None] | None,
) -> int:
    """Steps 3-4: staging, the caller's `before_merge`, the merge; the rows staged."""
    t0 = time.monotonic()
    staged, distinct_keys = _stage(conn, warehouse, s3, target, partition_key, files)
    result.copy_seconds = time.monotonic() - t0
    checkpoint("after_copy")
    if before_merge is not None:
        before_merge(conn)
    t1 = time.monotonic()
    delete, insert, drop = merge_sql(target, distinct_keys != staged, conn.dialect)
    result.rows_deleted = conn.execute(delete)
    result.rows_inserted = conn.execute(insert)
    conn.execute(drop)
    result.merge_seconds = time.monotonic() - t1
    checkpoint("after_merge")
    return staged


def _stage(
    conn: WarehouseConnection,
    warehouse: WarehouseResource,
    s3: S3Resource,
    target: LoadTarget,
    partition_key: str,
    files: Sequence[FileEntry],
) -> tuple[int, int]:
    """Create and fill the staging table; return (staged rows, distinct staged keys)."""
    conn.execute(create_stage_sql(target, conn.dialect))
    if conn.dialect == "postgres":
        copy_postgres(conn, s3, target, files)
    else:
        copy_redshift(conn, warehouse, s3, target, partition_key, files)
    staged, distinct_keys = (int(v) for v in conn.query(staged_stats_sql(target))[0])
    expected = sum(f.rows for f in files)
    if staged != expected:
        raise IntegrityError(
            f"{target.qualified} partition {partition_key}: COPY staged {staged} rows but the "
            f"file manifests list {expected}; nothing was loaded"
        )
    return staged, distinct_keys
