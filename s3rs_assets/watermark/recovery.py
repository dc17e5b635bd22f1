"""Recovering a lost or invalid primary record from its copies: an explicit step.

The order (DESIGN.md): today's daily copy, the newest daily copy, the latest session copy,
any other session copy (newest first), the event log (the latest `s3rs/watermark`
materialization metadata, `watermark_eventlog`). The first valid candidate is written back
to the primary compare-and-swap with `backup_metadata.recovered_from` set, and the copies
are brought up to date. Reading never does this (`store.peek` shows the candidate without
writing); `recover()` — the watermark guard sensor, the start of a backup run, the first
write of a run — does. Nothing is ever reset automatically: a table is new only when no copy
of its watermark exists anywhere, and when copies exist but none is valid the error names
`s3rs watermark set`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from s3rs_assets.errors import WatermarkConflict, WatermarkError
from s3rs_assets.layout import check_table
from s3rs_assets.watermark.archive import ArchiveUnreadable
from s3rs_assets.watermark.copies import Copies
from s3rs_assets.watermark.objects import CAS_ATTEMPTS, S3_ERRORS, _describe, _Known, _Lost, log
from s3rs_assets.watermark.record import iso
from s3rs_assets.watermark.reports import RecoveryReport


class Recovery(Copies):
    """`recover()` and the recovery order (see the module docstring)."""

    def recover(self, table: str, *, now: datetime | None = None) -> RecoveryReport:
        """Read and validate the primary in S3 (never from memory); when missing or invalid,
        restore it from the first valid backup (see the module docstring for the order).
        Raises WatermarkError when the primary is invalid, or backups exist, and no valid
        copy is left."""
        check_table(table)
        return self._recover(table, now)[0]

    def _recover(
        self, table: str, now: datetime | None, *, write: bool = True
    ) -> tuple[RecoveryReport, _Known]:
        """The valid primary, or the first valid copy in recovery order — written back to
        the primary (and its copies) when `write`; with `write=False` the copy is only
        returned (ETag None) and this store does not remember it."""
        primary = self.layout.watermark_primary(table)
        for attempt in range(CAS_ATTEMPTS):
            self.forget(table)
            try:
                got = self._get(primary)
            except S3_ERRORS as e:
                raise WatermarkError(
                    f"cannot read the watermark of {table} from {self._uri(primary)}: "
                    f"{_describe(e)}"
                ) from None
            if got is not None:
                try:
                    rec = self._parse(table, got.body, now)
                    known = _Known(rec, got.etag, got.body)
                    self._set_known(table, known)
                    return RecoveryReport(table, "primary", primary, rec, got.etag), known
                except ArchiveUnreadable:
                    raise  # S3 failed, not the record: nothing to recover over
                except WatermarkError as e:
                    primary_error = str(e)
                    log.error("watermark of %s at %s is invalid: %s", table, primary, e)
            else:
                primary_error = "missing"
            report = RecoveryReport(table, None, None, None, primary_error=primary_error)
            found_any = self._find_valid_copy(table, now, report)
            if report.record is None:
                if got is None and not found_any:
                    known = _Known(None, None, None)  # brand-new table
                    self._set_known(table, known)
                    return report, known
                raise WatermarkError(self._give_up_message(table, primary, report))
            if not write:
                return report, _Known(report.record, None, None)
            cond = {"IfMatch": got.etag} if got is not None else {"IfNoneMatch": "*"}
            try:
                info = self._write_primary(table, report.record, cond, recovered_from=report.source)
            except _Lost:
                time.sleep(min(0.05 * 2**attempt, 1.0) * (0.5 + random.random()))
                continue  # someone else restored or wrote it: read that
            report.etag = info.etag
            log.warning(
                "watermark of %s recovered from %s %s (primary %s); last_mysql_data_timestamp %s",
                table,
                report.source,
                self._uri(report.key or ""),
                primary_error,
                iso(report.record.last_mysql_data_timestamp),
            )
            self.write_copies(table)  # a restored primary gets current backups at once
            known = self._get_known(table) or _Known(report.record, info.etag, None)
            return report, known
        raise WatermarkConflict(f"watermark of {table} kept changing during recovery")

    def _give_up_message(self, table: str, primary: str, report: RecoveryReport) -> str:
        tried = "; ".join(f"{s} {k}: {e}" for s, k, e in report.rejected) or "none found"
        state = (
            "is missing"
            if report.primary_error == "missing"
            else (f"is invalid ({report.primary_error})")
        )
        return (
            f"watermark of {table} at {self._uri(primary)} {state} and no valid copy is "
            f"left to recover it from (tried: {tried}). Set it by hand with "
            f"`s3rs watermark set -t {table} --timestamp 'YYYY-MM-DD HH:MM:SS'` "
            "(the last cursor known to be in S3); s3rs never resets a table by itself."
        )

    def _find_valid_copy(self, table: str, now: datetime | None, report: RecoveryReport) -> bool:
        """Fill report.source/key/record with the first valid copy; return whether any
        copy (valid or not) exists or might exist (an error reading one counts)."""
        found_any = False
        for source, key, loader in self._candidates(table):
            try:
                text = loader()
            except Exception as e:  # noqa: BLE001 - any failure means "unknown", never "new"
                found_any = True
                report.rejected.append((source, key, f"unreadable: {_describe(e)}"))
                log.error("watermark of %s: cannot read %s %s: %s", table, source, key, e)
                continue
            if text is None:
                continue
            found_any = True
            try:
                rec = self._parse(table, text, now)
            except WatermarkError as e:
                report.rejected.append((source, key, str(e)))
                log.warning("watermark of %s: %s copy %s is invalid: %s", table, source, key, e)
                continue
            report.source, report.key, report.record = source, key, rec
            return True
        return found_any

    def _candidates(self, table: str) -> Iterator[tuple[str, str, Callable[[], Any]]]:
        """Recovery candidates in order, each loaded lazily: (source, key, load)."""
        today = self.layout.watermark_daily(table, datetime.now(UTC).date())

        def body(key: str) -> Callable[[], bytes | None]:
            def load() -> bytes | None:
                got = self._get(key)
                return None if got is None else got.body

            return load

        def failed(e: Exception) -> Callable[[], Any]:
            def load() -> Any:
                raise e

            return load

        yield "daily", today, body(today)
        try:
            dailies = self._daily_objects(table)
        except S3_ERRORS as e:
            yield "daily", "listing of daily backups", failed(e)
            dailies = []
        for obj in sorted(dailies, key=lambda o: o.day or "", reverse=True):
            if obj.key != today:
                yield "daily", obj.key, body(obj.key)
        try:
            sessions = self._newest_first(self._session_objects(table))
        except S3_ERRORS as e:
            yield "session", "listing of session backups", failed(e)
            sessions = []
        for obj in sessions:
            yield "session", obj.key, body(obj.key)
        if self.event_log_fallback is not None:
            fallback = self.event_log_fallback
            yield "event_log", f"dagster event log ({table})", lambda: fallback(table)
