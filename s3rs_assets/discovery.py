"""Zero-configuration onboarding: which tables of a schema s3rs can sync, and how.

`s3rs tables discover --schema S` prints a ready tables.yaml stanza for every table with a
usable cursor column (DATETIME/TIMESTAMP named like update_at, preferably indexed) and a
primary key, and says why the others were left out.

For each table it also proposes the partition size from the row count and the cursor's
time span (`propose_partition`: a few thousand to a few million rows per partition holding
data, at most a few thousand partitions from the oldest row to today), with the reason as
a YAML comment, and flags columns whose names look like secrets or personal data with a
commented `exclude_columns` suggestion.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from s3rs_assets.errors import ConfigError, S3rsError
from s3rs_assets.identifiers import check_identifier, mysql_quote, mysql_table
from s3rs_assets.source import server_now
from s3rs_assets.types import SourceColumn, column_type

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


def _introspect(conn: Any, schema: str) -> tuple[list, dict, dict, dict]:
    """(tables with their type, columns per table, primary key per table, columns leading
    an index per table) of `schema`, from information_schema."""
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
    return found, columns, pks, leading


def discover(conn: Any, schema: str) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """(usable tables as tables.yaml entries, [(table, why left out)]); each entry is
    profiled (rows, cursor span, proposed partition size, secret-looking columns).
    Long on purpose: one pass over the catalog rows, each a tables.yaml stanza or a reason."""
    check_identifier(schema, "schema")
    found, columns, pks, leading = _introspect(conn, schema)
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
    now = server_now(conn)
    for entry in usable:
        entry.update(profile(conn, schema, entry["name"].split(".", 1)[1], entry["cursor"], now))
    return usable, skipped


# ------------------------------------------------------------------- partition size

#: Partition sizes, smallest first, with their length in seconds (a month as 1/12 year).
SIZES = (("hourly", 3600), ("daily", 86400), ("weekly", 7 * 86400), ("monthly", 2629746))
MAX_PARTITIONS = 3000  # from the oldest row to today: Dagster's UI and planning stay light
MIN_ROWS = 2000  # per partition holding data: below that, runs cost more than their rows
ROW_ESTIMATE_TRUSTED = 5_000_000  # above this, information_schema's estimate is used
_SENSIBLE = "1000-01-01"  # zero dates and the like are left out of the span


def profile(conn: Any, schema: str, table: str, cursor: str, now: datetime) -> dict[str, Any]:
    """Rows, oldest and newest cursor value, and the proposed partition size with its reason.
    Exact COUNT(*) up to ROW_ESTIMATE_TRUSTED rows, InnoDB's estimate above."""
    c = mysql_quote(cursor)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_ROWS FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (schema, table),
        )
        estimate = int((cur.fetchone() or [0])[0] or 0)
        where = f"WHERE {c} >= '{_SENSIBLE}'"
        if estimate >= ROW_ESTIMATE_TRUSTED:
            cur.execute(f"SELECT MIN({c}), MAX({c}) FROM {mysql_table(schema, table)} {where}")
            first, last = cur.fetchone()
            rows, approx = estimate, True
        else:
            cur.execute(f"SELECT COUNT(*) FROM {mysql_table(schema, table)}")
            rows, approx = int(cur.fetchone()[0]), False
            cur.execute(f"SELECT MIN({c}), MAX({c}) FROM {mysql_table(schema, table)} {where}")
            first, last = cur.fetchone()
    size, reason = propose_partition(rows, first, last, now, approx=approx)
    return {"rows": rows, "first": first, "last": last, "partition": size, "reason": reason}


def propose_partition(
    rows: int, first: datetime | None, last: datetime | None, now: datetime, *, approx: bool = False
) -> tuple[str, str]:
    """(size, reason): the smallest size whose partitions from `first` to `now` number at
    most MAX_PARTITIONS and whose partitions holding data get at least MIN_ROWS rows on
    average (rows spread over first..last); else the largest size within MAX_PARTITIONS."""
    if not rows or first is None or last is None:
        return "daily", "empty table (no dated row): daily, the default"
    span = max((last - first).total_seconds(), 1.0)
    total = max((max(now, last) - first).total_seconds(), 1.0)
    counted = f"{'~' if approx else ''}{rows:,} rows over {first:%Y-%m-%d}..{last:%Y-%m-%d}"
    fitting = [(n, secs) for n, secs in SIZES if math.ceil(total / secs) <= MAX_PARTITIONS]
    if not fitting:
        fitting = [SIZES[-1]]
    name, secs = next(
        ((n, s) for n, s in fitting if rows / math.ceil(span / s) >= MIN_ROWS), fitting[-1]
    )
    per = rows / math.ceil(span / secs)
    parts = math.ceil(total / secs)
    return name, (
        f"{counted}, ~{per:,.0f} rows per partition with data, {parts:,} {name} partitions "
        f"up to today: {name}"
    )


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
        if e.get("first") is not None:
            lines.append(f"    start: {e['first']:%Y-%m-%d}  # the oldest row's day")
        else:
            lines.append(
                "    start: 2025-01-01  # first partition; set it to the oldest data you need"
            )
        lines.append(f"    # {e.get('reason', 'daily, the default')}")
        lines.append(f"    partition: {e.get('partition', 'daily')}")
    if skipped:
        lines.append("# Left out:")
        lines += [f"#   {name}: {why}" for name, why in skipped]
    return "\n".join(lines)
