"""MySQL, S3 and Spark as Dagster resources.

Secrets arrive only through `EnvVar` (see definitions.py) and never leave these objects in
text form: `DatabaseURL.redacted()` is what logs and errors show.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import boto3
import dagster as dg
import pymysql
from botocore.config import Config
from pydantic import Field, PrivateAttr

from s3rs_assets.config import DatabaseURL
from s3rs_assets.errors import ConfigError
from s3rs_assets.layout import Layout

DEFAULT_JDBC_JARS = "/usr/share/java/mariadb-java-client.jar"


class RedactedURL:
    """Mixin for resources with a `url` holding a password: repr/str show it masked."""

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():  # type: ignore[misc]
            yield name, (self._safe_url() if name == "url" else value)

    def _safe_url(self) -> str:
        try:
            return self.parsed.redacted()  # type: ignore[attr-defined]
        except ConfigError:
            return "<invalid URL>"


class MySQLResource(RedactedURL, dg.ConfigurableResource):
    """The source database, from `S3RS_MYSQL_URL` (mysql://user:password@host:port/db).

    Behind a bastion, set `ssh_host` (or `S3RS_SSH_HOST`) and the other `ssh_*` settings:
    `endpoint()` then returns the local end of an SSH tunnel (s3rs_assets.ssh) instead of
    the URL's host, and every reader (pymysql here, Spark JDBC and connectorx through
    `jdbc_url()` / `connectorx_url()`) goes through it. The URL's host and port are then
    the database as the SSH server sees it.
    """

    url: str = Field(description="mysql://user:password@host:port/database")
    connect_timeout: int = Field(default=10, description="Seconds to wait for a connection.")
    read_timeout: int = Field(default=600, description="Seconds one query may take.")
    ssh_host: str | None = Field(
        default=None, description="S3RS_SSH_HOST: bastion host[:port]; unset = no tunnel."
    )
    ssh_user: str | None = Field(default=None, description="S3RS_SSH_USER")
    ssh_key_file: str | None = Field(
        default=None, description="S3RS_SSH_KEY_FILE: private key (passphrase from "
        "S3RS_SSH_KEY_PASSPHRASE)."
    )
    ssh_known_hosts: str | None = Field(
        default=None,
        description="S3RS_SSH_KNOWN_HOSTS: known_hosts file holding the bastion's host key "
        "(unknown or mismatched keys are refused).",
    )

    @property
    def parsed(self) -> DatabaseURL:
        return DatabaseURL.parse(
            self.url, env="S3RS_MYSQL_URL", schemes=("mysql", "mariadb"), default_port=3306
        )

    def ssh_settings(self) -> Any:
        """The tunnel's settings (fields first, then S3RS_SSH_* variables), or None."""
        from s3rs_assets.ssh import PASSPHRASE_ENV, SSHSettings

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
        from s3rs_assets.ssh import tunnel_for

        tunnel = tunnel_for(settings, p.host, p.port, timeout=self.connect_timeout)
        return "127.0.0.1", tunnel.local_port

    def connect(self) -> pymysql.connections.Connection:
        p = self.parsed
        via = ""
        for attempt in (1, 2):
            host, port = self.endpoint()
            if host != p.host or port != p.port:
                via = " through the SSH tunnel"
            try:
                return pymysql.connect(
                    host=host,
                    port=port,
                    user=p.user,
                    password=p.password,
                    database=p.database or None,
                    charset="utf8mb4",
                    autocommit=True,
                    connect_timeout=self.connect_timeout,
                    read_timeout=self.read_timeout,
                )
            except pymysql.err.OperationalError as e:
                if via and attempt == 1:
                    continue  # the tunnel may have dropped just now: endpoint() re-opens it
                # pymysql messages carry user and host, never the password.
                raise ConfigError(
                    f"cannot connect to MySQL at {p.redacted()}{via}: {e.args[-1]}"
                ) from None
        raise AssertionError("unreachable")

    def jdbc_url(self) -> str:
        # jdbc:mysql (not jdbc:mariadb) so Spark picks its MySQL dialect and quotes with
        # backticks; permitMysqlScheme lets MariaDB Connector/J accept it.
        host, port = self.endpoint()
        db = self.parsed.database
        return f"jdbc:mysql://{host}:{port}/{db}?permitMysqlScheme&tinyInt1isBit=true"

    def connectorx_url(self) -> str:
        """mysql:// URL for connectorx inside Spark tasks (holds the password: never log it)."""
        from urllib.parse import quote

        p = self.parsed
        host, port = self.endpoint()
        auth = f"{quote(p.user, safe='')}:{quote(p.password, safe='')}"
        return f"mysql://{auth}@{host}:{port}/{quote(p.database, safe='')}"

    def jdbc_properties(self) -> dict[str, str]:
        p = self.parsed
        return {"user": p.user, "password": p.password, "driver": "org.mariadb.jdbc.Driver"}


