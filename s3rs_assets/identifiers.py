"""Identifier validation and quoting, the one place SQL names are built from user input.

Names come from tables.yaml and the command line and end up in SQL text, S3 keys and
Dagster asset keys. We accept only plain identifiers (letters, digits, `_`, `$`), which
rules out quotes, semicolons, slashes, `..` and whitespace before any quoting happens, and
then quote anyway so that reserved words work.
"""

from __future__ import annotations

import re

from s3rs_assets.errors import ConfigError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,63}$")


def check_identifier(name: object, what: str = "identifier") -> str:
    """Return `name` if it is a plain SQL identifier, else raise a ConfigError naming it."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ConfigError(
            f"invalid {what} {name!r}: use letters, digits, '_' or '$' "
            "(at most 64 characters, not starting with a digit)"
        )
    return name


def split_qualified(name: object, what: str = "table") -> tuple[str, str]:
    """Split `schema.table` into its two validated parts."""
    if not isinstance(name, str) or name.count(".") != 1:
        raise ConfigError(f"invalid {what} {name!r}: expected 'schema.table'")
    schema, table = name.split(".")
    return check_identifier(schema, f"{what} schema"), check_identifier(table, f"{what} name")


def mysql_quote(name: str) -> str:
    """Backtick-quote a validated MySQL identifier."""
    return f"`{check_identifier(name)}`"


def pg_quote(name: str) -> str:
    """Double-quote a validated PostgreSQL/Redshift identifier."""
    return f'"{check_identifier(name)}"'


def mysql_table(schema: str, table: str) -> str:
    return f"{mysql_quote(schema)}.{mysql_quote(table)}"


def pg_table(schema: str, table: str) -> str:
    return f"{pg_quote(schema)}.{pg_quote(table)}"
