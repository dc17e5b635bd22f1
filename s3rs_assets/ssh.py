"""An SSH tunnel to MySQL (paramiko local port forward), for sources behind a bastion.

Configured by `S3RS_SSH_HOST` (host[:port]), `S3RS_SSH_USER`, `S3RS_SSH_KEY_FILE`,
`S3RS_SSH_KNOWN_HOSTS` and optionally `S3RS_SSH_KEY_PASSPHRASE` (or the matching
`MySQLResource` fields). The MySQL host and port in `S3RS_MYSQL_URL` are then the ones the
SSH server sees (often 127.0.0.1:3306 on the bastion, or a private database address).

What `sshtunnel` gets wrong and this does not (STACK.md): the local end binds 127.0.0.1
only, never 0.0.0.0; the server's host key must be in the known_hosts file (unknown or
mismatched keys are refused: `RejectPolicy`, no agent, no `~/.ssh` lookups); and no object
here prints a key, passphrase or password (`repr` shows host and ports only).

One tunnel per (bastion, user, key, MySQL host:port) and process: `tunnel_for()` starts it
on first use and hands out the same local port afterwards. The listening socket outlives
the SSH connection: when the transport drops (bastion restart, idle timeout between
chunks), the next `ensure()` (`MySQLResource.endpoint()` calls it) or the next forwarded
connection re-opens it, so a JDBC URL or connectorx URL built earlier stays valid.
Spark tasks reach the tunnel at 127.0.0.1: that works with a local master (`local[*]`);
executors on other hosts need their own route to MySQL.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import select
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

from s3rs_assets.errors import ConfigError
from s3rs_assets.logs import add_secret

log = logging.getLogger("s3rs.ssh")

ENV = {
    "host": "S3RS_SSH_HOST",
    "user": "S3RS_SSH_USER",
    "key_file": "S3RS_SSH_KEY_FILE",
    "known_hosts": "S3RS_SSH_KNOWN_HOSTS",
}
PASSPHRASE_ENV = "S3RS_SSH_KEY_PASSPHRASE"
KEEPALIVE_SECONDS = 30
BUFFER = 65536


def split_host_port(value: str, default_port: int = 22) -> tuple[str, int]:
    """`host`, `host:port`, `[v6addr]` or `[v6addr]:port`."""
    value = value.strip()
    if not value:
        raise ConfigError(f"{ENV['host']} is empty")
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        host, port = value.split(":")
    else:
        host, port = value, ""
    if not host:
        raise ConfigError(f"{ENV['host']} {value!r} names no host")
    if port:
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{ENV['host']} {value!r}: port must be a number 1-65535")
        return host, int(port)
    return host, default_port


@dataclass(frozen=True)
class SSHSettings:
    """Where and how to log in to the bastion; `repr` never shows the passphrase."""

    host: str
    port: int
    user: str
    key_file: str
    known_hosts: str
    passphrase: str | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        host: str | None,
        user: str | None,
        key_file: str | None,
        known_hosts: str | None,
        passphrase: str | None = None,
    ) -> SSHSettings | None:
        """None when no SSH host is set; a ConfigError naming what is missing otherwise."""
        if not host:
            return None
        given = {"user": user, "key_file": key_file, "known_hosts": known_hosts}
        missing = [ENV[k] for k, v in given.items() if not v]
        if missing:
            raise ConfigError(
                f"{ENV['host']} is set, so the SSH tunnel also needs {', '.join(missing)}"
            )
        h, p = split_host_port(host)
        for what, path in (("key_file", key_file), ("known_hosts", known_hosts)):
            if not Path(str(path)).is_file():
                raise ConfigError(f"{ENV[what]}: {path} is not a readable file")
        return cls(h, p, str(user), str(key_file), str(known_hosts), passphrase or None)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> SSHSettings | None:
        env = dict(os.environ if env is None else env)
        return cls.build(
            env.get(ENV["host"]),
            env.get(ENV["user"]),
            env.get(ENV["key_file"]),
            env.get(ENV["known_hosts"]),
            env.get(PASSPHRASE_ENV),
        )

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class SSHTunnel:
    """127.0.0.1:<local_port> -> (SSH to settings.host) -> remote_host:remote_port."""

    def __init__(
        self, settings: SSHSettings, remote_host: str, remote_port: int, timeout: float = 10
    ):
        self.settings = settings
        self.remote = (remote_host, int(remote_port))
        self.timeout = timeout
        self._client = None  # paramiko.SSHClient
        self._lock = threading.RLock()
        self._server: socket.socket | None = None
        self._closed = threading.Event()
        self.connects = 0  # SSH logins so far (1 + reconnects)
        self.forwarded = 0  # local connections carried so far

    def __repr__(self) -> str:
        return (
            f"SSHTunnel(127.0.0.1:{self.local_port} -> {self.settings.address} -> "
            f"{self.remote[0]}:{self.remote[1]})"
        )

    # ------------------------------------------------------------------ lifecycle

    @property
    def local_port(self) -> int | None:
        return self._server.getsockname()[1] if self._server else None

    @property
    def transport(self):
        return self._client.get_transport() if self._client else None

    def is_alive(self) -> bool:
        t = self.transport
        return bool(t and t.is_active() and t.is_authenticated())

    def start(self) -> SSHTunnel:
        with self._lock:
            if self._server is None:
                self._connect()  # fail before binding anything
                srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                srv.bind(("127.0.0.1", 0))  # loopback only, never 0.0.0.0
                srv.listen(16)
                self._server = srv
                threading.Thread(target=self._serve, name="s3rs-ssh-accept", daemon=True).start()
                log.info(
                    "SSH tunnel up: 127.0.0.1:%d -> %s -> %s:%d",
                    self.local_port,
                    self.settings.address,
                    *self.remote,
                )
        return self

    def ensure(self) -> None:
        """Re-open the SSH connection if it dropped; raise ConfigError if it cannot be."""
        if self._closed.is_set():
            raise ConfigError("the SSH tunnel was closed")
        if not self.is_alive():
            with self._lock:
                if not self.is_alive():
                    if self.connects:
                        log.warning(
                            "SSH tunnel to %s dropped; reconnecting", self.settings.address
                        )
                    self._connect()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._server is not None:
                with contextlib.suppress(OSError):
                    self._server.close()
            if self._client is not None:
                self._client.close()
                self._client = None

    def drop(self) -> None:
        """Close the SSH connection but keep the local port (tests: simulate a drop)."""
        with self._lock:
            if self._client is not None:
                self._client.close()

    # ------------------------------------------------------------------ internals

    def _connect(self) -> None:
        import paramiko

        s = self.settings
        if self._client is not None:
            self._client.close()
            self._client = None
        client = paramiko.SSHClient()
        try:
            client.load_host_keys(s.known_hosts)
        except (OSError, paramiko.SSHException) as e:
            raise ConfigError(
                f"{ENV['known_hosts']}: cannot read {s.known_hosts}: {type(e).__name__}"
            ) from None
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                s.host,
                port=s.port,
                username=s.user,
                key_filename=s.key_file,
                passphrase=s.passphrase,
                look_for_keys=False,
                allow_agent=False,
                timeout=self.timeout,
                banner_timeout=self.timeout,
                auth_timeout=self.timeout,
            )
        except paramiko.BadHostKeyException as e:
            client.close()
            raise ConfigError(
                f"SSH host {s.address} presented a {e.key.get_name()} host key that does not "
                f"match {s.known_hosts} (fingerprint {e.key.fingerprint}): refusing to connect"
            ) from None
        except paramiko.AuthenticationException:
            client.close()
            raise ConfigError(
                f"SSH authentication to {s.address} failed for the user in {ENV['user']} "
                f"with the key in {ENV['key_file']}"
            ) from None
        except paramiko.SSHException as e:
            client.close()
            msg = str(e)
            if "not found in known_hosts" in msg:
                msg = (
                    f"its host key is not in {s.known_hosts} "
                    "(add it with ssh-keyscan, then check the fingerprint)"
                )
            raise ConfigError(f"SSH connection to {s.address} refused: {msg}") from None
        except (OSError, EOFError) as e:
            client.close()
            raise ConfigError(
                f"cannot reach SSH host {s.address}: {type(e).__name__}: {e}"
            ) from None
        transport = client.get_transport()
        transport.set_keepalive(KEEPALIVE_SECONDS)
        self._client = client
        self.connects += 1

    def _open_channel(self, peer: tuple[str, int]):
        import paramiko

        for attempt in (1, 2):
            self.ensure()
            try:
                return self.transport.open_channel(
                    "direct-tcpip", self.remote, peer, timeout=self.timeout
                )
            except (paramiko.SSHException, EOFError, OSError, AttributeError) as e:
                if attempt == 2:
                    raise ConfigError(
                        f"SSH server {self.settings.address} could not open a channel to "
                        f"{self.remote[0]}:{self.remote[1]}: {e}"
                    ) from None
                with self._lock:  # a half-dead transport: force a fresh login
                    if self._client is not None:
                        self._client.close()
        raise AssertionError("unreachable")

    def _serve(self) -> None:
        srv = self._server
        while not self._closed.is_set() and srv is not None:
            try:
                conn, peer = srv.accept()
            except OSError:
                return  # closed
            threading.Thread(
                target=self._forward, args=(conn, peer), name="s3rs-ssh-fwd", daemon=True
            ).start()

    def _forward(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        try:
            chan = self._open_channel(peer)
        except ConfigError as e:
            log.error("SSH tunnel: %s", e)
            conn.close()
            return
        self.forwarded += 1
        try:
            while True:
                ready, _, _ = select.select([conn, chan], [], [], 60)
                if conn in ready:
                    data = conn.recv(BUFFER)
                    if not data:
                        break
                    chan.sendall(data)
                if chan in ready:
                    data = chan.recv(BUFFER)
                    if not data:
                        break
                    conn.sendall(data)
                if not ready and (chan.closed or not self.is_alive()):
                    break
        except (OSError, EOFError):
            pass
        finally:
            chan.close()
            conn.close()


_TUNNELS: dict[tuple, SSHTunnel] = {}
_TUNNELS_LOCK = threading.Lock()


def tunnel_for(
    settings: SSHSettings, remote_host: str, remote_port: int, timeout: float = 10
) -> SSHTunnel:
    """This process's tunnel for these settings, started and checked alive."""
    key = (
        settings.host, settings.port, settings.user, settings.key_file, settings.known_hosts,
        remote_host, int(remote_port),
    )
    with _TUNNELS_LOCK:
        tunnel = _TUNNELS.get(key)
        if tunnel is None or tunnel._closed.is_set():
            tunnel = SSHTunnel(settings, remote_host, remote_port, timeout).start()
            _TUNNELS[key] = tunnel
            if settings.passphrase:
                add_secret(settings.passphrase)
    tunnel.ensure()
    return tunnel


def close_all() -> None:
    with _TUNNELS_LOCK:
        for t in _TUNNELS.values():
            t.close()
        _TUNNELS.clear()


atexit.register(close_all)
