"""The spare copies of a watermark record: one per UTC day and one per run (session).

They are byte-identical copies of the primary, written when a stage of a run ends, when it
fails, after a manual change and after a recovery — not at every checkpoint — so they are
at most one run behind the primary and a lost primary costs at most a re-read of what the
last run read. Their S3 keys keep the old system's layout (`watermarks/backups/daily/...`,
`watermarks/backups/sessions/...`, `layout.py`); in s3rs "backup" names stage 1 only.
`copy_status` shows every location, `cleanup_copies` deletes old ones but never a
primary, nor the newest valid copy of any table.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from s3rs_assets.errors import ConfigError, WatermarkError
from s3rs_assets.layout import check_table
from s3rs_assets.watermark.objects import S3_ERRORS, StoreBase, _describe, _Obj, _utc, log
from s3rs_assets.watermark.record import iso
from s3rs_assets.watermark.reports import CleanupReport, SaveInfo


class Copies(StoreBase):
    """Writing, inspecting and cleaning up the daily and session copies."""

    def write_copies(self, table: str) -> SaveInfo:
        """Copy the current record, byte-identical, to today's daily and this session's
        backup. Called at the end of a stage, on failure, after a manual change and after a
        recovery: backups are at most one run behind the primary. Reads the primary first
        if this store has not seen it; writes nothing for a table without a record. A
        failed copy is logged and reported in the result, never raised."""
        check_table(table)
        known = self._get_known(table)
        if known is None:
            self.read(table)
            known = self._get_known(table)
        info = SaveInfo(table=table, session_id=self.session_id)
        if known is None or known.body is None:
            return info
        info.etag = known.etag
        keys = {
            "daily": self.layout.watermark_daily(table, datetime.now(UTC).date()),
            "session": self.layout.watermark_session(table, self.session_id),
        }
        for location, key in keys.items():
            try:
                self._put(key, known.body)
                info.written[location] = key
            except (*S3_ERRORS, WatermarkError) as e:
                info.failed[location] = _describe(e)
                log.error(
                    "watermark of %s: %s backup %s not written: %s",
                    table,
                    location,
                    self._uri(key),
                    _describe(e),
                )
        log.info(
            "backed up watermark of %s (etag %s) to %s%s",
            table,
            known.etag,
            ", ".join(info.written) or "nothing",
            f"; FAILED {', '.join(info.failed)}" if info.failed else "",
        )
        return info

    def tables_with_copies(self) -> set[str]:
        """Tables with a daily or a session copy in S3, from one LIST of the copies' common
        prefix for the whole fleet (the guard's tick; one table's recovery search lists the
        session copies of every table, so a per-table search over a fleet costs tables x
        sessions)."""
        return {o.table for o in self._copy_objects()}

    def copy_status(
        self, table: str, *, now: datetime | None = None, source_now: datetime | None = None
    ) -> dict[str, Any]:
        """State of every location of `table`'s watermark (JSON-able, for metadata/CLI).

        `now` is the wall clock (UTC) for ages; `source_now` the source clock for the
        future-cursor check. A backup is `current` when byte-identical to the primary.
        """
        check_table(table)
        wall = _utc(now)
        primary_key = self.layout.watermark_primary(table)

        def describe(key: str | None) -> dict[str, Any]:
            entry: dict[str, Any] = {"key": key, "present": False, "valid": False}
            if key is None:
                return entry
            try:
                got = self._get(key)
            except S3_ERRORS as e:
                entry["error"] = f"unreadable: {_describe(e)}"
                return entry
            if got is None:
                return entry
            entry["present"] = True
            entry["etag"] = got.etag
            if got.last_modified is not None:
                entry["age_seconds"] = round((wall - _utc(got.last_modified)).total_seconds())
            try:
                rec = self._parse(table, got.body, source_now)
            except WatermarkError as e:
                entry["error"] = str(e)
                return entry
            entry["valid"] = True
            entry["last_mysql_data_timestamp"] = iso(rec.last_mysql_data_timestamp)
            entry["updated_at"] = iso(rec.updated_at)
            return entry

        primary = describe(primary_key)
        dailies = sorted(self._daily_objects(table), key=lambda o: o.day or "", reverse=True)
        today = self.layout.watermark_daily(table, wall.date())
        daily = describe(dailies[0].key if dailies else today)
        daily["count"] = len(dailies)
        daily["today"] = daily["key"] == today
        sessions = self._newest_first(self._session_objects(table))
        session = describe(sessions[0].key if sessions else None)
        session["count"] = len(sessions)
        for entry in (daily, session):
            entry["current"] = bool(entry.get("etag")) and entry.get("etag") == primary.get("etag")
        return {
            "table": table,
            "checked_at": wall.replace(tzinfo=None).isoformat(timespec="seconds"),
            "primary": primary,
            "daily": daily,
            "session": session,
            "healthy": primary["valid"] and (daily["valid"] or session["valid"]),
        }

    def cleanup_copies(
        self, days_to_keep: int, dry_run: bool = False, now: datetime | None = None
    ) -> CleanupReport:
        """Delete daily and session backups last written more than `days_to_keep` days ago,
        and archives (archive.py) as old that no kept record references.

        Never deletes a primary, nor the newest valid backup of any table (whatever its
        age), nor keys that are not recognisable backups. `now` is the wall clock (UTC).
        Long on purpose: the keep rules (age, newest valid per table) and the deletes belong
        together.
        """
        if (
            isinstance(days_to_keep, bool)
            or not isinstance(days_to_keep, int)
            or (days_to_keep < 0)
        ):
            raise ConfigError(f"days_to_keep must be a whole number >= 0, not {days_to_keep!r}")
        cutoff = _utc(now) - timedelta(days=days_to_keep)
        report = CleanupReport(days_to_keep, dry_run, cutoff.replace(tzinfo=None))
        per_table: dict[str, list[_Obj]] = {}
        for obj in self._copy_objects():
            per_table.setdefault(obj.table, []).append(obj)

        doomed: list[str] = []
        for table, objs in sorted(per_table.items()):
            old = [o for o in objs if _utc(o.last_modified) < cutoff]
            report.kept_recent += len(objs) - len(old)
            if not old:
                continue
            keep, error = self._newest_valid(table, objs)
            if error is not None:
                # Cannot tell which copy is the newest valid one: delete nothing of it.
                report.failed.update({o.key: f"kept: {error}" for o in old})
                log.error("watermark backup cleanup skips %s: %s", table, error)
                continue
            for o in old:
                if keep is not None and o.key == keep.key:
                    report.kept_newest[table] = o.key
                else:
                    doomed.append(o.key)

        report.archives = self._unreferenced_archives(cutoff, set(doomed), report)
        doomed += report.archives
        report.deleted = doomed if dry_run else []
        if dry_run:
            log.info("watermark backup cleanup (dry run): would delete %d", len(doomed))
            return report
        for i in range(0, len(doomed), 1000):
            batch = doomed[i : i + 1000]
            try:
                resp = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except S3_ERRORS as e:
                report.failed.update({k: _describe(e) for k in batch})
                continue
            errors = {e["Key"]: e.get("Code", "error") for e in resp.get("Errors", [])}
            report.failed.update(errors)
            report.deleted += [k for k in batch if k not in errors]
        log.info(
            "watermark backup cleanup: deleted %d, kept %d recent and %d newest-valid, %d failed",
            len(report.deleted),
            report.kept_recent,
            len(report.kept_newest),
            len(report.failed),
        )
        return report

    def _unreferenced_archives(
        self, cutoff: datetime, going: set[str], report: CleanupReport
    ) -> list[str]:
        """Archives written before `cutoff` that no record kept after this cleanup
        references: not the primary, not a daily or session copy outside `going`, not an
        edit copy (`watermark restore` may put one back). The age guard covers an archive
        whose record's compare-and-swap has not happened yet. A table whose records cannot
        all be read keeps every archive."""
        per_table: dict[str, list[str]] = {}
        for item in self._list(self.layout.watermark_archive_root()):
            table = self.layout.parse_archive(item["Key"])
            if table is not None and _utc(item["LastModified"]) < cutoff:
                per_table.setdefault(table, []).append(item["Key"])
        if not per_table:
            return []
        copies: dict[str, list[str]] = {}
        for obj in self._copy_objects():
            if obj.key not in going:
                copies.setdefault(obj.table, []).append(obj.key)
        out: list[str] = []
        for table, old in sorted(per_table.items()):
            try:
                keys = [self.layout.watermark_primary(table), *copies.get(table, [])]
                keys += [i["Key"] for i in self._list(self.layout.watermark_edits(table))]
                used = {ref for key in keys if (ref := self._archive_of(key)) is not None}
            except (S3_ERRORS, ConfigError) as e:
                report.failed.update({k: f"kept: {_describe(e)}" for k in old})
                log.error("watermark backup cleanup keeps %s's archives: %s", table, e)
                continue
            out += [k for k in old if k not in used]
        return out

    def _archive_of(self, key: str) -> str | None:
        """The archive key the record stored at `key` references (None: none, or no
        such object, or not a record)."""
        got = self._get(key)
        if got is None:
            return None
        try:
            ref = json.loads(got.body).get("archive")
        except (ValueError, AttributeError):
            return None
        return ref.get("key") if isinstance(ref, dict) else None

    def _newest_valid(self, table: str, objs: list[_Obj]) -> tuple[_Obj | None, str | None]:
        """The newest backup that validates, or (None, error) if one could not be read."""
        try:
            ordered = self._newest_first(objs)
            for obj in ordered:
                got = self._get(obj.key)
                if got is None:
                    continue
                try:
                    self._parse(table, got.body, None)
                except WatermarkError:
                    continue
                return obj, None
        except S3_ERRORS as e:
            return None, f"cannot read {table}'s backups: {_describe(e)}"
        return None, None

