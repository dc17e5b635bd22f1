"""The last recovery source of a watermark: the Dagster event log.

Each run's materializations carry the record (`s3rs/watermark` on `redshift_table`, the
backup side `s3rs/watermark_backup` on `s3_parquet`), so a table whose primary and every S3
backup are gone is still recovered from the instance. `WatermarkStore` takes the
`event_log_fallback(instance, location)` as its last candidate and validates whatever it
returns. The instance outlives a change of bucket or prefix: each snapshot names the place
it was written for (`s3rs/watermark_location`), and only that place's are candidates.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import dagster as dg

from s3rs_assets.names import (
    WATERMARK_BACKUP_METADATA_KEY,
    WATERMARK_LOCATION_METADATA_KEY,
    WATERMARK_METADATA_KEY,
    stage_keys,
)
from s3rs_assets.watermark.store import EventLogFallback

#: The load mirror: what a backup-side snapshot lacks and a whole record holds.
LOAD_FIELDS = (
    "last_redshift_load_time",
    "redshift_rows_loaded",
    "redshift_status",
    "processed_s3_files",
    "loaded_partitions",
)


def _latest_snapshot(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    entry_key: str,
    lookback: int,
    location: str | None,
) -> tuple[int, dict[str, Any]] | None:
    """(storage id, record dict) of the newest materialization of `key` carrying
    `entry_key`, among its last `lookback` materializations, written for `location` (a
    snapshot of another bucket or prefix is skipped; one from before the location was
    recorded is taken)."""
    result = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), lookback)
    for rec in result.records:
        mat = rec.asset_materialization
        entry = mat.metadata.get(entry_key) if mat is not None else None
        written_for = mat.metadata.get(WATERMARK_LOCATION_METADATA_KEY) if mat else None
        if location is not None and written_for is not None and written_for.value != location:
            continue
        if entry is not None:
            value = entry.value
            return rec.storage_id, json.loads(value) if isinstance(value, str) else dict(value)
    return None


def event_log_watermark(
    instance: dg.DagsterInstance, table: str, *, location: str | None = None, lookback: int = 5
) -> str | None:
    """The newest watermark record kept in the event log for `location` (the store's
    `s3://bucket/prefix`; None: any), as JSON text, or None.

    A run's last `redshift_table` materialization carries the whole record
    (`WATERMARK_METADATA_KEY`), its last `s3_parquet` materialization the backup side
    (`WATERMARK_BACKUP_METADATA_KEY`; older s3rs wrote the whole record there). The newest
    of them wins; a backup side newer than the newest whole record takes that record's load
    mirror (the warehouse's ledger stays the truth and the next load mirrors it again). The
    text is not validated here: the watermark store validates every candidate.
    """
    backup_key, load_key = stage_keys(table)
    whole = _latest_snapshot(instance, load_key, WATERMARK_METADATA_KEY, lookback, location)
    legacy = _latest_snapshot(instance, backup_key, WATERMARK_METADATA_KEY, lookback, location)
    side = _latest_snapshot(
        instance, backup_key, WATERMARK_BACKUP_METADATA_KEY, lookback, location
    )
    if legacy is not None and (whole is None or legacy[0] > whole[0]):
        whole = legacy
    if side is None or (whole is not None and whole[0] > side[0]):
        return None if whole is None else json.dumps(whole[1])
    record = dict(side[1])
    if whole is not None:
        record.update({k: whole[1][k] for k in LOAD_FIELDS if k in whole[1]})
    return json.dumps(record)


def tables_with_events(instance: dg.DagsterInstance, tables: Iterable[str]) -> set[str]:
    """The tables among `tables` whose stage assets have any event in the instance's asset
    index: one query for all of them. Only these can have a record in the event log
    (`event_log_watermark` reads the materializations of those two assets); a sensor tick
    over 2,000 tables asked the three searches of each table without a primary or copy
    (~12 ms CPU each on SQLite: 2.4 s for 200 tables) to learn, for almost all, nothing."""
    by_key = {key: table for table in tables for key in stage_keys(table)}
    if not by_key:
        return set()
    return {
        by_key[rec.asset_entry.asset_key]
        for rec in instance.get_asset_records(list(by_key))
        if rec.asset_entry.asset_key in by_key
    }


def event_log_fallback(instance: dg.DagsterInstance, location: str) -> EventLogFallback:
    """The last recovery source of the `WatermarkStore` of `location`: this instance's
    event log, its snapshots of that location."""

    def fallback(table: str) -> str | None:
        return event_log_watermark(instance, table, location=location)

    return fallback


def unlisted_with_events(
    instance: dg.DagsterInstance, unlisted: Iterable[str], copies: set[str] | None
) -> set[str] | None:
    """Of the tables without a listed primary, those without a listed copy that the event
    log may hold (`tables_with_events`); None (each is searched on its own) when the copies
    were not listed or the instance cannot answer. Shared by the guard and new_data ticks."""
    if copies is None:
        return None
    try:
        return tables_with_events(instance, [t for t in unlisted if t not in copies])
    except Exception:  # noqa: BLE001 - each table's own search then says what fails
        return None
