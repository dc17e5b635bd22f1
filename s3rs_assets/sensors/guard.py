"""`s3rs_watermark_guard` (every 5 min) validates every configured table's primary
watermark with `WatermarkStore.recover`: a lost or corrupt primary is restored from the
daily backup, a session backup, or the latest `s3rs/watermark` materialization metadata
(`watermark_eventlog.event_log_watermark`), written back, and reported as an
`AssetObservation` on the table's `s3_parquet` (metadata `recovered_from`, `key`). A
table with no copy anywhere was never synced, which is fine. When no valid copy is left
the guard names the table and the `s3rs watermark set` command; it never resets
anything itself. A tick that restored a record fails with its message (Dagster shows any
tick without runs as SKIPPED); every other tick's message is its skip reason.

A tick LISTs the primaries once (a page per 1,000 tables). The code server outlives its
ticks: a primary whose listed ETag is the one this process validated (with the MySQL
clock) on an earlier tick holds the same bytes, so it is valid again without a GET
(`_VALIDATED`); a changed, missing or never-validated one is read and recovered as before.
The clock only moves on, so a cursor that was not in its future still is not.

A table without a listed primary was never synced, unless a copy or the event log holds
its record: the daily and session copies are listed once per tick for the whole fleet
(`tables_with_copies`), so a never-synced table costs no S3 request of its own, and the
event log's asset index is asked once for all of them (`unlisted_with_events`), so it costs
no event-log search either; one with a copy or an event, or whose listing failed, goes
through the whole recovery search. A primary or copy
written after the tick's listings is seen by the next tick (nothing is written for a table
found never synced).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import dagster as dg
import pymysql

from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError, S3rsError, WatermarkError
from s3rs_assets.io_manager import store_for
from s3rs_assets.names import (
    WATERMARK_GUARD,
    asset_key,
)
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets.scan import RecordCache, primary_etags
from s3rs_assets.sensors.common import clip
from s3rs_assets.source import (
    server_now,
)
from s3rs_assets.watermark import iso
from s3rs_assets.watermark.reports import RecoveryReport
from s3rs_assets.watermark.store import S3_ERRORS, WatermarkStore
from s3rs_assets.watermark_eventlog import unlisted_with_events

#: concurrent record reads per tick (2,000 tables: issue 18); within the S3 client's pool
GUARD_WORKERS = 10
#: primaries this process validated, by ETag (module docstring)
_VALIDATED = RecordCache()


@dataclass
class WatermarkCheck:
    """What the guard found for one table."""

    table: str
    state: Literal["valid", "never_synced", "recovered", "needs_person"]
    detail: str
    report: RecoveryReport | None = None

    def line(self) -> str:
        return f"{self.table}: {self.detail}"


class WatermarkRestored(S3rsError):
    """The guard restored a lost or corrupt watermark: its tick fails so that the tick
    history shows it (the record is valid again; the message says where it came from)."""


def check_watermark(store: WatermarkStore, table: str, now: datetime | None) -> WatermarkCheck:
    """Validate `table`'s primary watermark, recovering it when lost or corrupt."""
    try:
        report = store.recover(table, now=now)
    except (WatermarkError, ConfigError) as e:
        return WatermarkCheck(table, "needs_person", str(e))
    if report.record is None:
        return WatermarkCheck(table, "never_synced", "no watermark anywhere (never synced)")
    if not report.recovered:
        return WatermarkCheck(table, "valid", "primary valid", report)
    where = f"s3://{store.bucket}/{report.key}" if report.source != "event_log" else report.key
    return WatermarkCheck(
        table,
        "recovered",
        f"primary {report.primary_error}; recovered from {report.source} {where} "
        f"(last_mysql_data_timestamp {iso(report.record.last_mysql_data_timestamp)})",
        report,
    )


def check_listed(
    store: WatermarkStore, table: str, etag: str | None, now: datetime | None
) -> WatermarkCheck:
    """`check_watermark`, unless the listed `etag` is one this process validated."""
    if etag is not None and now is not None and _VALIDATED.get(store, table, etag) is not None:
        return WatermarkCheck(table, "valid", "primary valid (unchanged since validated)")
    c = check_watermark(store, table, now)
    report = c.report
    if now is not None and report is not None and report.etag and report.record is not None:
        _VALIDATED.put(store, table, report.etag, report.record)
    return c


def check_unlisted(
    store: WatermarkStore, table: str, now: datetime | None, logged: set[str] | None = None
) -> WatermarkCheck:
    """A table with neither a listed primary nor a listed copy: never synced, unless the
    event log (the last recovery source) holds its record. `logged`, when known, are the
    tables the event log may hold (`tables_with_events`): any other is never synced
    without a search of its own."""
    if logged is not None and table not in logged:
        return WatermarkCheck(table, "never_synced", "no watermark anywhere (never synced)")
    fallback = store.event_log_fallback
    try:
        found = fallback(table) if fallback is not None else None
    except Exception:  # noqa: BLE001 - the whole search says what fails
        found = True
    if found is None:
        return WatermarkCheck(table, "never_synced", "no watermark anywhere (never synced)")
    return check_watermark(store, table, now)


