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
verify.py use, identical for both drivers (both use the `%s` parameter style). The
connecting code and `WarehouseConnection` live in `connections.py` (no Dagster there); this
module is the Dagster resource around them and re-exports them.

The password never leaves `DatabaseURL`: errors and logs show `DatabaseURL.redacted()`, and
driver messages are scrubbed of it before they are re-raised.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
from pydantic import Field

from s3rs_assets.config import DatabaseURL
from s3rs_assets.connections import (
    UNIQUE_VIOLATION,
    Dialect,
    FirstAttempt,
    WarehouseConnection,
    WarehouseConnector,
    is_driver_error,
    is_retryable,
    scrub,
)
from s3rs_assets.resources import RedactedURL
from s3rs_assets.retry import sqlstate

__all__ = [
    "UNIQUE_VIOLATION",
    "FirstAttempt",
    "Dialect",
    "WarehouseConnection",
    "WarehouseResource",
    "is_driver_error",
    "is_retryable",
    "scrub",
    "sqlstate",
]


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

    def connector(self) -> WarehouseConnector:
        """The plain connector (connections.py) with this resource's settings."""
        return WarehouseConnector(
            url=self.url,
            iam_role=self.iam_role,
            sslmode=self.sslmode,
            connect_timeout=self.connect_timeout,
        )

    @property
    def parsed(self) -> DatabaseURL:
        return self.connector().parsed

    @property
    def dialect(self) -> Dialect:
        return self.connector().dialect

    def redacted(self) -> str:
        return self.connector().redacted()

    def check(self) -> None:
        """Validate the configuration without connecting; raise ConfigError."""
        self.connector().check()

    def connect(self, *, autocommit: bool = False) -> WarehouseConnection:
        return self.connector().connect(autocommit=autocommit)

    @contextmanager
    def connection(self, *, autocommit: bool = False) -> Iterator[WarehouseConnection]:
        conn = self.connect(autocommit=autocommit)
        try:
            yield conn
        finally:
            conn.close()
