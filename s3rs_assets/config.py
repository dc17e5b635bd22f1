"""The table list (tables.yaml) and the environment a deployment is configured with.

Everything here is validated when it is read, so a typo fails before any connection is
opened or any object written, with a message naming the table and the field.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import yaml

from s3rs_assets.errors import ConfigError
from s3rs_assets.identifiers import check_identifier, split_qualified
from s3rs_assets.times import parse_duration

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TABLES_FILE = REPO_ROOT / "tables.yaml"

PARTITION_SIZES = ("hourly", "daily", "weekly", "monthly")
_KNOWN_KEYS = {
    "name",
    "cursor",
    "primary_key",
    "start",
    "partition",
    "chunk_rows",
    "lag",
    "target",
    "parallelism",
    "reader",
    "deletes",
    "exclude_columns",
}


def parse_start(value: object, table: str) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    try:
        return datetime.fromisoformat(str(value)).replace(tzinfo=None)
    except ValueError:
        raise ConfigError(
            f"table {table}: invalid start {value!r}: expected 'YYYY-MM-DD' or "
            "'YYYY-MM-DD HH:MM:SS'"
        ) from None


@dataclass(frozen=True)
class TableConfig:
    """One configured table; `primary_key` None means "ask MySQL"."""

    name: str
    cursor: str = "update_at"
    primary_key: tuple[str, ...] | None = None
    start: datetime = datetime(2025, 1, 1)
    partition: Literal["hourly", "daily", "weekly", "monthly"] = "daily"
    #: rows per chunk (one Spark job, one checkpoint). 200k since 2026-11-28 (evt28): with the
    #: sub-range reads' FORCE INDEX, 200k-row chunks backed the 1M decimal table up faster
    #: than 100k (fewer jobs, plans and checkpoints) at no higher peak RSS (a task's
    #: sub-range is chunk_rows / parallelism rows: lower it for rows of many KB)
    chunk_rows: int = 200_000
    lag: timedelta = timedelta(minutes=5)
    target: str = ""
    parallelism: int = 2
    reader: Literal["connectorx", "jdbc"] = "connectorx"
    #: how reconcile removes rows deleted in MySQL: delete them, or stamp _s3rs_deleted_at
    deletes: Literal["hard", "soft"] = "hard"
    #: columns never selected from MySQL (secrets, PII): absent from S3 and the warehouse
    exclude_columns: tuple[str, ...] = ()

    @property
    def schema(self) -> str:
        return self.name.split(".")[0]

    @property
    def table(self) -> str:
        return self.name.split(".")[1]

    @property
    def target_schema(self) -> str:
        return (self.target or self.name).split(".")[0]

    @property
    def target_table(self) -> str:
        return (self.target or self.name).split(".")[1]

    @property
    def key_prefix(self) -> list[str]:
        """Dagster asset key prefix: `<schema>/<table>`."""
        return [self.schema, self.table]

    @property
    def slug(self) -> str:
        """File-name-safe form used for watermark objects: `schema.table`."""
        return self.name

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TableConfig:
        if not isinstance(raw, dict):
            raise ConfigError(f"each entry under 'tables' must be a mapping, got {raw!r}")
        name = raw.get("name")
        split_qualified(name, "table")
        unknown = set(raw) - _KNOWN_KEYS
        if unknown:
            raise ConfigError(f"table {name}: unknown setting(s) {sorted(unknown)}")
        cursor = check_identifier(raw.get("cursor", "update_at"), f"table {name}: cursor column")
        pk = raw.get("primary_key")
        if pk is not None:
            if isinstance(pk, str):
                pk = [pk]
            if not isinstance(pk, list) or not pk:
                raise ConfigError(f"table {name}: primary_key must be a list of column names")
            pk = tuple(check_identifier(c, f"table {name}: primary key column") for c in pk)
        partition = raw.get("partition", "daily")
        if partition not in PARTITION_SIZES:
            raise ConfigError(
                f"table {name}: partition must be one of {', '.join(PARTITION_SIZES)}, "
                f"not {partition!r}"
            )
        chunk_rows = raw.get("chunk_rows", TableConfig.chunk_rows)
        if not isinstance(chunk_rows, int) or isinstance(chunk_rows, bool) or chunk_rows < 1:
            raise ConfigError(
                f"table {name}: chunk_rows must be a positive integer, not {chunk_rows!r}"
            )
        parallelism = raw.get("parallelism", 2)
        if (
            not isinstance(parallelism, int)
            or isinstance(parallelism, bool)
            or not 1 <= parallelism <= 64
        ):
            raise ConfigError(f"table {name}: parallelism must be an integer from 1 to 64")
        reader = raw.get("reader", "connectorx")
        if reader not in ("connectorx", "jdbc"):
            raise ConfigError(
                f"table {name}: reader must be 'connectorx' or 'jdbc', not {reader!r}"
            )
        deletes = raw.get("deletes", "hard")
        if deletes not in ("hard", "soft"):
            raise ConfigError(f"table {name}: deletes must be 'hard' or 'soft', not {deletes!r}")
        target = raw.get("target") or name
        split_qualified(target, f"table {name}: target")
        excluded = _exclude_columns(raw.get("exclude_columns"), name, cursor, pk)
        return cls(
            name=name,
            cursor=cursor,
            primary_key=pk,
            start=parse_start(raw.get("start", "2025-01-01"), name),
            partition=partition,
            chunk_rows=chunk_rows,
            lag=parse_duration(raw.get("lag", "5m"), f"table {name}: lag"),
            target=target,
            parallelism=parallelism,
            reader=reader,
            deletes=deletes,
            exclude_columns=excluded,
        )


def _exclude_columns(
    value: object, name: str, cursor: str, pk: tuple[str, ...] | None
) -> tuple[str, ...]:
    """The validated `exclude_columns` list. Names are compared case-insensitively, as
    MySQL compares column names; the cursor and key columns cannot be excluded (every
    read, checkpoint and merge needs them). Whether the columns exist is checked against
    MySQL's catalog by `source.describe`, before any row is read."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ConfigError(
            f"table {name}: exclude_columns must be a non-empty list of column names"
        )
    names = tuple(check_identifier(c, f"table {name}: exclude_columns entry") for c in value)
    folded = [n.lower() for n in names]
    twice = sorted({n for n in names if folded.count(n.lower()) > 1})
    if twice:
        raise ConfigError(f"table {name}: exclude_columns lists {twice} more than once")
    needed = {cursor.lower(): "the cursor"}
    needed.update({k.lower(): "a primary key column" for k in pk or ()})
    refused = [f"{n!r} ({needed[n.lower()]})" for n in names if n.lower() in needed]
    if refused:
        raise ConfigError(
            f"table {name}: exclude_columns cannot exclude {', '.join(refused)}: s3rs needs "
            "the cursor and the primary key to read, checkpoint and merge rows"
        )
    return names


