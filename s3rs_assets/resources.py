"""MySQL, S3 and Spark as Dagster resources.

Secrets arrive only through `EnvVar` (see definitions.py) and never leave these objects in
text form: `DatabaseURL.redacted()` is what logs and errors show.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import boto3
import dagster as dg
import dagster_aws.s3
import pymysql
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr

from s3rs_assets import jvm_options, spark_session
from s3rs_assets.clock import PIN_SQL, SESSION_TIME_ZONE
from s3rs_assets.config import DatabaseURL
from s3rs_assets.connections import MySQLConnector
from s3rs_assets.errors import ConfigError
from s3rs_assets.layout import Layout
from s3rs_assets.retry import MYSQL_BACKOFF, Backoff, Retries, call, is_transient
from s3rs_assets.spark_session import (  # noqa: F401 - re-exported: resources' Spark names
    DEFAULT_JDBC_JARS,
    UTC_JAVA_OPTION,
    WARM_UP_GROUP,
    spark_defaults,
    start_session,
    take_early,
    warm_up,
)

T = TypeVar("T")



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
    _conn: Any = PrivateAttr(default=None)
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

    def connector(self) -> MySQLConnector:
        """The plain connector (connections.py) with this resource's settings."""
        return MySQLConnector(
            url=self.url,
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            ssh_host=self.ssh_host,
            ssh_user=self.ssh_user,
            ssh_key_file=self.ssh_key_file,
            ssh_known_hosts=self.ssh_known_hosts,
        )

    @property
    def parsed(self) -> DatabaseURL:
        return self.connector().parsed

    def ssh_settings(self) -> Any:
        """The tunnel's settings (fields first, then S3RS_SSH_* variables), or None."""
        return self.connector().ssh_settings()

    def endpoint(self) -> tuple[str, int]:
        """Where to connect: the URL's host, or the local end of the SSH tunnel."""
        return self.connector().endpoint()

    def connect(self) -> pymysql.connections.Connection:
        return self.connector().connect()

    @contextmanager
    def connection(self) -> Iterator[pymysql.connections.Connection]:
        """The run's MySQL connection: opened on first use and reused by every step of the
        run (Dagster builds a resource per run), closed when the run ends. A connection the
        server dropped meanwhile is reopened."""
        conn = self._conn
        if conn is not None:
            try:
                conn.ping(reconnect=False)
            except pymysql.err.MySQLError:
                with suppress(Exception):
                    conn.close()
                conn = None
        if conn is None:
            conn = self._conn = self.connect()
        yield conn

    def run(
        self,
        what: str,
        query: Callable[[pymysql.connections.Connection], T],
        retries: Retries,
        log: Callable[[str], None] | None = None,
        backoff: Backoff = MYSQL_BACKOFF,
    ) -> T:
        """`query(conn)` on the run's connection. A transient error (lost connection,
        deadlock, lock wait timeout: retry.kind) closes the connection and runs the query
        again on a new one, with backoff, a bounded number of times (`backoff`)."""

        def attempt() -> T:
            # no ping first: a connection dropped meanwhile fails the query, which is
            # retried (and counted) like any other transient error
            if self._conn is None:
                self._conn = self.connect()
            return query(self._conn)

        try:
            return call(
                attempt,
                what=what,
                retries=retries,
                backoff=backoff,
                before_retry=self.drop,
                log=log,
            )
        except Exception as e:
            if is_transient(e):
                self.drop()  # the next query starts on a new connection
            raise

    def drop(self) -> None:
        """Forget the run's connection (the next `connection()` opens a new one)."""
        if self._conn is not None:
            with suppress(Exception):
                self._conn.close()
            self._conn = None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._conn is not None:
            with suppress(Exception):
                self._conn.close()
            self._conn = None

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
        return {
            "user": p.user,
            "password": p.password,
            "driver": "org.mariadb.jdbc.Driver",
            # clock.py: the session's time_zone pinned like pymysql's (MariaDB Connector/J)
            "sessionVariables": f"time_zone='{SESSION_TIME_ZONE}'",
        }

    def session_setup(self) -> list[str]:
        """Statements run on connectorx's connections before its query (clock.py)."""
        return [PIN_SQL]


