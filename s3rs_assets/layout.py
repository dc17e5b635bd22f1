"""Every S3 key s3rs reads or writes, in one place.

Under the configured prefix (`S3RS_S3_PREFIX`, default `s3rs`):

    data/<schema>/<table>/<partition>/part-<position token>.parquet   backup files
    data/<schema>/<table>/_repair/<token>.parquet                     reconcile repair files
    manifests/<schema>/<target table>/<partition>/<digest>.json       Redshift COPY manifests
    watermarks/tables/<schema.table>.json                             primary watermark
    watermarks/backups/daily/<schema.table>_<YYYYMMDD>.json           daily backup (UTC date)
    watermarks/backups/sessions/<session id>/<schema.table>.json      session backup (run id)
    watermarks/edits/<schema.table>/before-<edit>-<UTC time>.json     record a manual edit
                                                                      replaced (never a
                                                                      recovery source)
    watermarks/archives/<schema.table>/<sha256 prefix>.json           old complete partitions
                                                                      folded out of a long
                                                                      record (immutable)

Data keys are deterministic in (table, partition, chunk start): a chunk read again
overwrites its own objects instead of adding duplicates. Nothing else in s3rs joins key
parts by hand; parsing a listed key back into its parts happens here too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from s3rs_assets.errors import ConfigError
from s3rs_assets.identifiers import split_qualified

REPAIR_DIR = "_repair"
_SESSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_DAILY_NAME = re.compile(r"^(?P<table>[^/]+)_(?P<day>\d{8})\.json$")


def check_table(table: object) -> str:
    """Watermark objects are named `schema.table`; both parts plain identifiers."""
    split_qualified(table, "table")
    return str(table)


def check_session(session_id: object) -> str:
    if not isinstance(session_id, str) or not _SESSION.match(session_id):
        raise ConfigError(f"invalid watermark session id {session_id!r}")
    return session_id


@dataclass(frozen=True)
class Layout:
    """The key scheme under one prefix; pure, no I/O."""

    prefix: str = "s3rs"

    def location(self, bucket: str) -> str:
        """Where the records of this layout in `bucket` live, as the snapshots name it."""
        return f"s3://{bucket}/{self.prefix.strip('/')}"

    def _key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p and p.strip("/"))

    # ------------------------------------------------------------------ data files

    def data_table(self, schema: str, table: str) -> str:
        """Prefix (ending in '/') of every data object of one source table."""
        return self._key("data", schema, table) + "/"

    def data_partition(self, schema: str, table: str, partition: str) -> str:
        return self._key("data", schema, table, partition) + "/"

    def data_object(self, schema: str, table: str, partition: str, token: str) -> str:
        return self._key("data", schema, table, partition, f"part-{token}.parquet")

    def repair_object(self, schema: str, table: str, token: str) -> str:
        return self._key("data", schema, table, REPAIR_DIR, f"{token}.parquet")

    def partition_of(self, schema: str, table: str, key: str) -> str | None:
        """The partition folder of a listed data key (`_repair` for repair files)."""
        head = self.data_table(schema, table)
        if not key.startswith(head):
            return None
        rest = key[len(head) :]
        return rest.split("/", 1)[0] if "/" in rest else None

    # ------------------------------------------------------------- COPY manifests

    def copy_manifest(self, schema: str, table: str, partition: str, digest: str) -> str:
        return self._key("manifests", schema, table, partition, f"{digest}.json")

    # ----------------------------------------------------------------- watermarks

    def watermarks(self) -> str:
        """Prefix of every watermark object (primary and backups): never data."""
        return self._key("watermarks") + "/"

    def watermark_tables(self) -> str:
        return self._key("watermarks", "tables") + "/"

    def watermark_primary(self, table: str) -> str:
        return self._key("watermarks", "tables", f"{check_table(table)}.json")

    def watermark_backups(self) -> str:
        """Prefix of every daily and session copy: the fleet's copies in one listing."""
        return self._key("watermarks", "backups") + "/"

    def watermark_dailies(self) -> str:
        return self._key("watermarks", "backups", "daily") + "/"

    def watermark_daily(self, table: str, day: date) -> str:
        name = f"{check_table(table)}_{day:%Y%m%d}.json"
        return self._key("watermarks", "backups", "daily", name)

    def watermark_sessions(self) -> str:
        return self._key("watermarks", "backups", "sessions") + "/"

    def watermark_session(self, table: str, session_id: str) -> str:
        name = f"{check_table(table)}.json"
        return self._key("watermarks", "backups", "sessions", check_session(session_id), name)

    def watermark_edits(self, table: str) -> str:
        """Prefix of the records `watermark set/reset/restore` replaced: listed by
        `watermark history`, put back only by `watermark restore`, never by recovery."""
        return self._key("watermarks", "edits", check_table(table)) + "/"

    def watermark_edit_copy(self, table: str, label: str) -> str:
        return self.watermark_edits(table) + f"{check_session(label)}.json"

    def parse_edit_copy(self, table: str, key: str) -> str | None:
        """The label of a listed edit copy of `table`, or None."""
        head = self.watermark_edits(table)
        name = key[len(head) :] if key.startswith(head) else ""
        if "/" in name or not name.endswith(".json"):
            return None
        return name[: -len(".json")]

    def watermark_archives(self, table: str) -> str:
        """Prefix of a table's archive objects (watermark/archive.py): content-addressed,
        written once, referenced by the primary and its copies; under `watermarks/`, so
        never data to s3clean."""
        return self._key("watermarks", "archives", check_table(table)) + "/"

    def watermark_archive_root(self) -> str:
        """Prefix of every table's archive objects."""
        return self._key("watermarks", "archives") + "/"

    def parse_archive(self, key: str) -> str | None:
        """The table of a listed archive key, or None for anything else."""
        head = self.watermark_archive_root()
        parts = key[len(head) :].split("/") if key.startswith(head) else []
        if len(parts) != 2 or not parts[1].endswith(".json"):
            return None
        return parts[0]

    def watermark_archive(self, table: str, digest: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{16,64}", digest):
            raise ConfigError(f"invalid watermark archive digest {digest!r}")
        return self.watermark_archives(table) + f"{digest}.json"

    def parse_primary(self, key: str) -> str | None:
        """The table of a listed primary key, or None for anything else."""
        head = self.watermark_tables()
        name = key[len(head) :] if key.startswith(head) else ""
        if "/" in name or not name.endswith(".json"):
            return None
        return name[: -len(".json")]

    def parse_daily(self, key: str) -> tuple[str, str] | None:
        """(table, YYYYMMDD) of a listed daily backup key, or None."""
        head = self.watermark_dailies()
        m = _DAILY_NAME.match(key[len(head) :]) if key.startswith(head) else None
        return (m["table"], m["day"]) if m else None

    def parse_session(self, key: str) -> tuple[str, str] | None:
        """(session id, table) of a listed session backup key, or None."""
        head = self.watermark_sessions()
        parts = key[len(head) :].split("/") if key.startswith(head) else []
        if len(parts) != 2 or not parts[1].endswith(".json"):
            return None
        return parts[0], parts[1][: -len(".json")]
