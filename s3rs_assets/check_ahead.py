"""The MySQL side of a sync run's `matches_mysql`, computed while the run's load step runs.

The check compares, per partition window the backup copied, MySQL's row count and
checksum with the warehouse's. MySQL's side reads only MySQL, which the load does not
touch, and the load leaves a core mostly idle (one warehouse backend busy with its COPY,
this process encoding beside it). So the load step starts MySQL's side in a thread
(`start`, when the run executes the check after it) and the check step takes it (`take`)
instead of asking MySQL again: the check then waits for the warehouse's side only. A cold
5M-row first sync on two cores (MySQL, PostgreSQL and S3 on the same machine): the check
step 5.8–6.1 → 2.3 s, the load step 0.8–1.2 s slower, the command 35.4–36.3 → 33.1–33.3 s;
with MySQL on a host of its own the load would not slow at all.

The check uses a precomputed window only when it compares that very window (partition key,
start, end: `verify.verify_table`'s `known`); any other window, or all of them when the
early query failed, it asks MySQL itself, as without this module. Both steps run in one
process (every s3rs job has the in-process executor); a check in another process finds
nothing here and asks MySQL.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future

import dagster as dg

from s3rs_assets.config import TableConfig
from s3rs_assets.load import LoadTarget
from s3rs_assets.names import CHECK_NAME, asset_key
from s3rs_assets.partitions import window
from s3rs_assets.resources import MySQLResource
from s3rs_assets.verify import Window, mysql_sides
from s3rs_assets.watermark import FileEntry, WatermarkRecord

log = logging.getLogger("s3rs.check_ahead")

#: runs whose MySQL side is kept for their check (a long-lived process runs many)
KEPT = 16
_AHEAD: OrderedDict[tuple[str, str], Future[dict[Window, tuple[int, int]]]] = OrderedDict()
_LOCK = threading.Lock()


def synced_windows(
    pdef: dg.TimeWindowPartitionsDefinition, keys: list[str], record: WatermarkRecord | None
) -> list[Window]:
    """What the backup claims to have copied, per partition: a complete partition's whole
    window; a partial one's window up to its cursor's timestamp, exclusive. Rows after the
    cursor (above the safety bound, past a --limit) are the next sync's work, not a
    mismatch; rows sharing the cursor's timestamp are compared once the partition moves
    on (comparing them by key would depend on each database's collation)."""
    out = []
    for key in keys:
        start, end = window(pdef, key)
        state = record.partitions.get(key) if record else None
        if state is None:
            continue
        if state.status != "complete":
            end = min(end, state.cursor.c) if state.cursor is not None else start
        if start < end:
            out.append((key, start, end))
    return out


def to_load(
    keys: list[str], files: dict[str, list[FileEntry]], record: WatermarkRecord | None
) -> list[str]:
    """The partitions of `keys` with a file the record's mirror of the ledger does not hold:
    those the load will move rows into, so those the check compares. The mirror only
    chooses what to compute early (a stale mirror costs a query here or in the check,
    never a wrong comparison: the check takes a window only when it compares it)."""
    loaded = record.loaded_partitions if record else {}
    out = []
    for key in keys:
        held = loaded.get(key)
        done = set(held.files) if held else set()
        if any(f.key not in done for f in files.get(key, [])):
            out.append(key)
    return out


def check_follows(context: dg.AssetExecutionContext, table: TableConfig) -> bool:
    """The run executes `table`'s `matches_mysql` (a sync run's job, or a subset with it)."""
    job = getattr(context, "job_def", None)
    if job is None:  # the catch-up op's stand-in context: it compares after its loads
        return False
    key = dg.AssetCheckKey(asset_key(table, "redshift_table"), CHECK_NAME)
    try:
        return key in job.asset_layer.asset_graph.asset_check_keys
    except AttributeError:  # another Dagster's layout: the check asks MySQL itself
        return False


def start(
    run_id: str, table: TableConfig, target: LoadTarget, mysql: MySQLResource,
    windows: list[Window],
) -> bool:
    """Compute MySQL's side of `windows` in a daemon thread, on a connection of its own (the
    run's is not shared across threads), for `take(run_id, table)`. False when there is
    nothing to compute, or a first attempt of the step started it already (a retried load
    step: the same record, the same windows)."""
    if not windows:
        return False
    done: Future[dict[Window, tuple[int, int]]] = Future()
    with _LOCK:
        if (run_id, table.name) in _AHEAD:
            return False
        _AHEAD[(run_id, table.name)] = done
        while len(_AHEAD) > KEPT:
            _AHEAD.popitem(last=False)
    threading.Thread(
        target=_compute, args=(done, table, target, mysql, windows),
        name="s3rs-check-ahead", daemon=True,
    ).start()
    return True


def _compute(
    done: Future[dict[Window, tuple[int, int]]], table: TableConfig, target: LoadTarget,
    mysql: MySQLResource, windows: list[Window],
) -> None:
    try:
        conn = mysql.connect()
        try:
            done.set_result(mysql_sides(conn, table.name, target, windows))
        finally:
            conn.close()
    except BaseException as e:  # noqa: BLE001 - handed to take(): the check asks MySQL itself
        done.set_exception(e)


def take(run_id: str, table: TableConfig) -> dict[Window, tuple[int, int]] | None:
    """MySQL's side computed for this run's check (waiting for it), once; None when none
    was started here or it failed (the check then asks MySQL itself)."""
    with _LOCK:
        done = _AHEAD.pop((run_id, table.name), None)
    if done is None:
        return None
    try:
        return done.result()
    except Exception as e:  # noqa: BLE001 - the check's own query decides, and reports
        log.debug("%s: MySQL's side computed during the load failed (%s); asking again",
                  table.name, type(e).__name__)
        return None
