"""Bringing records written by an older s3rs up to `SCHEMA_VERSION` (and refusing newer).

Version 1 kept one entry per partition, empty ones included; version 2 keeps complete
empty stretches as closed ranges; version 3 writes key values JSON cannot hold (DATE,
DATETIME, TIME, DECIMAL) tagged (`key_codec`), so an s3rs of version 2, which would take a
tag for a string, refuses them; version 4 may keep old complete partitions in an archive
object (`archive.py`). Documents of the old system carry no version and read as
version 1. Bump `SCHEMA_VERSION` on any incompatible change, with a step here.
"""

from __future__ import annotations

from typing import Any

from s3rs_assets.errors import WatermarkError

SCHEMA_VERSION = 4


def migrate(raw: dict[str, Any]) -> dict[str, Any]:
    """Bring an older document up to SCHEMA_VERSION; refuse one from a newer s3rs."""
    version = raw.get("schema_version")
    if version is None:
        # The old system's documents carried no version; they are version-1 compatible
        # except for what they lack, which the defaults fill.
        raw = {**raw, "schema_version": 1}
        version = 1
    if not isinstance(version, int) or version < 1:
        raise WatermarkError(f"watermark schema_version {version!r} is invalid")
    if version > SCHEMA_VERSION:
        raise WatermarkError(
            f"watermark schema_version {version} is newer than this s3rs understands "
            f"({SCHEMA_VERSION}); upgrade s3rs"
        )
    if version == 1:
        raw = _v1_to_v2(raw)
    if raw["schema_version"] == 2:
        raw = _v2_to_v3(raw)
    if raw["schema_version"] == 3:
        raw = _v3_to_v4(raw)
    return raw


def _v2_to_v3(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 2 wrote DATE/DATETIME/DECIMAL key values as untagged strings. Their column
    types are not in the record, so they stay strings: the keyset SQL compares them as MySQL
    does, and `key_codec.canonical` makes them equal to the native values a run holds. The
    next checkpoint of the partition writes them tagged."""
    return {**raw, "schema_version": 3}


def _v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 2 keeps complete empty partitions as closed ranges instead of entries."""
    parts = raw.get("partitions")
    if not isinstance(parts, dict):
        return {**raw, "schema_version": 2}
    kept, empty = {}, []
    for key, p in parts.items():
        if isinstance(p, dict) and p.get("status") == "complete" and not p.get("files"):
            empty.append((p.get("window_start"), p.get("window_end")))
        else:
            kept[key] = p
    closed: list[dict[str, Any]] = []
    for start, end in sorted(e for e in empty if all(isinstance(v, str) for v in e)):
        if closed and closed[-1]["end"] >= start:
            closed[-1]["end"] = max(closed[-1]["end"], end)
        else:
            closed.append({"start": start, "end": end})
    return {**raw, "schema_version": 2, "partitions": kept, "closed": closed}


def _v3_to_v4(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 4 may fold old complete partitions into an archive object (`archive` field,
    watermark/archive.py); a version-3 document has none and reads unchanged. The bump makes
    an older s3rs refuse a folded record (it would miss the archived partitions) instead of
    taking it for an inconsistent one."""
    return {**raw, "schema_version": 4}
