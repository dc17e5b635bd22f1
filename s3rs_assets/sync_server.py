"""`s3rs server`: one long-lived process that has imported Dagster, dagster-aws,
dagster-pyspark and the Spark Connect client, and forks a worker per `s3rs sync`.

A fresh `s3rs sync` with a run spends ~2 s importing before s3rs does anything (issue 19:
`benchmarks/increment_floor.py`), more than a 1,000-row increment's whole run. With a
server running, `s3rs sync` is a thin client (standard library only): it hands the server
its arguments, environment, working directory and its own stdin, stdout and stderr
(SCM_RIGHTS), and the server forks a worker that runs the unchanged command line
(`s3rs_assets.cli.main`) as if it were that process. Each sync still gets a process of its
own: fresh state, its own Dagster instance, its own connections; only the imported modules
are shared, read-only, by fork. What the worker prints goes straight to the client's
terminal or pipe, its exit code is the client's, and Ctrl-C or SIGTERM to the client is
passed to the worker's process group (as a terminal would).

Never a different program behind the user's back: the client sends a fingerprint of the
code it would run (this package's files, the interpreter, installed packages); a server
started on other code refuses, and the client runs the sync itself after saying so. When it
is the server's own code that changed since it started (an upgrade, `git pull`), it also
restarts itself on the new code (same pid, `exec`); its running workers go on. The
socket is the owner's only (directory 0700, peer uid checked). `S3RS_SERVER=off` makes
every sync run in its own process.

State (default `.local/s3rs-server`, `S3RS_SERVER_STATE_DIR`): `server.sock`, `server.pid`,
`server.log`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

from s3rs_assets.errors import ConfigError

STATE_DIR_ENV = "S3RS_SERVER_STATE_DIR"
SWITCH_ENV = "S3RS_SERVER"
#: what the server imports before its first fork: everything a sync with a run imports
PRELOAD = (
    "s3rs_assets.cli.sync",
    "s3rs_assets.runner",
    "s3rs_assets.table_job",
    "s3rs_assets.catchup",
    "s3rs_assets.progress",
    "dagster",
    "dagster_aws.s3",
    "dagster_pyspark",
    "pyspark.sql.connect.session",
)
#: also imported when they exist: what a served 1,000-row increment still imported after
#: PRELOAD (124 modules: psycopg, Dagster's instance and SQLite storage, pyarrow's dataset
#: layer, ...). Names of Dagster's private modules may change with a release: a missing
#: one costs its import in the worker, never a failure.
WARM = (
    "psycopg",
    "dagster._core.instance.factory",
    "dagster._core.instance.runs.run_domain",
    "dagster._core.storage.sqlite_storage",
    "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage",
    "dagster._core.executor.in_process",
    "dagster._core.execution.plan.active",
    "dagster._core.workspace.autodiscovery",
    "dagster._utils.test.definitions",
    "dagster._core.definitions.repository_definition.repository_data_builder",
    "dagster._core.secrets.env_file",
    "dagster._core.storage.root",
    "dagster._core.storage.migration.utils",
    "dagster._core.system_config.composite_descent",
    "grpc._channel",
    "dotenv",
    "pyarrow.dataset",
    "pyarrow.pandas_compat",
    "encodings.idna",
    "upath.implementations.local",
)
#: signals the client passes on to the worker's process group
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_MAX_MESSAGE = 16 * 1024 * 1024
#: seconds a client waits for its worker's first answer (its pid)
ANSWER_TIMEOUT = 60.0
#: set in a forked worker: its command line must run here, not be forwarded again
IN_WORKER = False
#: the workers a server had when it restarted on new code, handed to its new image
ADOPT_ENV = "S3RS_SERVER_ADOPT"


def default_state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV) or Path(".local") / "s3rs-server")


def socket_path(state_dir: Path) -> Path:
    return state_dir / "server.sock"


def _address(path: Path) -> str:
    """A path AF_UNIX accepts (at most 107 bytes): absolute, else relative to here."""
    for candidate in (str(path.absolute()), os.path.relpath(path)):
        if len(candidate.encode()) < 104:
            return candidate
    raise ConfigError(
        f"the server's socket path {path} is too long for a Unix socket (107 bytes): "
        f"choose a shorter --state-dir or {STATE_DIR_ENV}"
    )


def fingerprint() -> str:
    """What a forked worker would run: this package's files (path, size, mtime), the
    interpreter, and the installed packages (site-packages' own mtime changes when a
    package is installed, upgraded or removed). ~2 ms: it stats files, reads none."""
    import site

    h = hashlib.sha256(f"{sys.executable}\0{sys.version}\0".encode())
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        st = path.stat()
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for directory in site.getsitepackages():
        try:
            h.update(f"{directory}\0{os.stat(directory).st_mtime_ns}\0".encode())
        except OSError:
            continue
    return h.hexdigest()[:20]


# --- framing: a 4-byte length, then JSON; the request carries the client's fds --------------


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(sock, [payload], fds)
    else:
        sock.sendall(payload)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(n - got)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _recv(sock: socket.socket, with_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    fds: list[int] = []
    if with_fds:
        head, fds, _, _ = socket.recv_fds(sock, 4, with_fds)
        if not head:
            raise EOFError
        head += _recv_exact(sock, 4 - len(head))
    else:
        head = _recv_exact(sock, 4)
    (length,) = struct.unpack("!I", head)
    if length > _MAX_MESSAGE:
        raise ValueError(f"message of {length} bytes")
    return json.loads(_recv_exact(sock, length)), fds


# --- the client -----------------------------------------------------------------------------


def forward(argv: list[str]) -> int | None:
    """Run `s3rs <argv>` in the server's worker and return its exit code; None when no
    server (or a stale one) answers, so the caller runs the command itself."""
    if IN_WORKER or os.environ.get(SWITCH_ENV, "").lower() in ("off", "0", "no", "false"):
        return None
    if not _real_stdio():
        return None  # output captured in this process (a test runner, a caller's buffer)
    path = socket_path(default_state_dir())
    if not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(_address(path))
        request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
                   "umask": _umask(), "nice": os.nice(0), "fingerprint": fingerprint()}
        _send(sock, request, [0, 1, 2])
    except (OSError, EOFError, ValueError, ConfigError):
        sock.close()
        return None  # no server listening (a stale socket file): run here
    try:
        sock.settimeout(ANSWER_TIMEOUT)  # a worker answers first thing after the fork
        reply, _ = _recv(sock)
        sock.settimeout(None)
    except (OSError, EOFError, ValueError):
        sock.close()
        print(f"s3rs: the s3rs server ({path}) did not answer within {ANSWER_TIMEOUT:.0f} s: "
              f"nothing was run; restart it, or run with {SWITCH_ENV}=off", file=sys.stderr)
        return 2
    if "refused" in reply:
        sock.close()
        print(f"s3rs: {reply['refused']}: this sync runs in its own process", file=sys.stderr)
        return None
    if "exit" in reply:  # the worker failed before it ran anything (it said why on stderr)
        sock.close()
        return int(reply["exit"])
    return _wait(sock, int(reply["pid"]))


def _real_stdio() -> bool:
    """sys.stdout and sys.stderr write to fds 1 and 2: what the worker will get."""
    try:
        return sys.stdout.fileno() == 1 and sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask


def _wait(sock: socket.socket, pid: int) -> int:
    """Wait for the worker's exit code, passing our signals to its process group."""

    def pass_on(signum: int, frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signum)

    for signum in FORWARDED:
        signal.signal(signum, pass_on)
    try:
        reply, _ = _recv(sock)
        return int(reply["exit"])
    except (OSError, EOFError, ValueError, KeyError):
        print(f"s3rs: the server's worker (pid {pid}) ended without an exit code",
              file=sys.stderr)
        return 1
    finally:
        sock.close()


