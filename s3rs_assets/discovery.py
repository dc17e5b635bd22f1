"""Zero-configuration onboarding: which tables of a schema s3rs can sync, and how.

`s3rs tables discover --schema S` prints a ready tables.yaml stanza for every table with a
usable cursor column (DATETIME/TIMESTAMP named like update_at, preferably indexed) and a
primary key, and says why the others were left out.
"""

from __future__ import annotations

import re
from typing import Any

from s3rs_assets.errors import ConfigError, S3rsError

CURSOR_NAME = re.compile(
    r"^(last_?)?(update|updated|modify|modified|mod|change|changed|edit|edited)"
    r"(_?(at|time|ts|date|datetime|on|timestamp|dt))?$|^(mtime|last_modified|lastmodified)$",
    re.IGNORECASE,
)
#: column names that look like secrets or personal data: `discover` proposes excluding them
SECRET_NAME = re.compile(
    r"(^|_)(password|passwd|pwd|pass_?hash|secret|salt|api_?key|access_?key|private_?key|"
    r"token|access_?token|refresh_?token|auth_?token|otp|ssn|social_security(_number)?|"
    r"tax_?id|national_?id|passport(_?(no|number))?|credit_?card(_?number)?|card_?number|"
    r"cvv|cvc|iban|pin)($|_)",
    re.IGNORECASE,
)
_PREFERRED = ("update_at", "updated_at", "modified_at", "update_time", "updated_time")


def _rank(name: str) -> int:
    low = name.lower()
    return _PREFERRED.index(low) if low in _PREFERRED else len(_PREFERRED)


def discover(conn: Any, schema: str) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """(usable tables as tables.yaml entries, [(table, why left out)])."""
    from s3rs_assets.identifiers import check_identifier
    from s3rs_assets.types import SourceColumn, column_type

    check_identifier(schema, "schema")
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = %s ORDER BY TABLE_NAME",
            (schema,),
        )
        found = cur.fetchall()
        cur.execute(
            "SELECT TABLE_NAME, COLUMN_NAME, LOWER(DATA_TYPE), LOWER(COLUMN_TYPE), IS_NULLABLE, "
            "CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE "
            "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
            "ORDER BY TABLE_NAME, ORDINAL_POSITION",
            (schema,),
        )
        columns: dict[str, list[SourceColumn]] = {}
        for r in cur.fetchall():
            columns.setdefault(r[0], []).append(
                SourceColumn(r[1], r[2], r[3], r[4] == "YES", r[5], r[6], r[7])
            )
        cur.execute(
            "SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME "
            "FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
            "ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
            (schema,),
        )
        pks: dict[str, list[str]] = {}
        leading: dict[str, set[str]] = {}
        for tname, index, seq, col in cur.fetchall():
            if index == "PRIMARY":
                pks.setdefault(tname, []).append(col)
            if seq == 1:
                leading.setdefault(tname, set()).add(col.lower())
    if not found:
        raise ConfigError(f"schema {schema!r} does not exist or holds no table this user can see")
    usable, skipped = [], []
    for tname, ttype in found:
        qualified = f"{schema}.{tname}"
        if ttype != "BASE TABLE":
            skipped.append((qualified, f"a {ttype.lower()}, not a table"))
            continue
        try:
            check_identifier(tname, "table")
        except ConfigError:
            skipped.append((qualified, "name is not a plain identifier s3rs accepts"))
            continue
        cols = columns.get(tname, [])
        bad = []
        for c in cols:
            try:
                column_type(c)
            except S3rsError:
                bad.append(f"{c.name} ({c.column_type})")
        if bad:
            skipped.append((qualified, f"column type(s) s3rs cannot carry: {', '.join(bad)}"))
            continue
        pk = pks.get(tname)
        if not pk:
            skipped.append((qualified, "no primary key"))
            continue
        temporal = [c for c in cols if c.data_type in ("datetime", "timestamp")]
        named = [c for c in temporal if CURSOR_NAME.match(c.name)]
        if not named:
            have = ", ".join(c.name for c in temporal) or "none"
            skipped.append(
                (
                    qualified,
                    f"no DATETIME/TIMESTAMP column named like updated_at "
                    f"(date/time columns: {have})",
                )
            )
            continue
        idx = leading.get(tname, set())
        named.sort(key=lambda c: (c.name.lower() not in idx, _rank(c.name), c.name))
        cursor = named[0]
        entry: dict[str, Any] = {
            "name": qualified,
            "cursor": cursor.name,
            "primary_key": pk,
            "indexed": cursor.name.lower() in idx,
            "nullable": cursor.nullable,
            "others": [c.name for c in named[1:]],
            "secrets": [
                c.name
                for c in cols
                if SECRET_NAME.search(c.name) and c.name not in pk and c is not cursor
            ],
        }
        usable.append(entry)
    return usable, skipped


def render_discovery(
    schema: str, usable: list[dict[str, Any]], skipped: list[tuple[str, str]]
) -> str:
    lines = [
        f"# tables.yaml entries for MySQL schema `{schema}`, found by `s3rs tables discover`.",
        "# Review the cursor, primary key and start of each before using them.",
        "tables:" if usable else "tables: []",
    ]
    for e in usable:
        lines.append(f"  - name: {e['name']}")
        lines.append(f"    cursor: {e['cursor']}")
        lines.append(f"    primary_key: [{', '.join(e['primary_key'])}]")
        if not e["indexed"]:
            lines.append(
                f"    # {e['cursor']} has no index: chunk planning scans the table; add "
                f"INDEX ({e['cursor']}, {', '.join(e['primary_key'])})"
            )
        if e["nullable"]:
            lines.append(
                f"    # {e['cursor']} is nullable: rows with NULL are reported, not copied"
            )
        if e.get("secrets"):
            lines.append(
                "    # these columns look like secrets or personal data: excluded columns are "
                "never read from MySQL"
            )
            lines.append(f"    exclude_columns: [{', '.join(e['secrets'])}]")
        if e["others"]:
            lines.append(f"    # other candidate cursors: {', '.join(e['others'])}")
        lines.append("    start: 2025-01-01  # first partition; set it to the oldest data you need")
        lines.append("    partition: daily")
    if skipped:
        lines.append("# Left out:")
        lines += [f"#   {name}: {why}" for name, why in skipped]
    return "\n".join(lines)
