"""The warehouse table one MySQL table lands in, and the names s3rs reserves beside it.

`LoadTarget` is validated on construction: every name that reaches SQL text is a plain
identifier, the key and cursor are columns, and no column collides (case-insensitively,
as Redshift folds names) with another or with a name s3rs uses for itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from s3rs_assets.config import TableConfig
from s3rs_assets.errors import ConfigError
from s3rs_assets.identifiers import check_identifier
from s3rs_assets.types import SourceColumn

#: the load ledger, one per warehouse schema (see ledger.py)
LEDGER_TABLE = "s3rs_load_ledger"
#: what s3rs last left in each target: its identity and whether it held rows (ledger.py)
STATE_TABLE = "s3rs_target_state"
#: the session temp table COPY fills (see transaction.py)
STAGE_TABLE = "s3rs_stage"
#: column names s3rs uses in its own SQL
WIDEN_TMP_COLUMN = "s3rs_widen_tmp"
ROW_NUMBER_COLUMN = "s3rs_rn"


@dataclass(frozen=True)
class LoadTarget:
    """Where one MySQL table lands: warehouse schema/table, its columns, key and cursor."""

    schema: str
    table: str
    columns: list[SourceColumn]
    primary_key: tuple[str, ...]
    cursor: str
    source_name: str  # "schema.table" in MySQL

    def __post_init__(self) -> None:
        where = f"load target {self.schema!r}.{self.table!r}"
        check_identifier(self.schema, f"{where}: schema")
        check_identifier(self.table, f"{where}: table")
        if self.table in (LEDGER_TABLE, STATE_TABLE):
            raise ConfigError(f"{where}: {self.table} is a name s3rs keeps for itself")
        if not self.columns:
            raise ConfigError(f"{where}: no columns")
        seen: set[str] = set()
        for c in self.columns:
            check_identifier(c.name, f"{where}: column")
            if c.name.lower() in seen:  # Redshift folds names to lower case
                raise ConfigError(f"{where}: column {c.name!r} appears twice (case-insensitive)")
            if c.name.lower() in (ROW_NUMBER_COLUMN, WIDEN_TMP_COLUMN):
                raise ConfigError(f"{where}: column name {c.name!r} is reserved by s3rs")
            seen.add(c.name.lower())
        names = {c.name for c in self.columns}
        if not self.primary_key:
            raise ConfigError(f"{where}: a primary key is required to merge")
        for k in self.primary_key:
            if k not in names:
                raise ConfigError(f"{where}: primary key column {k!r} is not a column")
        if self.cursor not in names:
            raise ConfigError(f"{where}: cursor column {self.cursor!r} is not a column")

    @classmethod
    def from_table_config(
        cls,
        cfg: TableConfig,
        columns: list[SourceColumn],
        primary_key: Sequence[str] | None = None,
    ) -> LoadTarget:
        pk = tuple(primary_key or cfg.primary_key or ())
        return cls(cfg.target_schema, cfg.target_table, list(columns), pk, cfg.cursor, cfg.name)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]
