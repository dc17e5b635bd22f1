"""The warehouse: Amazon Redshift, or PostgreSQL standing in for it, chosen by one URL.

`S3RS_REDSHIFT_URL` decides everything about the connection:

* `redshift://user:password@host:5439/db` connects with `redshift_connector` (SSL,
  `sslmode` verify-full by default) and fills staging tables with Redshift's own
  `COPY ... FORMAT AS PARQUET MANIFEST` from S3, which needs `iam_role`;
* `postgresql://user:password@host:5432/db` connects with psycopg 3 and fills the same
  staging table with `COPY ... FROM STDIN`, fed from the same parquet files
  (redshift_connector cannot talk to PostgreSQL; see STACK.md). A `?sslmode=` in the URL is
  passed to libpq; `sslmode` on the resource applies to Redshift only.

Everything else (staging, merge, ledger) is one SQL text for both, built in
`s3rs_assets/load/sql.py`. `WarehouseConnection` is the small surface the load package and
verify.py use, identical for both drivers (both use the `%s` parameter style).

The password never leaves `DatabaseURL`: errors and logs show `DatabaseURL.redacted()`, and
driver messages are scrubbed of it before they are re-raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import dagster as dg
from pydantic import Field

from s3rs_assets.config import DatabaseURL
from s3rs_assets.errors import ConfigError
from s3rs_assets.resources import RedactedURL
from s3rs_assets.retry import is_transient, sqlstate

Dialect = Literal["postgres", "redshift"]

_SCHEMES = ("redshift", "postgresql", "postgres")
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
#: A racing loader inserted the same ledger rows first (PostgreSQL): rerun and skip them.
UNIQUE_VIOLATION = "23505"


class WarehouseResource(RedactedURL, dg.ConfigurableResource):
    """Redshift or its local PostgreSQL stand-in, from `S3RS_REDSHIFT_URL`."""

    url: str = Field(
        description="S3RS_REDSHIFT_URL: redshift://user:password@host:5439/db, or "
        "postgresql://user:password@host:5432/db for the local stand-in."
    )
    iam_role: str | None = Field(
        default=None,
        description="S3RS_REDSHIFT_IAM_ROLE: ARN of the role Redshift assumes to read the "
        "parquet files (COPY ... IAM_ROLE). Not used with PostgreSQL.",
    )
    sslmode: str = Field(
        default="verify-full",
        description="Redshift SSL mode: verify-full (default), verify-ca, or disable.",
    )
    connect_timeout: int = Field(default=10, description="Seconds to wait for a connection.")

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.check()  # a bad URL fails the run at start, naming the variable, not the secret

    @property
    def parsed(self) -> DatabaseURL:
        scheme = self.url.split("://", 1)[0] if "://" in (self.url or "") else ""
        return DatabaseURL.parse(
            self.url,
            env="S3RS_REDSHIFT_URL",
            schemes=_SCHEMES,
            default_port=5439 if scheme == "redshift" else 5432,
        )

    @property
    def dialect(self) -> Dialect:
        return "redshift" if self.parsed.scheme == "redshift" else "postgres"

    def redacted(self) -> str:
        return self.parsed.redacted()

    def check(self) -> None:
        """Validate the configuration without connecting; raise ConfigError."""
        p = self.parsed
        if not p.database:
            raise ConfigError(f"S3RS_REDSHIFT_URL {p.redacted()} names no database")
        if self.sslmode not in _SSLMODES:
            raise ConfigError(f"warehouse sslmode {self.sslmode!r} is not one of {_SSLMODES}")
        if p.scheme == "redshift" and self.sslmode not in ("disable", "verify-ca", "verify-full"):
            raise ConfigError(
                f"redshift_connector supports sslmode verify-ca, verify-full or disable, "
                f"not {self.sslmode!r}"
            )

    def connect(self, *, autocommit: bool = False) -> WarehouseConnection:
        self.check()
        p = self.parsed
        try:
            if p.scheme == "redshift":
                import redshift_connector

                raw = redshift_connector.connect(
                    host=p.host,
                    port=p.port,
                    database=p.database,
                    user=p.user,
                    password=p.password,
                    ssl=self.sslmode != "disable",
                    sslmode=self.sslmode if self.sslmode != "disable" else "verify-ca",
                    timeout=self.connect_timeout,
                    application_name="s3rs",
                )
                raw.autocommit = autocommit
            else:
                import psycopg

                kwargs: dict[str, Any] = {}
                query = parse_qs(urlsplit(self.url).query)
                if "sslmode" in query:
                    kwargs["sslmode"] = query["sslmode"][-1]
                raw = psycopg.connect(
                    host=p.host,
                    port=p.port,
                    dbname=p.database,
                    user=p.user,
                    password=p.password or None,
                    connect_timeout=self.connect_timeout,
                    application_name="s3rs",
                    autocommit=autocommit,
                    **kwargs,
                )
        except ConfigError:
            raise
        except Exception as e:  # driver errors: scrub, never chain (the cause may hold it)
            raise ConfigError(
                f"cannot connect to the warehouse at {p.redacted()}: "
                f"{scrub(f'{type(e).__name__}: {e}', p.password)}"
            ) from None
        return WarehouseConnection(raw, self.dialect, p)

    @contextmanager
    def connection(self, *, autocommit: bool = False) -> Iterator[WarehouseConnection]:
        conn = self.connect(autocommit=autocommit)
        try:
            yield conn
        finally:
            conn.close()


def scrub(text: str, secret: str | None) -> str:
    """`text` with every occurrence of `secret` replaced by ***."""
    return text.replace(secret, "***") if secret else text


class WarehouseConnection:
    """One connection; the same calls whatever the driver."""

    def __init__(self, raw: Any, dialect: Dialect, url: DatabaseURL):
        self.raw = raw
        self.dialect: Dialect = dialect
        self.url = url

    def __repr__(self) -> str:
        return f"WarehouseConnection({self.dialect}, {self.url.redacted()})"

    def execute(self, sql: str, params: Iterable[Any] | None = None) -> int:
        """Run one statement; return its row count (-1 when the driver has none)."""
        cur = self.raw.cursor()
        try:
            cur.execute(sql, tuple(params) if params is not None else None)
            return cur.rowcount
        finally:
            cur.close()

    def query(self, sql: str, params: Iterable[Any] | None = None) -> list[tuple]:
        cur = self.raw.cursor()
        try:
            cur.execute(sql, tuple(params) if params is not None else None)
            return [tuple(r) for r in cur.fetchall()]
        finally:
            cur.close()

    def copy_from_stdin(self, sql: str, chunks: Iterable[bytes | memoryview]) -> None:
        """PostgreSQL only: `COPY ... FROM STDIN` fed with `chunks`."""
        if self.dialect != "postgres":
            raise RuntimeError("COPY FROM STDIN exists on PostgreSQL only")
        with self.raw.cursor() as cur, cur.copy(sql) as copy:
            for chunk in chunks:
                copy.write(chunk)

    @property
    def autocommit(self) -> bool:
        return bool(self.raw.autocommit)

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self.raw.autocommit = value

    def commit(self) -> None:
        self.raw.commit()

    def rollback(self) -> None:
        # A dead connection has nothing to roll back: the server already did.
        with suppress(Exception):
            self.raw.rollback()

    def close(self) -> None:
        with suppress(Exception):
            self.raw.close()

    def __enter__(self) -> WarehouseConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def is_retryable(exc: BaseException) -> bool:
    """True for errors after which rerunning the whole load transaction is the right move:
    the transient ones (retry.kind) and a racing loader's unique violation on the ledger."""
    return is_transient(exc) or sqlstate(exc) == UNIQUE_VIOLATION


def is_driver_error(exc: BaseException) -> bool:
    """True for database errors of either driver (as opposed to bugs or s3rs errors)."""
    mod = type(exc).__module__
    return mod.startswith("psycopg") or mod.startswith("redshift_connector")
