"""Plain connections to the three services, without Dagster.

MySQL (pymysql, through the SSH tunnel when one is set: ssh.py), the warehouse (psycopg
for the PostgreSQL stand-in, redshift_connector for Redshift; `WarehouseConnection` is the
one surface both drivers offer) and S3 (boto3 with botocore's standard retries). The
Dagster resources (`resources.MySQLResource`, `warehouse.WarehouseResource`) hold their
configuration as Dagster fields and connect through these classes, so the connecting code
is in one place. Commands that need neither Dagster nor Spark (`s3rs reconcile`) build
these directly from the environment (`*_from_env`): importing Dagster, dagster-aws and
dagster-pyspark (with pyspark) was most of such a command's start-up.

Start-up (issue 19, "small operations instant"): pymysql (with cryptography, ~50 modules)
is imported where a MySQL connection is opened, not here, so `s3rs watermark get` never
loads it; the S3 client is botocore's own, without boto3 and s3transfer (~45 modules s3rs
does not use: no managed transfers), and its connection pool holds S3_POOL connections
(`s3rs status` reads records with scan.READ_THREADS of them, scan.read_records); its
timestamps are parsed without dateutil (`s3_timestamp`).

Secrets: the URLs' passwords never leave `DatabaseURL`; errors show `redacted()`, and
driver messages are scrubbed of the password before they are re-raised.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs, urlsplit

from s3rs_assets.botocore_s3 import s3_loader as _s3_loader  # noqa: F401 (tests, callers)
from s3rs_assets.botocore_s3 import s3_session as _s3_session
from s3rs_assets.botocore_s3 import s3_timestamp  # noqa: F401 (tests, callers)
from s3rs_assets.clock import PIN_SQL
from s3rs_assets.config import DatabaseURL
from s3rs_assets.errors import ConfigError
from s3rs_assets.layout import Layout
from s3rs_assets.ssh import PASSPHRASE_ENV, SSHSettings, tunnel_for

if TYPE_CHECKING:
    import pymysql

Dialect = Literal["postgres", "redshift"]

_SCHEMES = ("redshift", "postgresql", "postgres")
_SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
#: A racing loader inserted the same ledger rows first (PostgreSQL): rerun and skip them.
UNIQUE_VIOLATION = "23505"
#: botocore's attempts per S3 call (standard mode), as dagster-aws's S3Resource default
S3_MAX_ATTEMPTS = 5
#: connections an S3 client keeps open (botocore's default is 10): scan.read_records reads
#: watermark records with up to scan.READ_THREADS of them
S3_POOL = 32


@dataclass
class MySQLConnector:
    """The source database: `url` (mysql://user:password@host:port/db) and, behind a
    bastion, the `ssh_*` settings (else the S3RS_SSH_* variables)."""

    url: str
    connect_timeout: int = 10
    read_timeout: int = 600
    ssh_host: str | None = None
    ssh_user: str | None = None
    ssh_key_file: str | None = None
    ssh_known_hosts: str | None = None

    @property
    def parsed(self) -> DatabaseURL:
        return DatabaseURL.parse(
            self.url, env="S3RS_MYSQL_URL", schemes=("mysql", "mariadb"), default_port=3306
        )

    def ssh_settings(self) -> Any:
        """The tunnel's settings (fields first, then S3RS_SSH_* variables), or None."""
        if self.ssh_host:
            return SSHSettings.build(
                self.ssh_host,
                self.ssh_user,
                self.ssh_key_file,
                self.ssh_known_hosts,
                os.environ.get(PASSPHRASE_ENV),
            )
        return SSHSettings.from_env()

    def endpoint(self) -> tuple[str, int]:
        """Where to connect: the URL's host, or the local end of the SSH tunnel (re-opened
        here when it dropped since the last call)."""
        p = self.parsed
        settings = self.ssh_settings()
        if settings is None:
            return p.host, p.port
        tunnel = tunnel_for(settings, p.host, p.port, timeout=self.connect_timeout)
        return "127.0.0.1", tunnel.local_port

    def connect(self) -> pymysql.connections.Connection:
        import pymysql  # here, not at the top: commands that never open MySQL skip it

        p = self.parsed
        via = ""
        for attempt in (1, 2):
            host, port = self.endpoint()
            if host != p.host or port != p.port:
                via = " through the SSH tunnel"
            try:
                return _mysql_connection_class()(
                    host=host,
                    port=port,
                    user=p.user,
                    password=p.password,
                    database=p.database or None,
                    charset="utf8mb4",
                    autocommit=True,
                    connect_timeout=self.connect_timeout,
                    read_timeout=self.read_timeout,
                    init_command=PIN_SQL,  # clock.py: UTC, whatever the server's default
                )
            except pymysql.err.OperationalError as e:
                if via and attempt == 1:
                    continue  # the tunnel may have dropped just now: endpoint() re-opens it
                # pymysql messages carry user and host, never the password.
                raise ConfigError(
                    f"cannot connect to MySQL at {p.redacted()}{via}: {e.args[-1]}"
                ) from None
        raise AssertionError("unreachable")

    @contextmanager
    def connection(self) -> Iterator[pymysql.connections.Connection]:
        """A connection of its own, closed on leaving: `MySQLResource.connection`'s surface
        for code that plans outside a run (`work.prepare` from `s3rs sync`)."""
        conn = self.connect()
        try:
            yield conn
        finally:
            with suppress(Exception):
                conn.close()


@functools.cache
def _mysql_connection_class() -> type[pymysql.connections.Connection]:
    """pymysql's Connection, with the TLS context of its default (preferred, unverified)
    mode built once per process: pymysql builds a new one per connection, and each loads
    the system's CA store (~30 ms; a reconcile pass opens five connections) only to set
    CERT_NONE. Explicit TLS options still get their own context, as before."""
    import pymysql

    class Connection(pymysql.connections.Connection):
        _preferred_ctx: Any = None

        def _create_ssl_ctx(self, sslp: Any) -> Any:
            if isinstance(sslp, dict) and not sslp:  # no TLS option given: preferred mode
                cls = type(self)
                if cls._preferred_ctx is None:  # a race builds two alike: harmless
                    cls._preferred_ctx = preferred_tls_context()
                return cls._preferred_ctx
            return super()._create_ssl_ctx(sslp)

    return Connection


def preferred_tls_context() -> Any:
    """pymysql's TLS context for its preferred mode (no TLS option: encrypt, verify
    nothing), with the settings its `_create_ssl_ctx({})` gives, but without loading the
    system CA store, which CERT_NONE never consults (~30 ms of CPU in every command that
    opens MySQL; test_source.py compares the two)."""
    import ssl
    import sys

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.verify_flags &= ~ssl.VERIFY_X509_STRICT
    ctx.options |= ssl.OP_NO_SSLv2
    ctx.options |= ssl.OP_NO_SSLv3
    keylog = os.environ.get("SSLKEYLOGFILE")  # as ssl.create_default_context
    if keylog and not sys.flags.ignore_environment:
        ctx.keylog_filename = keylog
    return ctx


@dataclass
class WarehouseConnector:
    """Redshift or its local PostgreSQL stand-in, from one URL (warehouse.py)."""

    url: str
    iam_role: str | None = None
    sslmode: str = "verify-full"
    connect_timeout: int = 10

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


@dataclass
class S3Connector:
    """The bucket and key prefix s3rs keeps everything under; credentials, region and
    endpoint (AWS_ENDPOINT_URL_S3 for moto or MinIO) from the standard AWS chain."""

    bucket: str
    prefix: str = "s3rs"
    _client: Any = field(default=None, repr=False)

    def client(self) -> Any:
        """One S3 client (clients are thread-safe), botocore standard-mode retries, a pool
        of S3_POOL connections. botocore's, not boto3's: the same client and credential
        chain without boto3's managed transfers, which s3rs does not use (put_object and
        get_object only), and ~45 fewer modules to import."""
        if self._client is None:
            self._client = s3_client()
        return self._client

    @property
    def layout(self) -> Layout:
        return Layout(self.prefix)


def s3_client(
    *,
    profile: str | None = None,
    max_attempts: int = S3_MAX_ATTEMPTS,
    unsigned: bool = False,
    **fields: Any,
) -> Any:
    """The one S3 client builder (S3Connector's and the Dagster resource's): botocore's
    client on a session sharing the process's parsed S3 models, standard-mode retries, a
    pool of S3_POOL connections; `fields` are create_client's (endpoint, region,
    credentials), None for the standard AWS chain."""
    from botocore.config import Config

    client = _s3_session(profile).create_client(
        "s3",
        config=Config(
            retries={"max_attempts": max_attempts, "mode": "standard"},
            max_pool_connections=S3_POOL,
        ),
        **fields,
    )
    if unsigned:
        from botocore.handlers import disable_signing

        client.meta.events.register("choose-signer.s3.*", disable_signing)
    return client


def mysql_from_env() -> MySQLConnector:
    url = os.environ.get("S3RS_MYSQL_URL")
    if not url:
        raise ConfigError("S3RS_MYSQL_URL is not set (mysql://user:password@host:port/db)")
    return MySQLConnector(url=url)


WAREHOUSE_URL_ENV = "S3RS_REDSHIFT_URL"


def warehouse_configured() -> bool:
    """A warehouse is configured (`--backup-only` then asks its ledger which files are
    loaded: work.prepare)."""
    return bool(os.environ.get(WAREHOUSE_URL_ENV))


def warehouse_from_env() -> WarehouseConnector:
    url = os.environ.get(WAREHOUSE_URL_ENV)
    if not url:
        raise ConfigError(
            "S3RS_REDSHIFT_URL is not set (redshift://... or postgresql://user:password@host/db)"
        )
    return WarehouseConnector(url=url, iam_role=os.environ.get("S3RS_REDSHIFT_IAM_ROLE") or None)


def s3_from_env() -> S3Connector:
    bucket = os.environ.get("S3RS_S3_BUCKET")
    if not bucket:
        raise ConfigError("S3RS_S3_BUCKET is not set")
    return S3Connector(bucket=bucket, prefix=os.environ.get("S3RS_S3_PREFIX", "s3rs"))


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

    def copy_from_stdin(self, sql: str, chunks: Iterable[bytes | memoryview]) -> int:
        """PostgreSQL only: `COPY ... FROM STDIN` fed with `chunks`; the rows copied."""
        if self.dialect != "postgres":
            raise RuntimeError("COPY FROM STDIN exists on PostgreSQL only")
        with self.raw.cursor() as cur:
            with cur.copy(sql) as copy:
                for chunk in chunks:
                    copy.write(chunk)
            return int(cur.rowcount)

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


class FirstAttempt:
    """A connection opened ahead of a retried operation, for its first attempt only.

    Opening one costs a PostgreSQL backend (~20-50 ms; a Redshift connection more), so what
    runs before the operation (a DDL check, a ledger read) and its first attempt share it.
    A retried attempt gets a new connection, as the one that failed may be dead. On exit,
    the connection is closed if no attempt took it."""

    def __init__(self, conn: WarehouseConnection):
        self.conn = conn
        self._taken = False

    def take(self) -> WarehouseConnection | None:
        """The connection for the first caller; None for every later one."""
        if self._taken:
            return None
        self._taken = True
        return self.conn

    def __enter__(self) -> FirstAttempt:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._taken:
            self.conn.close()


def is_retryable(exc: BaseException) -> bool:
    """True for errors after which rerunning the whole load transaction is the right move:
    the transient ones (retry.kind) and a racing loader's unique violation on the ledger."""
    from s3rs_assets.retry import is_transient, sqlstate  # retry imports pymysql

    return is_transient(exc) or sqlstate(exc) == UNIQUE_VIOLATION


def is_driver_error(exc: BaseException) -> bool:
    """True for database errors of either driver (as opposed to bugs or s3rs errors)."""
    mod = type(exc).__module__
    return mod.startswith("psycopg") or mod.startswith("redshift_connector")
