"""The project-local settings `make demo` leaves for the commands a person types next.

The demo's stack (MariaDB, the moto S3 server, PostgreSQL) is described by environment
variables that `scripts/env.sh` sets inside `make`. A new shell has none of them, so
`s3rs watermark get -t s3rs_demo.…` would not know the demo's table. The demo therefore
writes them to `.local/s3rs.env`, and every `s3rs` command reads that file first:

* a variable is taken from the file only when it is not set: what you export always wins;
* the file is `$S3RS_ENV_FILE` when that is set (set it empty to read no file), otherwise
  `.local/s3rs.env` in the current directory or the nearest parent directory holding one;
* one `NAME=value` per line, `#` starts a comment; the demo writes it with mode 0600 (it
  may hold a password when the demo was pointed at your own database);
* when `S3RS_SPARK_MASTER` is still unset, a Spark Connect server recorded beside the file
  (`.local/spark-connect`, started by `make ui` or `s3rs spark start`) is used, as
  `scripts/env.sh` does: runs attach to it instead of starting Spark.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path

from s3rs_assets.errors import ConfigError

ENV_FILE_VAR = "S3RS_ENV_FILE"
FILE_NAME = Path(".local") / "s3rs.env"
#: What the demo records: the variables that locate its stack (scripts/env.sh).
KEYS = (
    "S3RS_MYSQL_URL",
    "S3RS_S3_BUCKET",
    "S3RS_S3_PREFIX",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "S3RS_REDSHIFT_URL",
    "S3RS_TABLES",
    "DAGSTER_HOME",
    "S3RS_SOURCE_TIMEZONE",
)


@dataclass
class Loaded:
    """Which file was read, and which variables it set (the others were already set)."""

    path: Path | None
    applied: list[str] = field(default_factory=list)


def find(cwd: Path | None = None, environ: Mapping[str, str] = os.environ) -> Path | None:
    """The settings file this process uses, or None."""
    if ENV_FILE_VAR in environ:
        named = environ[ENV_FILE_VAR].strip()
        return Path(named) if named else None
    here = (cwd or Path.cwd()).resolve()
    for d in (here, *here.parents):
        candidate = d / FILE_NAME
        if candidate.is_file():
            return candidate
    return None


def parse(text: str, source: str = "settings") -> dict[str, str]:
    """`NAME=value` lines; blank lines and `#` comments skipped; quotes around a value
    removed. A line that is not an assignment is an error naming the line."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        name = name.strip()
        if name.startswith("export "):
            name = name[len("export ") :].strip()
        if not eq or not name.replace("_", "").isalnum():
            raise ConfigError(f"{source}, line {n}: expected NAME=value, got {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[name] = value
    return out


def load(
    path: Path | None = None, environ: MutableMapping[str, str] = os.environ
) -> Loaded:
    """Set every variable of the settings file that is not set yet; see the module
    docstring. A file named by S3RS_ENV_FILE that does not exist is an error."""
    path = path if path is not None else find(environ=environ)
    found = Loaded(path)
    if path is None:
        return found
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read the settings file {path} ({ENV_FILE_VAR}): {e}") from None
    for name, value in parse(text, str(path)).items():
        if name not in environ:
            environ[name] = value
            found.applied.append(name)
    if not environ.get("S3RS_SPARK_MASTER"):
        url = connect_server_url(path.parent / "spark-connect")
        if url is not None:
            environ["S3RS_SPARK_MASTER"] = url
            found.applied.append("S3RS_SPARK_MASTER")
    return found


def connect_server_url(state_dir: Path) -> str | None:
    """The URL of the Spark Connect server recorded in `state_dir` when its process is
    alive and is that server: the check scripts/env.sh makes, kept light here (every
    `s3rs` command runs it; spark_server.py, which owns the server, imports Spark's side)."""
    try:
        pid = int((state_dir / "server.pid").read_text().strip())
        url = (state_dir / "server.url").read_text().strip()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return url if b"SparkConnectServer" in cmdline and url else None


def write(path: Path, values: Mapping[str, str]) -> None:
    """Write the settings file (mode 0600): the `KEYS` of `values` that are set."""
    lines = [
        "# Written by `make demo` (scripts/demo.py): the local stack's settings, read by",
        "# every `s3rs` command for the variables you have not exported yourself.",
        "# `make clean` removes it; s3rs_assets/cli/local_env.py says how it is found.",
    ]
    for key in KEYS:
        value = values.get(key)
        if value:
            if "\n" in value:
                raise ConfigError(f"{key} holds a line break: not written to {path}")
            lines.append(f"{key}={value}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o600)