# --- the server -----------------------------------------------------------------------------


def preload() -> None:
    """Import what every sync with a run imports, so a worker starts with it. The server
    must stay single-threaded to fork safely: an import that started a thread is refused."""
    import importlib
    import threading

    for module in PRELOAD:
        importlib.import_module(module)
    for module in WARM:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    if threading.active_count() != 1:
        names = ", ".join(t.name for t in threading.enumerate())
        raise ConfigError(f"the s3rs server cannot fork safely: importing started threads "
                          f"({names})")


def running(state_dir: Path | None = None) -> dict[str, Any] | None:
    """The server's answer to a ping (pid, fingerprint, workers, started), or None."""
    path = socket_path(state_dir or default_state_dir())
    if not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5.0)
    try:
        sock.connect(_address(path))
        _send(sock, {"ping": True})
        return _recv(sock)[0]
    except (OSError, EOFError, ValueError):
        return None
    finally:
        sock.close()


class Server:
    """The accept loop: one request at a time is read (with a timeout), then a worker is
    forked for it; the server never waits for a worker. Single-threaded, so forking is
    safe; it reaps finished workers between requests."""

    def __init__(self, state_dir: Path, command: Any) -> None:
        """`command`: the `s3rs` click group a worker runs (`s3rs_assets.cli.main`, handed
        in by `s3rs server serve`)."""
        self.state_dir = state_dir
        self.command = command
        self.path = socket_path(state_dir)
        self.fingerprint = fingerprint()
        adopted = os.environ.pop(ADOPT_ENV, "")
        self.workers: set[int] = {int(p) for p in adopted.split(",") if p.isdigit()}
        self.started = time.time()
        self.sock: socket.socket | None = None
        self.restart = False  # its own code changed: exec the new code after this request

    def bind(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        found = running(self.state_dir)
        if found is not None:
            raise ConfigError(f"an s3rs server is already running (pid {found['pid']}, "
                              f"{self.path})")
        address = _address(self.path)
        self.path.unlink(missing_ok=True)  # a dead server's
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(address)
        os.chmod(self.path, 0o600)
        sock.listen(64)
        sock.settimeout(1.0)
        self.sock = sock
        (self.state_dir / "server.pid").write_text(f"{os.getpid()}\n")

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        for name in ("server.sock", "server.pid"):
            (self.state_dir / name).unlink(missing_ok=True)

    def serve_forever(self) -> None:
        assert self.sock is not None
        import gc

        gc.freeze()  # workers then leave the imported heap's pages shared
        while True:
            self._reap()
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            try:
                self._handle(conn)
            except (OSError, EOFError, ValueError) as e:
                print(f"request dropped: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            finally:
                conn.close()
            if self.restart:
                self._reexec()

    def _reap(self) -> None:
        """Every finished child: the workers this image forked and those it adopted."""
        while True:
            try:
                done, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                done = 0
            if not done:
                break
            self.workers.discard(done)

    def _reexec(self) -> None:
        """Become a server on the code now on disk: same pid (a supervisor or `s3rs server
        stop` still finds it), same state directory. Until the new image answers (its
        imports, ~2 s) syncs find no socket and run in their own process. Running workers
        stay this process's children: the new image reaps them (ADOPT_ENV)."""
        self._reap()
        print(f"code changed since this server started: restarting on it (pid {os.getpid()}, "
              f"{len(self.workers)} sync(s) running go on)", flush=True)
        self.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os.environ[ADOPT_ENV] = ",".join(str(p) for p in sorted(self.workers))
        os.execv(sys.executable, [sys.executable, "-m", "s3rs_assets.cli", "server", "serve",
                                  "--state-dir", str(self.state_dir.absolute())])

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(10.0)
        uid = struct.unpack("3i", conn.getsockopt(
            socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
        request, fds = _recv(conn, with_fds=3)
        try:
            if uid != os.getuid():
                _send(conn, {"refused": f"the s3rs server runs as uid {os.getuid()}, not {uid}"})
            elif request.get("ping"):
                _send(conn, {"pid": os.getpid(), "fingerprint": self.fingerprint,
                             "workers": len(self.workers), "started": self.started})
            elif request.get("fingerprint") != self.fingerprint:
                self.restart = fingerprint() != self.fingerprint  # its own code changed
                why = ("restarts on the code now installed (it changed since the server "
                       "started)" if self.restart else "was started on other code, another "
                       "Python or other installed packages than this client's; restart it "
                       "(`s3rs server stop && s3rs server start`) from this environment")
                _send(conn, {"refused": f"the s3rs server (pid {os.getpid()}) {why}"})
            elif len(fds) != 3:
                _send(conn, {"refused": "the request carried no stdin, stdout and stderr"})
            else:
                pid = os.fork()
                if pid == 0:
                    _worker(conn, self.sock, request, fds, self.command)  # never returns
                self.workers.add(pid)
                print(f"worker {pid}: s3rs {' '.join(request['argv'])}", flush=True)
        finally:
            for fd in fds:
                os.close(fd)


def _worker(conn: socket.socket, listener: socket.socket | None, request: dict[str, Any],
            fds: list[int], command: Any) -> None:
    """In the forked child: become the client's `s3rs` process, run its command line, send
    the exit code, exit. Never returns into the server's loop."""
    code = 1
    try:
        global IN_WORKER
        IN_WORKER = True
        if listener is not None:
            listener.close()
        os.setpgid(0, 0)  # the client signals this group, as a terminal would
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _become(request, fds)
        conn.settimeout(None)
        _send(conn, {"pid": os.getpid()})
        _watch_client(conn)
        code = _run(command, request["argv"])
    except BaseException as e:  # noqa: BLE001 - the worker must end here, with a code
        with contextlib.suppress(BaseException):  # stderr itself may be gone
            print(f"s3rs: the server's worker failed: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
    finally:
        _finish(conn, code)


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """The client's stdin/stdout/stderr, directory, umask and environment."""
    import io

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    fds.clear()
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(open(0, "rb", closefd=False))  # noqa: SIM115
    for fd, name, errors in ((1, "stdout", "strict"), (2, "stderr", "backslashreplace")):
        stream = io.TextIOWrapper(open(fd, "wb", closefd=False), errors=errors,  # noqa: SIM115
                                  line_buffering=fd == 2 or os.isatty(fd))
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    os.chdir(request["cwd"])
    os.umask(int(request["umask"]))
    wanted = int(request.get("nice", 0)) - os.nice(0)
    if wanted > 0:  # `nice s3rs sync` stays nice (a worker can only lower its priority)
        os.nice(wanted)
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()  # the client's TZ, for local times as in its own process
    from s3rs_assets import runner

    runner.environment_defaults()  # what its import set in the server's environment


def _watch_client(conn: socket.socket) -> None:
    """A client that goes away without a signal (killed) interrupts the worker, as a
    closed terminal would."""
    import threading

    def watch() -> None:
        try:
            while conn.recv(1):
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=watch, name="s3rs-client-watch", daemon=True).start()


def _run(command: Any, argv: list[str]) -> int:
    sys.argv = ["s3rs", *argv]
    try:
        command.main(args=argv, prog_name="s3rs")
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    return 0


def _finish(conn: socket.socket, code: int) -> None:
    """What the interpreter does at exit (join threads, atexit, flush), then the code to
    the client, then `_exit`: the server's own frames below must never run here."""
    import atexit
    import threading

    try:
        # the interpreter's own shutdown: executors' exit hooks, then non-daemon threads
        shutdown = getattr(threading, "_shutdown", None)
        if shutdown is not None:
            shutdown()
        else:
            for thread in threading.enumerate():
                if thread is not threading.current_thread() and not thread.daemon:
                    thread.join()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    except BaseException:  # noqa: BLE001, S110 - exiting regardless
        pass
    with contextlib.suppress(BaseException):  # the client may be gone
        _send(conn, {"exit": code})
    os._exit(code)