def _fingerprint(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def build_watermark_guard(tables: Sequence[TableConfig]) -> dg.SensorDefinition:
    """Long on purpose: the sensor body is nested here to close over the table list."""
    by_name = {t.name: t for t in tables}

    @dg.sensor(
        name=WATERMARK_GUARD,
        minimum_interval_seconds=300,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "Validates every table's primary watermark in S3; restores a lost or corrupt one "
            "from its backups or the event log and reports it on the table's s3_parquet; "
            "names the tables that need `s3rs watermark set`."
        ),
    )
    def s3rs_watermark_guard(
        context: dg.SensorEvaluationContext, mysql: MySQLResource, s3: S3Resource
    ) -> dg.SensorResult:
        # The source clock rejects cursors from the future; without it the check is skipped.
        """Long on purpose: one tick's four outcomes per table and their report."""
        clock_note = ""
        try:
            with mysql.connect() as conn:
                now = server_now(conn)
        except (S3rsError, pymysql.err.MySQLError) as e:
            now, clock_note = None, f" (MySQL clock not read, future-cursor check skipped: {e})"
        store = store_for(s3, instance=context.instance)
        reported: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
        copies: set[str] | None = None  # None: every unlisted table searches on its own
        try:
            listed = primary_etags(store)
        except S3_ERRORS:
            listed = {}  # every table is read, and says what fails
        else:
            try:
                if any(name not in listed for name in by_name):
                    copies = store.tables_with_copies()
            except S3_ERRORS:
                copies = None
        # which unlisted tables the event log may hold: one query, not three per table
        logged = unlisted_with_events(
            context.instance, [n for n in by_name if n not in listed], copies
        )

        def check(name: str) -> WatermarkCheck:
            if copies is not None and name not in listed and name not in copies:
                return check_unlisted(store, name, now, logged)
            return check_listed(store, name, listed.get(name), now)

        # S3 round trips dominate: records are read by GUARD_WORKERS threads (the store is
        # thread-safe), the report below stays in table order.
        with ThreadPoolExecutor(max_workers=GUARD_WORKERS) as pool:
            checks = list(pool.map(check, by_name))
        events: list[dg.AssetObservation] = []
        for c in checks:
            key = asset_key(by_name[c.table], "s3_parquet")
            if c.state == "recovered":
                assert c.report is not None
                context.log.warning(f"watermark {c.line()}")
                events.append(
                    dg.AssetObservation(
                        asset_key=key,
                        description=f"watermark recovered from {c.report.source}",
                        metadata={
                            "recovered_from": c.report.source,
                            "key": c.report.key,
                            "primary_error": c.report.primary_error,
                            "last_mysql_data_timestamp": iso(
                                c.report.record.last_mysql_data_timestamp
                            )
                            if c.report.record
                            else None,
                            "recovery": dg.MetadataValue.json(c.report.as_metadata()),
                        },
                    )
                )
                reported.pop(c.table, None)
            elif c.state == "needs_person":
                context.log.error(f"watermark {c.line()}")
                # Observed once per distinct problem, not every five minutes.
                if reported.get(c.table) != _fingerprint(c.detail):
                    reported[c.table] = _fingerprint(c.detail)
                    events.append(
                        dg.AssetObservation(
                            asset_key=key,
                            description="watermark lost: needs `s3rs watermark set`",
                            metadata={
                                "watermark_status": "needs s3rs watermark set",
                                "action": f"s3rs watermark set -t {c.table} --timestamp ...",
                                "error": c.detail,
                            },
                        )
                    )
            else:
                reported.pop(c.table, None)
        by_state: dict[str, list[WatermarkCheck]] = {}
        for c in checks:
            by_state.setdefault(c.state, []).append(c)
        parts = [
            f"checked {len(checks)} tables' primary watermarks in "
            f"s3://{store.bucket}/{store.prefix}{clock_note}: "
            f"{len(by_state.get('valid', []))} valid, "
            f"{len(by_state.get('never_synced', []))} never synced, "
            f"{len(by_state.get('recovered', []))} recovered, "
            f"{len(by_state.get('needs_person', []))} need a person"
        ]
        parts += [f"RECOVERED {c.line()}" for c in by_state.get("recovered", [])]
        parts += [
            f"NEEDS `s3rs watermark set -t {c.table}`: {c.detail}"
            for c in by_state.get("needs_person", [])
        ]
        message = clip("; ".join(parts))
        context.log.info(message)  # the tick's logs show it too, not only its tooltip
        if by_state.get("recovered"):
            # Dagster files every tick that requests no run as SKIPPED ("0 runs requested");
            # a restored watermark is an incident, so this tick fails with the message as
            # its error, after recording the observations the daemon would have.
            for event in events:
                context.instance.report_runless_asset_event(event)
            raise WatermarkRestored(message)
        return dg.SensorResult(
            skip_reason=message,
            asset_events=events,
            cursor=json.dumps(reported, sort_keys=True),
        )

    return s3rs_watermark_guard
