"""The start-up tunings of a Spark JVM s3rs launches (jvm_options.py): which options a
setting names, that they reach the JVM's command line after the user's own, that the off
switch leaves them out, and that the class archive is never required: a damaged archive, an
archive of another classpath, or two processes writing one at once all end in a JVM that
starts. The archive checks run plain `java` (a JVM of a few MB in a subprocess), not Spark;
one test reads the shared test session's JVM command line, one starts a small Spark of its
own in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from s3rs_assets import jvm_options
from s3rs_assets.errors import ConfigError
from s3rs_assets.jvm_options import C1_ONLY, PendingArchive
from s3rs_assets.resources import SparkResource, local_jvm_options, spark_defaults
from s3rs_assets_tests.conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="no java")


@pytest.fixture
def state(tmp_path, monkeypatch) -> Path:
    """An empty state directory; archives go to its jvm/."""
    monkeypatch.setenv("S3RS_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv(jvm_options.ENV, raising=False)
    return tmp_path / "state" / "jvm"


def _jar(path: Path, name: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    jar = path / name
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
    return jar


@pytest.fixture
def home(tmp_path) -> Path:
    """A stand-in SPARK_HOME with one jar (its jars/ is what the archive key reads)."""
    _jar(tmp_path / "spark" / "jars", "a.jar")
    return tmp_path / "spark"


def _java(opts: list[str], classpath: Path) -> subprocess.Popen:
    """A small JVM with `opts` (exits by itself after printing its version)."""
    return subprocess.Popen(["java", *opts, "-cp", str(classpath), "-version"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _run(opts: list[str], classpath: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["java", *opts, "-cp", str(classpath), "-version"],
                          capture_output=True, text=True, timeout=60)


def _written(state: Path, home: Path) -> Path:
    """Have a JVM write the archive, keep it; its path."""
    opts, pending = jvm_options.cds_options(home, [])
    assert pending is not None and any(o.startswith("-XX:ArchiveClassesAtExit=") for o in opts)
    assert pending.finish(_java(opts, home / "jars" / "a.jar"))
    (found,) = state.glob("spark-*.jsa")
    return found


# ------------------------------------------------------------------ which options


def test_settings_name_tunings():
    assert jvm_options.tunings("auto", jdbc_reads=False) == {"cds", "c1"}
    assert jvm_options.tunings(None, jdbc_reads=True) == {"cds"}
    assert jvm_options.tunings("off", jdbc_reads=False) == set()
    assert jvm_options.tunings("C1", jdbc_reads=True) == {"c1"}
    assert jvm_options.tunings("cds, c1", jdbc_reads=True) == {"cds", "c1"}
    with pytest.raises(ConfigError, match="S3RS_SPARK_JVM: unknown JVM tuning 'c2'"):
        jvm_options.tunings("c1,c2", jdbc_reads=False)


def test_options_follow_the_users_own_and_never_replace_them(state, home):
    user = "-Duser.timezone=UTC -XX:TieredStopAtLevel=4 -Dmine=1"
    opts, pending = jvm_options.java_options({"c1", "cds"}, home, [], user)
    assert C1_ONLY not in opts  # their TieredStopAtLevel wins
    assert any(o.startswith("-XX:ArchiveClassesAtExit=") for o in opts) and pending
    merged = jvm_options.append(user, opts)
    assert merged.startswith(user + " ") and merged.split()[3:] == opts
    opts, pending = jvm_options.java_options({"c1", "cds"}, home, [], "-Xshare:off")
    assert opts == [C1_ONLY] and pending is None  # their sharing setting wins
    assert jvm_options.append("-Da=1 " + C1_ONLY, [C1_ONLY]) == "-Da=1 " + C1_ONLY


def test_the_resource_setting_and_the_off_switch(state, home, monkeypatch):
    monkeypatch.setenv("SPARK_HOME", str(home))
    res = SparkResource(spark_config=spark_defaults("local[1]"), jdbc_reads=False)
    opts, pending = local_jvm_options(res, [], None)
    assert C1_ONLY in opts and pending is not None
    monkeypatch.setenv(jvm_options.ENV, "off")
    assert local_jvm_options(res, [], None) == ([], None)
    monkeypatch.setenv(jvm_options.ENV, "auto")
    jdbc = SparkResource(spark_config=spark_defaults("local[1]"), jdbc_reads=True)
    assert C1_ONLY not in local_jvm_options(jdbc, [], None)[0]
    fixed = SparkResource(spark_config=spark_defaults("local[1]"), jvm_tuning="c1")
    assert local_jvm_options(fixed, [], None) == ([C1_ONLY], None)


def test_the_tables_readers_decide_c1(monkeypatch):
    from s3rs_assets.config import TableConfig
    from s3rs_assets.env_resources import resources_from_env

    monkeypatch.setenv("S3RS_MYSQL_URL", "mysql://u:p@127.0.0.1:3306/db")

    def table(reader: str) -> TableConfig:
        return TableConfig.from_dict({"name": "db.t", "start": "2024-01-01",
                                      "primary_key": ["id"], "reader": reader})

    def spark(**kw) -> SparkResource:
        return resources_from_env(names=["spark"], **kw)["spark"]

    assert spark(tables=[table("connectorx")]).jdbc_reads is False
    assert spark(tables=[table("connectorx"), table("jdbc")]).jdbc_reads is True
    assert spark().jdbc_reads is True  # not known: the full JIT


def test_the_connect_server_maps_an_archive_but_never_writes_one(state, home, monkeypatch):
    from s3rs_assets import spark_server

    monkeypatch.setattr(spark_server, "spark_home", lambda: home)
    settings = spark_server.ServerSettings(jars="", state_dir=state.parent / "sc")
    assert settings.conf()["spark.driver.extraJavaOptions"] == "-Duser.timezone=UTC"
    found = _written(state, home)
    opts = settings.conf()["spark.driver.extraJavaOptions"].split()
    assert opts[0] == "-Duser.timezone=UTC" and f"-XX:SharedArchiveFile={found}" in opts
    assert C1_ONLY not in opts


# ------------------------------------------------------------------ the archive


def test_an_archive_is_written_once_then_mapped(state, home):
    found = _written(state, home)
    assert not list(state.glob(".*.tmp"))
    opts, pending = jvm_options.cds_options(home, [])
    assert pending is None and f"-XX:SharedArchiveFile={found}" in opts
    run = _run([*opts, "-Xlog:class+load=info"], home / "jars" / "a.jar")
    assert run.returncode == 0 and "shared objects file (top)" in run.stdout


def test_a_truncated_or_damaged_archive_is_never_handed_to_the_jvm(state, home):
    found = _written(state, home)
    data = found.read_bytes()
    found.write_bytes(data[: len(data) // 2])  # HotSpot maps this and dies of SIGBUS
    opts, pending = jvm_options.cds_options(home, [])
    assert pending is not None and not found.exists()  # removed, written again
    assert _run(opts, home / "jars" / "a.jar").returncode == 0
    # same size, bytes flipped after the header: the JVM's CRC check falls back
    found = _written(state, home)
    damaged = bytearray(found.read_bytes())
    for i in range(4096, len(damaged), 997):
        damaged[i] ^= 0xFF
    found.write_bytes(bytes(damaged))
    opts, pending = jvm_options.cds_options(home, [])
    assert pending is None
    run = _run([*opts, "-Xlog:class+load=info"], home / "jars" / "a.jar")
    assert run.returncode == 0 and "shared objects file (top)" not in run.stdout


def test_an_archive_of_another_classpath_is_a_normal_start(state, home):
    found = _written(state, home)
    other = _jar(home.parent / "other", "b.jar")
    run = _run([f"-XX:SharedArchiveFile={found}", "-Xshare:auto", jvm_options.CDS_QUIET], other)
    assert run.returncode == 0 and "cds" not in (run.stdout + run.stderr).lower()
    # a new jar in Spark's jars/ (a new Spark) is another key, so another archive
    key = jvm_options.archive_key(home, [])
    _jar(home / "jars", "c.jar")
    assert jvm_options.archive_key(home, []) != key
    assert jvm_options.cds_options(home, [])[1] is not None


def test_two_processes_writing_at_once_leave_one_whole_archive(state, home):
    first, second = jvm_options.cds_options(home, []), jvm_options.cds_options(home, [])
    assert first[1] is not None and second[1] is not None and first[1].tmp != second[1].tmp
    procs = [_java(opts, home / "jars" / "a.jar") for opts, _ in (first, second)]
    assert all(p.finish(proc) for (_, p), proc in zip((first, second), procs, strict=True))
    (found,) = state.glob("spark-*.jsa")
    assert jvm_options.usable(found) and not list(state.glob(".*.tmp"))


def test_a_jvm_that_fails_or_a_stale_temporary_leaves_no_archive(state, home):
    opts, pending = jvm_options.cds_options(home, [])
    assert isinstance(pending, PendingArchive)
    bad = subprocess.Popen(["java", *opts, "-XX:NoSuchOption", "-version"],
                           stdin=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert not pending.finish(bad) and not list(state.iterdir())
    stale = state / ".spark-x.1.ab.tmp"
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 2 * jvm_options.STALE_SECONDS,) * 2)
    jvm_options.cds_options(home, [])
    assert not stale.exists()


# ------------------------------------------------------------------ a real Spark JVM


def test_the_shared_sessions_jvm_got_the_options(spark):
    """The test session's JVM (conftest: local[2], JDBC reads not ruled out, S3RS_SPARK_JVM
    as the session sets it): the chosen tunings' options on its command line, after the
    UTC option."""
    from pyspark import SparkContext

    chosen = jvm_options.tunings(os.environ.get(jvm_options.ENV), jdbc_reads=True)
    argv = Path(f"/proc/{SparkContext._gateway.proc.pid}/cmdline").read_bytes().split(b"\0")
    args = [a.decode() for a in argv]
    assert "-Duser.timezone=UTC" in args
    assert (C1_ONLY in args) == ("c1" in chosen)
    if "c1" in chosen:
        assert args.index(C1_ONLY) > args.index("-Duser.timezone=UTC")
    cds = [a for a in args if a.startswith(("-XX:SharedArchiveFile", "-XX:ArchiveClasses"))]
    assert len(cds) == int("cds" in chosen and jvm_options.archive_dir() is not None)


SPARK = """
import sys
from pyspark import SparkContext
from s3rs_assets.resources import SparkResource, get_spark, spark_defaults
res = SparkResource(spark_config=spark_defaults("local[1]"), jdbc_reads=False)
session = get_spark(res)
print("rows", session.range(3).count())
# a job in Python workers: the JVM then holds a connection to PySpark's accumulator server
print("python rows", session.sparkContext.parallelize(range(4), 2).map(lambda x: x).count())
print("argv", open(f"/proc/{SparkContext._gateway.proc.pid}/cmdline").read().split("\\0"))
"""


@pytest.mark.timeout(300)
def test_a_local_spark_writes_the_archive_at_exit_and_the_next_one_maps_it(state, tmp_path):
    """Two small Spark processes one after the other: the first writes the archive as it
    exits (C1 only: no JDBC reads), quietly, the second starts with it."""
    env = dict(os.environ, S3RS_STATE_DIR=str(state.parent), PYTHONPATH=str(REPO))
    env.pop(jvm_options.ENV, None)
    outs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", SPARK], cwd=REPO, env=env, text=True,
                           capture_output=True, timeout=240)
        assert p.returncode == 0 and "rows 3" in p.stdout, p.stderr[-3000:]
        said = [ln for ln in (p.stdout + p.stderr).splitlines() if not ln.startswith("argv")]
        assert not [ln for ln in said if "cds" in ln.lower()], said  # the JVM's CDS logs
        # the JVM closed at exit while the accumulator server listened: no EOFError printed
        assert "Traceback" not in p.stderr and "python rows 4" in p.stdout, p.stderr[-3000:]
        outs.append(p.stdout)
    (found,) = state.glob("spark-*.jsa")
    assert "-XX:ArchiveClassesAtExit=" in outs[0] and C1_ONLY in outs[0]
    assert f"-XX:SharedArchiveFile={found}" in outs[1] and C1_ONLY in outs[1]
