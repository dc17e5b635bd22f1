"""The SSH tunnel to MySQL against a real sshd started on a loopback port by the test."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import boto3
import pyarrow as pa
import pytest

from s3rs_assets import ssh
from s3rs_assets.errors import ConfigError
from s3rs_assets.io_manager import store_for
from s3rs_assets.resources import MySQLResource, S3Resource
from s3rs_assets_tests.cli_stack import PREFIX, day, invoke, mysql
from s3rs_assets_tests.conftest import MYSQL_PORT, free_port
from s3rs_assets_tests.helpers import make_ties_table, read_parquet

# the CLI test module's fixtures: one table list per session, one stack per test

SSHD = "/usr/sbin/sshd"
PASSPHRASE = "ssh-Passphrase-Sentinel-4711"

pytestmark = pytest.mark.skipif(
    not (os.path.exists(SSHD) and shutil.which("ssh-keygen") and os.geteuid() == 0),
    reason="needs openssh-server (scripts/setup.sh) and root for a throwaway sshd",
)


def _keygen(path: Path, passphrase: str = "") -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "s3rs-test",
                    "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().split()[:2]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    d = tmp_path_factory.mktemp("sshd")
    host_type, host_key = _keygen(d / "host_key")
    wrong_type, wrong_key = _keygen(d / "other_host_key")
    user_type, user_key = _keygen(d / "id_ed25519", PASSPHRASE)
    (d / "authorized_keys").write_text(f"{user_type} {user_key} s3rs-test\n")
    port = free_port()
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_type} {host_key}\n")
    (d / "wrong_known_hosts").write_text(f"[127.0.0.1]:{port} {wrong_type} {wrong_key}\n")
    (d / "empty_known_hosts").write_text("")
    cfg = d / "sshd_config"
    cfg.write_text(
        "\n".join([
            "ListenAddress 127.0.0.1",
            f"HostKey {d / 'host_key'}",
            f"PidFile {d / 'sshd.pid'}",
            f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "UsePAM no",
            "StrictModes no",
            "AllowTcpForwarding yes",
            "LogLevel ERROR",
            "",
        ])
    )
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg), "-p", str(port)],
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"sshd did not start: {proc.stderr.read().decode()}") from None
            time.sleep(0.1)
    env = {
        "S3RS_SSH_HOST": f"127.0.0.1:{port}",
        "S3RS_SSH_USER": "root",
        "S3RS_SSH_KEY_FILE": str(d / "id_ed25519"),
        "S3RS_SSH_KNOWN_HOSTS": str(d / "known_hosts"),
        "S3RS_SSH_KEY_PASSPHRASE": PASSPHRASE,
    }
    yield {"dir": d, "port": port, "env": env}
    ssh.close_all()
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def tunnel_env(sshd, monkeypatch):
    for k, v in sshd["env"].items():
        monkeypatch.setenv(k, v)
    yield sshd
    ssh.close_all()


# ------------------------------------------------------------------------ settings (pure)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("bastion", ("bastion", 22)), ("bastion:2222", ("bastion", 2222)),
     ("[::1]:2200", ("::1", 2200)), ("[fe80::1]", ("fe80::1", 22))],
)
def test_split_host_port(value, expected):
    assert ssh.split_host_port(value) == expected


@pytest.mark.parametrize("value", ["bastion:abc", "bastion:0", ":22", "[]:22"])
def test_split_host_port_rejects(value):
    with pytest.raises(ConfigError, match="S3RS_SSH_HOST"):
        ssh.split_host_port(value)


def test_settings_need_every_variable(tmp_path):
    assert ssh.SSHSettings.from_env({}) is None
    with pytest.raises(ConfigError, match="S3RS_SSH_USER, S3RS_SSH_KEY_FILE, S3RS_SSH_KNOWN_HOSTS"):
        ssh.SSHSettings.from_env({"S3RS_SSH_HOST": "h"})
    with pytest.raises(ConfigError, match="S3RS_SSH_KEY_FILE: /nope is not a readable file"):
        ssh.SSHSettings.from_env({"S3RS_SSH_HOST": "h", "S3RS_SSH_USER": "u",
                                  "S3RS_SSH_KEY_FILE": "/nope",
                                  "S3RS_SSH_KNOWN_HOSTS": "/nope"})
    key = tmp_path / "k"
    key.write_text("x")
    s = ssh.SSHSettings.build("h:2", "u", str(key), str(key), "secret-pass")
    assert "secret-pass" not in repr(s) and s.address == "h:2"


# ----------------------------------------------------------------------- the real sshd


def test_tunnel_binds_loopback_checks_the_host_key_and_hides_secrets(tunnel_env, mysql_url,
                                                                     caplog):
    caplog.set_level(logging.DEBUG)
    res = MySQLResource(url=mysql_url)
    host, port = res.endpoint()
    assert host == "127.0.0.1" and port != MYSQL_PORT
    (tunnel,) = ssh._TUNNELS.values()
    assert tunnel._server.getsockname()[0] == "127.0.0.1"  # never 0.0.0.0
    with res.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT 42")
        assert cur.fetchone()[0] == 42
    assert tunnel.forwarded >= 1 and tunnel.connects == 1
    assert res.jdbc_url().startswith(f"jdbc:mysql://127.0.0.1:{port}/")
    assert f"@127.0.0.1:{port}/" in res.connectorx_url()
    text = caplog.text + repr(tunnel) + repr(tunnel.settings) + repr(res)
    assert PASSPHRASE not in text
    assert "SSH tunnel up: 127.0.0.1:" in caplog.text


def test_reconnects_when_the_tunnel_drops_between_chunks(tunnel_env, mysql_url):
    res = MySQLResource(url=mysql_url)
    _, port = res.endpoint()
    (tunnel,) = ssh._TUNNELS.values()
    tunnel.drop()  # the bastion went away between two chunks
    assert not tunnel.is_alive()
    with res.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT 1")
    assert tunnel.connects == 2 and res.endpoint()[1] == port  # same local port
    # a URL built before the drop (Spark's connectorx/JDBC URL) keeps working
    tunnel.drop()
    import pymysql

    from s3rs_assets.config import DatabaseURL

    p = DatabaseURL.parse(mysql_url, env="x", schemes=("mysql",), default_port=3306)
    with pymysql.connect(host="127.0.0.1", port=port, user=p.user, password=p.password) as c:
        assert c.open
    assert tunnel.connects == 3


@pytest.mark.parametrize(
    ("known_hosts", "message"),
    [("wrong_known_hosts", "does not match"), ("empty_known_hosts", "is not in")],
)
def test_a_wrong_or_unknown_host_key_is_refused(sshd, monkeypatch, mysql_url, known_hosts,
                                                message):
    for k, v in sshd["env"].items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("S3RS_SSH_KNOWN_HOSTS", str(sshd["dir"] / known_hosts))
    with pytest.raises(ConfigError, match=message) as err:
        MySQLResource(url=mysql_url).connect()
    assert PASSPHRASE not in str(err.value)
    assert not ssh._TUNNELS  # nothing listening
    ssh.close_all()


def test_cli_reports_a_refused_host_key(sshd, stack, monkeypatch):
    for k, v in sshd["env"].items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("S3RS_SSH_KNOWN_HOSTS", str(sshd["dir"] / "wrong_known_hosts"))
    r = invoke("tables", "discover", "--schema", stack.db)
    assert r.exit_code == 2
    assert f"SSH host 127.0.0.1:{sshd['port']} presented a ssh-ed25519 host key that does not" \
           in r.output and "refusing to connect" in r.output
    ssh.close_all()


def test_bad_passphrase_fails_cleanly(tunnel_env, monkeypatch, mysql_url):
    monkeypatch.setenv("S3RS_SSH_KEY_PASSPHRASE", "not-the-passphrase")
    with pytest.raises(ConfigError) as err:
        MySQLResource(url=mysql_url).connect()
    assert "not-the-passphrase" not in str(err.value) and PASSPHRASE not in str(err.value)


def _rows(s3_client, bucket: str, table: str) -> tuple[pa.Table, dict]:
    store = store_for(S3Resource(bucket=bucket, prefix=PREFIX))
    rec = store.read(table)
    keys = [f.key for p in rec.partitions.values() for f in p.files]
    data = read_parquet(s3_client, bucket, keys).sort_by("id")
    parts = {k: (p.status, p.rows, str(p.cursor)) for k, p in rec.partitions.items()}
    return data, parts


def test_sync_over_the_tunnel_equals_a_direct_sync(stack, sshd, monkeypatch, moto_endpoint):
    from datetime import timedelta

    rows = [(i, day(2) + timedelta(hours=2, microseconds=i % 4)) for i in range(1, 46)]
    rows += [(i, day(1) + timedelta(hours=7)) for i in range(46, 71)]
    with mysql(stack.db) as conn:
        make_ties_table(conn, "ssh_orders", rows)
    name = stack.name("ssh_orders")
    direct = invoke("sync", "-t", name, "--backup-only")
    assert direct.exit_code == 0, direct.output
    assert not ssh._TUNNELS

    other = f"{stack.bucket}-ssh"
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=other)
    monkeypatch.setenv("S3RS_S3_BUCKET", other)
    for k, v in sshd["env"].items():
        monkeypatch.setenv(k, v)
    tunneled = invoke("sync", "-t", name, "--backup-only")
    assert tunneled.exit_code == 0, tunneled.output
    (tunnel,) = ssh._TUNNELS.values()
    assert tunnel.forwarded >= 3  # pymysql planning + the Spark tasks' connectorx reads
    a, parts_a = _rows(stack.s3, stack.bucket, name)
    b, parts_b = _rows(stack.s3, other, name)
    assert a.num_rows == 70 and a.equals(b)
    assert parts_a == parts_b
    assert PASSPHRASE not in tunneled.output
    ssh.close_all()


def test_key_file_passphrase_never_printed(tunnel_env, stack):
    with mysql(stack.db) as conn:
        make_ties_table(conn, "ssh_discover", [(1, day(1))])
    r = invoke("--log-level", "DEBUG", "tables", "discover", "--schema", stack.db)
    assert r.exit_code == 0, r.output
    assert PASSPHRASE not in r.output
