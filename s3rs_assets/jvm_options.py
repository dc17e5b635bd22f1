"""JVM options for a Spark JVM that s3rs starts itself (a local `local[N]` session, the
`s3rs spark` Connect server), to cut its start-up and JIT CPU (issue 19).

A fresh Spark JVM spends ~10 CPU-s starting and ~5-6 more compiling on its first job, on a
2-core machine where the run's own work waits behind it. Two tunings, chosen by
`S3RS_SPARK_JVM` (or `SparkResource.jvm_tuning`):

- `cds`: a Class Data Sharing archive of the classes Spark loads. The first JVM writes it
  when it exits (`-XX:ArchiveClassesAtExit`, to a temporary name that is renamed into place
  only once that JVM exited cleanly: two processes never write the same file); later JVMs
  map it (`-XX:SharedArchiveFile`, `-Xshare:auto`: a missing, damaged or mismatched archive
  is a normal start). Its name is a digest of the JVM build and the jars (Spark's and
  `spark.jars`), so a new JDK or Spark makes a new one. Kept in `$S3RS_STATE_DIR/jvm` when
  S3RS_STATE_DIR is set (scripts/env.sh: `.local/jvm`), else in the record cache's
  directory (`$S3RS_CACHE_DIR/jvm`, `~/.cache/s3rs/jvm`); nowhere when that is `off`.
- `c1`: C1-only JIT (`-XX:TieredStopAtLevel=1`): cheaper compiling, slower compiled code.
  With the connectorx reader the JVM only schedules (rows are read and written in the
  Python workers), so only the compiling cost counts; with Spark's JDBC reader it decodes
  every row (see README "JVM start-up" for the figures behind the default).

`auto` (default): `cds`, plus `c1` when no table the resource serves reads through JDBC.
`off`: nothing. Otherwise a comma-separated list of the names above. The options are
appended to the user's own `spark.driver.extraJavaOptions`, never replace them.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from s3rs_assets.errors import ConfigError

log = logging.getLogger("s3rs.spark")

ENV = "S3RS_SPARK_JVM"
AUTO, OFF = "auto", "off"
C1_ONLY = "-XX:TieredStopAtLevel=1"
#: each tuning's fixed options (cds's depend on the archive: `cds_options`)
FIXED = {"c1": (C1_ONLY,)}
NAMES = frozenset({"cds", *FIXED})
#: quiet: CDS logs its warnings (classes it skips, a mismatched archive) on stdout
CDS_QUIET = "-Xlog:cds*=off"
#: a dynamic archive's first 4 bytes (HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC, little-endian)
DYNAMIC_MAGIC = (0xF00BABA8).to_bytes(4, "little")
#: temporary archives older than this were left by a JVM that died while writing
STALE_SECONDS = 3600.0
#: how long a process waits at exit for its JVM to write the archive
DUMP_WAIT_SECONDS = 60.0


def tunings(setting: str | None, *, jdbc_reads: bool) -> frozenset[str]:
    """The tunings a setting (`auto`, `off`, `cds,c1`, ...) names; ConfigError otherwise."""
    text = (setting or AUTO).strip().lower()
    if text == AUTO:
        return frozenset({"cds"} if jdbc_reads else {"cds", "c1"})
    if text in (OFF, "", "none"):
        return frozenset()
    got = frozenset(p.strip() for p in text.split(",") if p.strip())
    unknown = sorted(got - NAMES)
    if unknown:
        raise ConfigError(
            f"{ENV}: unknown JVM tuning {unknown[0]!r}: use auto, off or a comma-separated "
            f"list of {', '.join(sorted(NAMES))}"
        )
    return got


def java_home() -> Path | None:
    """The JDK Spark's launcher runs (`spark-class`: $JAVA_HOME, else `java` on PATH)."""
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"]).resolve()
    java = shutil.which("java")
    return Path(java).resolve().parent.parent if java else None


def spark_home() -> Path:
    """The Spark PySpark launches: $SPARK_HOME, else the pyspark package (its jars/)."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


def archive_dir() -> Path | None:
    """Where archives live (module docstring), None when nowhere."""
    state = os.environ.get("S3RS_STATE_DIR")
    if state:
        return Path(state) / "jvm"
    from s3rs_assets.body_cache import cache_root

    root = cache_root()
    return Path(root) / "jvm" if root else None


def _stat_line(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return f"{path} -"
    return f"{path} {st.st_size} {st.st_mtime_ns}"


def archive_key(spark_home: Path, jars: Iterable[str], home: Path | None = None) -> str | None:
    """A digest of what an archive depends on: the JVM build (its `release` file and
    libjvm), Spark's jars and `spark.jars`; None without a JDK."""
    home = home or java_home()
    if home is None:
        return None
    h = hashlib.sha256()
    with suppress(OSError):
        h.update((home / "release").read_bytes())
    h.update(_stat_line(home / "lib" / "server" / "libjvm.so").encode())
    jar_dir = spark_home / "jars"
    try:
        names = sorted(os.listdir(jar_dir))
    except OSError:
        names = []
    for name in names:
        h.update(_stat_line(jar_dir / name).encode())
    for jar in jars:
        h.update(_stat_line(Path(jar)).encode())
    return h.hexdigest()[:24]