class S3Resource(dagster_aws.s3.S3Resource):
    """The bucket holding parquet files and watermarks: dagster-aws's `S3Resource` (its
    `endpoint_url`, `region_name`, `max_attempts`, `profile_name` and credential fields,
    botocore standard-mode retries) plus where s3rs keeps things in it.

    Unset fields fall back to the standard AWS chain (AWS_ACCESS_KEY_ID, ...,
    AWS_ENDPOINT_URL_S3 for moto or MinIO).
    """

    bucket: str = Field(description="S3RS_S3_BUCKET")
    prefix: str = Field(default="s3rs", description="S3RS_S3_PREFIX: key prefix for everything.")
    _client: Any = PrivateAttr(default=None)
    #: (the AWS chain's credentials or None,) once `task_config` resolved them
    _credentials: tuple[Any] | None = PrivateAttr(default=None)

    def client(self) -> Any:
        """One S3 client per resource instance (clients are thread-safe)."""
        if self._client is None:
            self._client = self.get_client()
        return self._client

    def get_client(self) -> Any:
        """dagster-aws's client (same fields, standard-mode retries), built by the one S3
        client builder (connections.s3_client) on a botocore session sharing the process's
        parsed S3 models: dagster-aws builds a boto3 session and resource per client, ~60 ms
        each, and a run has two resource instances besides the CLI's. s3rs uses none of the
        methods boto3 adds (managed transfers)."""
        from s3rs_assets.connections import s3_client

        return s3_client(
            profile=self.profile_name,
            max_attempts=self.max_attempts,
            unsigned=bool(self.use_unsigned_session),
            region_name=self.region_name,
            use_ssl=self.use_ssl,
            verify=self.verify,
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.aws_access_key_id,
            aws_secret_access_key=self.aws_secret_access_key,
            aws_session_token=self.aws_session_token,
        )

    def get_object_to_set_on_execution_context(self) -> Any:
        """The resource itself, as any ConfigurableResource (`context.resources.s3`).
        dagster-aws attaches a fresh client there at every resource initialization, built
        whether used or not: four per `s3rs sync` run; s3rs reaches S3 through `client()`."""
        return self

    def task_config(self) -> dict[str, Any]:
        """What a Spark task needs to build its own client (it may run on another host):
        endpoint, region and the credentials this process resolved. Never logged."""
        meta = self.client().meta
        kw: dict[str, Any] = {
            "endpoint_url": meta.endpoint_url,
            "region_name": meta.region_name,
            "max_attempts": self.max_attempts,
        }
        if self.aws_access_key_id:
            keys = (self.aws_access_key_id, self.aws_secret_access_key, self.aws_session_token)
        else:
            if self._credentials is None:
                # resolved once per resource (a boto3 session costs ~20 ms CPU: it was
                # built for every chunk); refreshable credentials renew in the freeze below
                self._credentials = (
                    boto3.session.Session(profile_name=self.profile_name).get_credentials(),
                )
            creds = self._credentials[0]
            frozen = creds.get_frozen_credentials() if creds else None
            keys = (frozen.access_key, frozen.secret_key, frozen.token) if frozen else None
        if keys is not None:
            kw.update(
                aws_access_key_id=keys[0], aws_secret_access_key=keys[1], aws_session_token=keys[2]
            )
        return kw

    @property
    def layout(self) -> Layout:
        """Every S3 key under this resource's prefix (s3rs_assets.layout)."""
        return Layout(self.prefix)

    def key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p and p.strip("/"))


_SPARK_LOCK = threading.Lock()


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy SparkSession (`spark_config`, built on first use, once per
    process: sensors and the CLI never build it) plus what s3rs needs of it: the JDBC jar,
    UTC everywhere (a non-UTC JVM shifts every DATETIME by hours), Spark's Python workers
    running this interpreter, warmed up before the first chunk.

    `spark_config` is passed to `SparkSession.builder.config` as is; `spark_defaults()`
    gives s3rs's settings for a master URL.
    """

    spark_config: dict[str, Any] = Field(
        default_factory=spark_defaults,
        description="spark.* settings; spark.master (local[*], spark://...) or spark.remote "
        "(sc://... Spark Connect). See s3rs_assets.spark_session.spark_defaults.",
    )

    jvm_tuning: str | None = Field(
        default=None,
        description="JVM start-up tunings of a local Spark JVM: auto, off, or a list of "
        "cds,c1 (s3rs_assets.jvm_options); default $S3RS_SPARK_JVM, else auto.",
    )
    jdbc_reads: bool = Field(
        default=True,
        description="some table this resource serves reads through Spark's JDBC reader "
        "(then `auto` keeps the JVM's full JIT).",
    )

    @property
    def master(self) -> str:
        conf = self.spark_config
        return str(conf.get("spark.remote") or conf.get("spark.master") or "local[*]")

    def _init_session(self) -> None:
        if self._spark_session is None:
            with _SPARK_LOCK:
                if self._spark_session is None:
                    # `s3rs sync` started it (and its warm-up) early: spark_session.py
                    session = take_early()
                    if session is None:
                        session = get_spark(self)
                        # in the background: the driver plans the first chunk (MySQL
                        # probes, planning queries) while the workers import; that chunk's
                        # job queues behind the warm-up's tasks if it comes first
                        warm_up(session, background=True)
                    self._spark_session = session

    def session(self) -> Any:
        return self.spark_session


def get_spark(res: SparkResource) -> Any:
    """The process's SparkSession (an active one is reused) with `res`'s settings."""
    return start_session(res.spark_config, res.jvm_tuning, res.jdbc_reads)


def local_jvm_options(
    res: SparkResource, jars: list[str], user: str | None
) -> tuple[list[str], jvm_options.PendingArchive | None]:
    """The start-up tunings (jvm_options.py) for the local JVM `res` launches."""
    return spark_session.local_jvm_options(res.jvm_tuning, res.jdbc_reads, jars, user)
