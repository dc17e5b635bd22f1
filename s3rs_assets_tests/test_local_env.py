"""`.local/s3rs.env`: the settings `make demo` leaves so that the README's commands work in
a new shell, never overriding what the user exported (cli/local_env.py)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from s3rs_assets.cli import local_env
from s3rs_assets.errors import ConfigError
from s3rs_assets_tests.cli_stack import invoke, seed
from s3rs_assets_tests.conftest import REPO


def test_parse_and_write_round_trip(tmp_path):
    path = tmp_path / ".local" / "s3rs.env"
    local_env.write(path, {"S3RS_S3_BUCKET": "b", "S3RS_MYSQL_URL": "mysql://u:p@h:1/d",
                           "NOT_A_KEY": "x", "S3RS_SOURCE_TIMEZONE": ""})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it may hold a password
    assert local_env.parse(path.read_text()) == {
        "S3RS_MYSQL_URL": "mysql://u:p@h:1/d", "S3RS_S3_BUCKET": "b"}
    assert local_env.parse("# c\n\nexport A='1'\nB = \"two words\"\n") == {
        "A": "1", "B": "two words"}
    with pytest.raises(ConfigError, match=r"line 2: expected NAME=value, got 'oops'"):
        local_env.parse("A=1\noops\n", "f")


def test_found_from_the_directory_or_a_parent_and_never_overrides(tmp_path):
    local_env.write(tmp_path / ".local" / "s3rs.env",
                    {"S3RS_S3_BUCKET": "from-file", "S3RS_S3_PREFIX": "demo"})
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert local_env.find(sub, environ={}) == tmp_path / ".local" / "s3rs.env"
    assert local_env.find(sub, environ={"S3RS_ENV_FILE": ""}) is None  # switched off
    assert local_env.find(sub, environ={"S3RS_ENV_FILE": "/x/y"}) == local_env.Path("/x/y")
    env = {"S3RS_S3_BUCKET": "exported"}
    loaded = local_env.load(local_env.find(sub, environ={}), env)
    assert env == {"S3RS_S3_BUCKET": "exported", "S3RS_S3_PREFIX": "demo"}
    assert loaded.applied == ["S3RS_S3_PREFIX"]
    with pytest.raises(ConfigError, match="cannot read the settings file"):
        local_env.load(tmp_path / "missing.env", {})


def test_a_spark_connect_server_beside_the_file_is_used(tmp_path):
    """As scripts/env.sh does: a running server recorded in .local/spark-connect."""
    state = tmp_path / ".local"
    local_env.write(state / "s3rs.env", {"S3RS_S3_BUCKET": "b"})
    (state / "spark-connect").mkdir()
    (state / "spark-connect" / "server.pid").write_text(str(os.getpid()))  # not a server
    (state / "spark-connect" / "server.url").write_text("sc://127.0.0.1:1")
    env: dict[str, str] = {}
    local_env.load(state / "s3rs.env", env)
    assert "S3RS_SPARK_MASTER" not in env  # the pid is alive but not a Connect server


def test_the_cli_reads_the_file_in_a_new_shell(stack, tmp_path, monkeypatch):
    """The README's `s3rs watermark get -t T` after `make demo`, in a shell where nothing
    is exported: the CLI finds the demo's settings in .local/s3rs.env."""
    seed(stack)
    name = stack.name("cli_wm")
    settings = {k: os.environ[k] for k in local_env.KEYS if os.environ.get(k)}
    local_env.write(tmp_path / ".local" / "s3rs.env", settings)
    for k in settings:
        monkeypatch.delenv(k)
    monkeypatch.delenv("S3RS_ENV_FILE")
    monkeypatch.chdir(tmp_path)
    r = invoke("watermark", "get", "-t", name)
    assert r.exit_code == 0, r.output
    assert f"Watermark for {name}" in r.output and "rows extracted:       190" in r.output
    # an exported variable wins over the file
    monkeypatch.setenv("S3RS_S3_BUCKET", "no-such-bucket-here")
    r = invoke("watermark", "get", "-t", name)
    assert r.exit_code == 2 and "cannot use s3://no-such-bucket-here" in r.output


def test_the_demo_writes_the_settings_file(tmp_path):
    """scripts/demo.py records the stack it used (scripts/env.sh's variables)."""
    env = {**os.environ, "S3RS_STATE_DIR": str(tmp_path), "S3RS_S3_BUCKET": "demo-b",
           "S3RS_MYSQL_URL": "mysql://root:@127.0.0.1:3306/x", "PYTHONPATH": str(REPO)}
    code = ("import sys; sys.argv = ['demo']; sys.path.insert(0, 'scripts'); import demo; "
            "demo.write_settings()")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    written = local_env.parse((tmp_path / "s3rs.env").read_text())
    assert written["S3RS_S3_BUCKET"] == "demo-b"
    assert written["S3RS_MYSQL_URL"] == "mysql://root:@127.0.0.1:3306/x"