def usable(path: Path) -> bool:
    """`path` is a whole archive: it starts like a dynamic CDS archive and has the size its
    name records (`spark-<key>-<size>.jsa`). HotSpot maps a truncated archive and dies of
    SIGBUS, so this is checked before the JVM sees it; `-XX:+VerifySharedSpaces` checks
    the regions' CRCs."""
    try:
        size = int(path.stem.rsplit("-", 1)[1])
        with path.open("rb") as f:
            return f.read(4) == DYNAMIC_MAGIC and os.fstat(f.fileno()).st_size == size
    except (OSError, ValueError, IndexError):
        return False


@dataclass(frozen=True)
class PendingArchive:
    """An archive this process's JVM writes at exit to `tmp`, renamed after it to
    `<stem>-<size>.jsa`."""

    tmp: Path
    stem: Path

    def finish(self, proc: subprocess.Popen | None, timeout: float = DUMP_WAIT_SECONDS) -> bool:
        """Let the JVM exit (PySpark's gateway JVM exits when its stdin closes), wait for
        it to write the archive, then rename it into place; True when it did. A JVM that
        did not exit cleanly leaves no archive."""
        try:
            if proc is not None:
                if proc.stdin is not None:
                    proc.stdin.close()
                if proc.wait(timeout=timeout) != 0:
                    self.tmp.unlink(missing_ok=True)
                    return False
            with self.tmp.open("rb") as f:
                whole = f.read(4) == DYNAMIC_MAGIC
                size = os.fstat(f.fileno()).st_size
            if whole:
                os.replace(self.tmp, self.stem.with_name(f"{self.stem.name}-{size}.jsa"))
                return True
            self.tmp.unlink(missing_ok=True)
        except (OSError, subprocess.TimeoutExpired) as e:
            # a JVM still writing keeps its file; _sweep removes it once stale
            log.debug("JVM class archive %s not kept: %s", self.stem, e)
        return False


def _sweep(directory: Path) -> None:
    """Remove temporary archives that a JVM left long ago (killed while writing)."""
    now = time.time()
    with suppress(OSError):
        for p in directory.glob(".*.tmp"):
            with suppress(OSError):
                if now - p.stat().st_mtime > STALE_SECONDS:
                    p.unlink()


def cds_options(
    spark_home: Path, jars: Iterable[str], *, create: bool = True
) -> tuple[list[str], PendingArchive | None]:
    """The options that use this JDK's and jars' archive, or (`create`) have the JVM write
    it (then also the archive to finish when the JVM ends)."""
    directory, key = archive_dir(), archive_key(spark_home, jars)
    if directory is None or key is None:
        return [], None
    stem = directory / f"spark-{key}"
    for found in sorted(directory.glob(f"{stem.name}-*.jsa")):
        if usable(found):
            return [f"-XX:SharedArchiveFile={found}", "-Xshare:auto", "-XX:+VerifySharedSpaces",
                    CDS_QUIET], None
        with suppress(OSError):
            found.unlink()  # damaged: a new one is written
    if not create:
        return [], None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        log.debug("no JVM class archive in %s: %s", directory, e)
        return [], None
    _sweep(directory)
    tmp = directory / f".{stem.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    return [f"-XX:ArchiveClassesAtExit={tmp}", CDS_QUIET], PendingArchive(tmp, stem)


#: flags of the user's own that mean "leave this tuning to me"
_USER_FLAGS = {
    "c1": ("-XX:TieredStopAtLevel", "-XX:-TieredCompilation", "-XX:+TieredCompilation"),
    "cds": ("-Xshare", "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit"),
}


def java_options(
    chosen: Iterable[str],
    spark_home: Path,
    jars: Iterable[str],
    user: str | None = None,
    *,
    create: bool = True,
) -> tuple[list[str], PendingArchive | None]:
    """The JVM options of the `chosen` tunings (and the archive to finish, if any); a
    tuning whose flags the `user`'s own options already set is left out (theirs win).
    `create=False`: an existing archive only (a JVM nobody waits for at its exit)."""
    own = (user or "").split()
    chosen = {n for n in chosen if not any(o.startswith(_USER_FLAGS.get(n, ())) for o in own)}
    opts: list[str] = [o for name in sorted(chosen & set(FIXED)) for o in FIXED[name]]
    pending = None
    if "cds" in chosen:
        more, pending = cds_options(spark_home, jars, create=create)
        opts += more
    return opts, pending


def server_options(jars: Iterable[str], spark_home: Path) -> list[str]:
    """Tunings of the `s3rs spark` Connect server's JVM: long-lived, so `auto` keeps the
    full JIT (its start-up is paid once) and maps the archive a local session wrote (the
    server is stopped by a signal: no process waits to keep an archive it would write)."""
    chosen = tunings(os.environ.get(ENV), jdbc_reads=True)
    return java_options(chosen, spark_home, jars, create=False)[0]


def append(existing: str | None, options: Iterable[str]) -> str:
    """`existing` extraJavaOptions with `options` after them (the user's own kept; an option
    they already give is not repeated)."""
    have = (existing or "").split()
    return " ".join([*have, *(o for o in options if o not in have)])


def finish_at_exit(pending: PendingArchive) -> None:
    """At this process's exit, let its gateway JVM write the archive and keep it."""

    def done() -> None:
        from pyspark import SparkContext

        # Stop PySpark's accumulator server first: its handler (<= 1 s to leave its poll)
        # would read the JVM's closed connection and print an EOFError traceback at exit.
        server = getattr(SparkContext._active_spark_context, "_accumulatorServer", None)
        if server is not None:
            with suppress(Exception):
                server.shutdown()
        gateway = SparkContext._gateway
        pending.finish(getattr(gateway, "proc", None))

    atexit.register(done)