def tables_path() -> Path:
    return Path(os.environ.get("S3RS_TABLES") or DEFAULT_TABLES_FILE)


#: Parsed table lists by (path, mtime_ns, size): a process that loads the code location
#: and then reconstructs one table's job (each `s3rs sync`, each run worker) parses a file
#: of 2,000 tables once, not once per lookup.
_PARSED: dict[tuple[str, int, int], tuple[TableConfig, ...]] = {}


def load_tables(path: Path | str | None = None) -> list[TableConfig]:
    """Read and validate the table list; an absent file means no tables."""
    p = Path(path) if path else tables_path()
    if not p.exists():
        if path or os.environ.get("S3RS_TABLES"):
            raise ConfigError(f"table list {p} does not exist (S3RS_TABLES)")
        return []
    st = p.stat()
    key = (str(p.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _PARSED:
        _PARSED.clear()  # only the current version of a file is worth keeping
        _PARSED[key] = tuple(_parse_tables(p))
    return list(_PARSED[key])


def _parse_tables(p: Path) -> list[TableConfig]:
    try:
        # the C loader when PyYAML has it: a 2,000-table file parses in a fraction of the time
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        doc = yaml.load(p.read_text(), Loader=loader) or {}  # noqa: S506 (a safe loader)
    except yaml.YAMLError as e:
        raise ConfigError(f"{p} is not valid YAML: {e}") from None
    entries = doc.get("tables") if isinstance(doc, dict) else None
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"{p}: 'tables' must be a list")
    tables = [TableConfig.from_dict(e) for e in entries]
    seen: set[str] = set()
    for t in tables:
        if t.name in seen:
            raise ConfigError(f"{p}: table {t.name} is listed twice")
        seen.add(t.name)
    return tables


def find_table(tables: list[TableConfig], name: str) -> TableConfig:
    split_qualified(name, "table")
    for t in tables:
        if t.name == name:
            return t
    known = ", ".join(t.name for t in tables) or "none"
    raise ConfigError(f"unknown table {name!r}: not in {tables_path()} (configured: {known})")


@dataclass(frozen=True)
class DatabaseURL:
    """A parsed `scheme://user:password@host:port/database`; repr never shows the password."""

    scheme: str
    user: str
    password: str = field(repr=False)
    host: str
    port: int
    database: str

    @classmethod
    def parse(
        cls, url: str, *, env: str, schemes: tuple[str, ...], default_port: int
    ) -> DatabaseURL:
        if not url:
            raise ConfigError(f"{env} is not set")
        try:
            parts = urlsplit(url)
            port = parts.port or default_port
        except ValueError:
            raise ConfigError(
                f"{env} is malformed (expected {schemes[0]}://user:password@host:port/db)"
            ) from None
        if parts.scheme not in schemes or not parts.hostname:
            raise ConfigError(
                f"{env} must look like {schemes[0]}://user:password@host:port/database "
                f"(scheme one of {', '.join(schemes)})"
            )
        return cls(
            scheme=parts.scheme,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            host=parts.hostname,
            port=port,
            database=unquote(parts.path.lstrip("/")),
        )

    def redacted(self) -> str:
        return f"{self.scheme}://{self.user}:***@{self.host}:{self.port}/{self.database}"