class S3Resource(dg.ConfigurableResource):
    """The bucket holding parquet files and watermarks; credentials come from the standard
    AWS chain (AWS_ACCESS_KEY_ID, ..., AWS_ENDPOINT_URL_S3 for moto or MinIO)."""

    bucket: str = Field(description="S3RS_S3_BUCKET")
    prefix: str = Field(default="s3rs", description="S3RS_S3_PREFIX: key prefix for everything.")
    endpoint_url: str | None = Field(default=None, description="Overrides AWS_ENDPOINT_URL_S3.")
    region_name: str | None = Field(default=None, description="Overrides AWS_DEFAULT_REGION.")
    max_attempts: int = Field(default=6, description="botocore standard-mode retry attempts.")

    def client_kwargs(self) -> dict[str, Any]:
        endpoint = self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or None
        region = self.region_name or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        return {"endpoint_url": endpoint, "region_name": region}

    def client(self) -> Any:
        cfg = Config(retries={"mode": "standard", "max_attempts": self.max_attempts})
        return boto3.client("s3", config=cfg, **self.client_kwargs())

    def task_config(self) -> dict[str, Any]:
        """What a Spark task needs to build its own client (it may run on another host)."""
        creds = boto3.Session().get_credentials()
        frozen = creds.get_frozen_credentials() if creds else None
        kw = self.client_kwargs()
        if frozen is not None:
            kw.update(
                aws_access_key_id=frozen.access_key,
                aws_secret_access_key=frozen.secret_key,
                aws_session_token=frozen.token,
            )
        kw["max_attempts"] = self.max_attempts
        return kw

    @property
    def layout(self) -> Layout:
        """Every S3 key under this resource's prefix (s3rs_assets.layout)."""
        return Layout(self.prefix)

    def key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p and p.strip("/"))


_SPARK_LOCK = threading.Lock()


class SparkResource(dg.ConfigurableResource):
    """One SparkSession per process, built on first use (sensors and the CLI never use it).

    `master` is `local[*]`, a standalone `spark://host:port`, or a Spark Connect `sc://`
    URL; nothing else in the code depends on which.
    """

    master: str = Field(default="local[*]", description="S3RS_SPARK_MASTER")
    app_name: str = Field(default="s3rs")
    jars: str = Field(default=DEFAULT_JDBC_JARS, description="Comma-separated JDBC driver jars.")
    driver_memory: str = Field(default="2g")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra spark.* settings.")
    _session: Any = PrivateAttr(default=None)

    def session(self) -> Any:
        if self._session is None:
            with _SPARK_LOCK:
                self._session = get_spark(self)
                warm_up(self._session)
        return self._session


def _warm(batches: Any) -> Any:
    # Importing these once per Python worker is what makes a run's first chunk slow.
    import boto3  # noqa: F401
    import connectorx  # noqa: F401
    import pyarrow.parquet  # noqa: F401

    yield from batches


def warm_up(session: Any) -> None:
    """Start Spark's Python workers (reused by later tasks) as part of start-up."""
    if session.conf.get("spark.python.worker.reuse", "true") != "true":
        return
    try:
        cores = int(session.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: workers live on the server; nothing to warm here
        return
    session.range(0, cores, numPartitions=cores).mapInArrow(_warm, "id long").collect()


def get_spark(res: SparkResource) -> Any:
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    tz = "-Duser.timezone=UTC"
    builder = SparkSession.builder.appName(res.app_name)
    if res.master.startswith("sc://"):
        builder = builder.remote(res.master)
    else:
        builder = builder.master(res.master)
        builder = (
            builder.config("spark.driver.memory", res.driver_memory)
            .config("spark.driver.extraJavaOptions", tz)
            .config("spark.executor.extraJavaOptions", tz)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
        )
        if res.jars:
            missing = [j for j in res.jars.split(",") if j and not os.path.exists(j)]
            if missing and res.master.startswith("local"):
                raise ConfigError(
                    f"JDBC driver jar {missing[0]} not found: run `make setup` "
                    "(installs Debian's libmariadb-java) or set S3RS_SPARK_JARS"
                )
            builder = builder.config("spark.jars", res.jars)
    builder = builder.config("spark.sql.session.timeZone", "UTC").config(
        "spark.sql.execution.arrow.pyspark.enabled", "true"
    )
    for k, v in res.conf.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
