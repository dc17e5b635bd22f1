"""Log output for people and for machines, with every known secret scrubbed from it.

Two formats, chosen by `s3rs --log-format text|json` or `S3RS_LOG_FORMAT`:

* `text` (default): `2025-08-14 16:45:33 INFO  s3rs.cli  message`;
* `json`: one JSON object per line with `ts`, `level`, `logger`, `message`, `event` and,
  when the record carries them (logging's `extra=`), `table`, `partition`, `chunk`,
  `rows`, `seconds`, `rows_per_second`, `cursor`, `run_id`, `error`, and a run's timings
  (`dagster_setup_seconds`, `spark_startup_seconds`, `read_seconds`, `load_seconds`).

`configure()` installs one stderr handler on the root logger, so the `s3rs.*` loggers,
the CLI's own lines and whatever a library logs (paramiko, py4j, botocore) share the
format. The handler carries a `RedactionFilter`: every secret the process knows (the
passwords inside `S3RS_MYSQL_URL` and `S3RS_REDSHIFT_URL`, `AWS_SECRET_ACCESS_KEY`,
`AWS_SESSION_TOKEN`, `S3RS_SSH_KEY_PASSPHRASE`), in plain and URL-encoded form, is replaced
by `***` in the message, its arguments and any traceback before anything is written.
The filter is a net under the code's own care (DatabaseURL.redacted(), no resource repr
with a secret), never a substitute for it: Dagster's event log does not pass through it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote, unquote, urlsplit

from s3rs_assets.errors import ConfigError

FORMATS = ("text", "json")
#: Structured fields a record may carry through `extra=` and the JSON format emits.
FIELDS = (
    "event",
    "table",
    "partition",
    "chunk",
    "rows",
    "seconds",
    "rows_per_second",
    "cursor",
    "run_id",
    "stage",
    "error",
    # where a sync run's time went (progress.RunTimings)
    "dagster_setup_seconds",
    "spark_startup_seconds",
    "read_seconds",
    "load_seconds",
    "rows_loaded",
)
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "S3RS_SSH_KEY_PASSPHRASE")
URL_ENV = ("S3RS_MYSQL_URL", "S3RS_REDSHIFT_URL")
MASK = "***"
#: Shorter values are not treated as secrets (an empty password, a one-letter test value
#: would blank out ordinary text).
MIN_SECRET_LENGTH = 3

_HANDLER_ATTR = "_s3rs_handler"
LEVEL_ENV = "S3RS_LOG_LEVEL"
#: the level `configure()` set last (None before: then S3RS_LOG_LEVEL, default INFO)
_configured_level: int | None = None


def url_password(url: str | None) -> str | None:
    """The password inside a `scheme://user:password@host/...` URL, decoded, or None."""
    if not url or "://" not in url:
        return None
    try:
        password = urlsplit(url).password
    except ValueError:
        # A malformed URL still must not leak: take what sits between ':' and '@'.
        rest = url.split("://", 1)[1].rsplit("@", 1)
        if len(rest) != 2 or ":" not in rest[0]:
            return None
        password = rest[0].split(":", 1)[1]
    return unquote(password) if password else None


def secrets_from_env(env: dict[str, str] | None = None) -> set[str]:
    """Every secret value the environment holds, plus its URL-encoded spellings."""
    env = dict(os.environ if env is None else env)
    found: set[str] = set()
    for name in URL_ENV:
        pw = url_password(env.get(name))
        if pw:
            found.add(pw)
    for name in SECRET_ENV:
        if env.get(name):
            found.add(env[name])
    spelled = set(found)
    for s in found:
        spelled.add(quote(s, safe=""))
        spelled.add(quote(s))
    return {s for s in spelled if len(s) >= MIN_SECRET_LENGTH}


class Redactor:
    """Replaces known secrets in text; longest first so a secret's prefix never survives."""

    def __init__(self, secrets: set[str] | None = None):
        self._secrets: list[str] = []
        self.update(secrets or set())

    def update(self, secrets: set[str]) -> None:
        merged = set(self._secrets) | {s for s in secrets if len(s) >= MIN_SECRET_LENGTH}
        self._secrets = sorted(merged, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for s in self._secrets:
            if s in text:
                text = text.replace(s, MASK)
        return text

    def __bool__(self) -> bool:
        return bool(self._secrets)


#: The process-wide redactor: `configure()` (re)loads it from the environment.
REDACTOR = Redactor()


def redact(text: object) -> str:
    """`text` with every known secret masked (reloads the environment's secrets first)."""
    REDACTOR.update(secrets_from_env())
    return REDACTOR(str(text))


def add_secret(value: str | None) -> None:
    """Register a secret that does not come from the environment (e.g. a key passphrase)."""
    if value:
        REDACTOR.update({value, quote(value, safe="")})


class RedactionFilter(logging.Filter):
    """Scrubs the formatted message, structured fields and traceback of every record."""

    def __init__(self, redactor: Redactor = REDACTOR):
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.redactor:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: keep the raw text
            message = str(record.msg)
        record.msg = self.redactor(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        record.exc_info = None  # the formatter would render the raw traceback again
        if record.stack_info:
            record.stack_info = self.redactor(record.stack_info)
        for name in FIELDS:
            value = getattr(record, name, None)
            if isinstance(value, str):
                setattr(record, name, self.redactor(value))
        return True


class TextFormatter(logging.Formatter):
    """`YYYY-MM-DD HH:MM:SS LEVEL   logger  message` (structured fields stay in the message)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s  %(message)s", "%Y-%m-%d %H:%M:%S")


class JsonFormatter(logging.Formatter):
    """One JSON object per line; structured fields from `extra=` at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or "log",
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if name != "event" and value is not None:
                doc[name] = value
        if record.exc_text:
            doc["traceback"] = record.exc_text
        elif record.exc_info:
            doc["traceback"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


class _ScopeFilter(logging.Filter):
    """s3rs's own records at their level; other libraries' only from WARNING up (some,
    like werkzeug, raise their own logger to INFO) unless the level is DEBUG."""

    def __init__(self, level: int):
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "s3rs" or record.name.startswith("s3rs."):
            return True
        return record.levelno >= (logging.DEBUG if self.level <= logging.DEBUG else logging.WARNING)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is at emit time (click's test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def resolve_format(value: str | None) -> str:
    fmt = (value or os.environ.get("S3RS_LOG_FORMAT") or "text").strip().lower()
    if fmt not in FORMATS:
        raise ConfigError(
            f"log format {fmt!r} is not one of {', '.join(FORMATS)} (S3RS_LOG_FORMAT)"
        )
    return fmt


def formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()


def configure(
    fmt: str | None = None, level: str | int = "INFO", stream: TextIO | None = None
) -> logging.Handler:
    """Send all logging to `stream` (stderr) in `fmt`, through the redaction filter.

    Idempotent: a second call replaces the handler it installed before.
    """
    fmt = resolve_format(fmt)
    REDACTOR.update(secrets_from_env())
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, _HANDLER_ATTR, False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    setattr(handler, _HANDLER_ATTR, True)
    lvl = logging.getLevelName(level.upper()) if isinstance(level, str) else level
    if not isinstance(lvl, int):
        raise ConfigError(f"unknown log level {level!r}")
    global _configured_level
    _configured_level = lvl
    handler.setFormatter(formatter(fmt))
    handler.addFilter(_ScopeFilter(lvl))
    handler.addFilter(RedactionFilter())
    root.addHandler(handler)
    logging.getLogger("s3rs").setLevel(lvl)
    # Every checkpoint saves the watermark: one line each is noise unless debugging.
    logging.getLogger("s3rs.watermark").setLevel(lvl if lvl <= logging.DEBUG else max(
        lvl, logging.WARNING))
    # Other libraries speak at WARNING and above unless debugging; s3rs's loggers carry
    # their own level and reach the handler through propagation.
    root.setLevel(logging.DEBUG if lvl <= logging.DEBUG else logging.WARNING)
    # Chatty libraries stay at WARNING unless debugging.
    for name in ("botocore", "boto3", "urllib3", "s3transfer", "py4j", "paramiko"):
        logging.getLogger(name).setLevel(lvl if lvl <= logging.DEBUG else logging.WARNING)
    # py4j's DEBUG lines are its wire protocol (fragments of every call to the JVM): noise
    # even when debugging s3rs
    logging.getLogger("py4j").setLevel(logging.INFO if lvl <= logging.DEBUG else logging.WARNING)
    return handler


def install_filter(handler: logging.Handler) -> None:
    """Add the redaction filter to a handler s3rs did not create (e.g. a test's)."""
    if not any(isinstance(f, RedactionFilter) for f in handler.filters):
        handler.addFilter(RedactionFilter())


# ------------------------------------------------------------------------ Spark's own log

#: log4j2 configuration for a Spark driver started by s3rs at any level but DEBUG: its
#: ERROR lines only, in the same layout as Spark's default. Spark's default prints WARN
#: lines and a banner ("Using Spark's default log4j profile", "Setting default log level")
#: on every start, which on a normal run say nothing a person can act on.
SPARK_LOG4J2_QUIET = """\
# written by s3rs (s3rs_assets/logs.py): Spark's ERROR lines only; `s3rs -v` shows all
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# the shells' loggers at the root's level: Spark then prints no "Setting default log level"
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.pyspark.name = org.apache.spark.api.python.PythonGatewayServer
logger.pyspark.level = error
"""


def level() -> int:
    """The level s3rs logs at: what `configure()` set, else S3RS_LOG_LEVEL (INFO)."""
    if _configured_level is not None:
        return _configured_level
    lvl = logging.getLevelName(os.environ.get(LEVEL_ENV, "INFO").strip().upper())
    return lvl if isinstance(lvl, int) else logging.INFO


def spark_log_options() -> str:
    """The JVM option that keeps a Spark driver started in this process quiet (its log4j
    ERROR lines only), or "" at DEBUG, where Spark's own WARN and INFO lines are wanted
    (`s3rs -v`). The configuration file is written once per content to the temp dir."""
    if level() <= logging.DEBUG:
        return ""
    digest = hashlib.md5(SPARK_LOG4J2_QUIET.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"s3rs-spark-log4j2-{digest}.properties"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(SPARK_LOG4J2_QUIET)
        tmp.replace(path)  # atomic: a concurrent run never reads half a file
    return f"-Dlog4j2.configurationFile={path.as_uri()}"
