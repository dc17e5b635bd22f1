#!/usr/bin/env bash
# start|stop|status a local moto S3 server for the demo and the UI.
#   port  ${S3RS_MOTO_PORT:-5555} on 127.0.0.1
#   files moto.pid and moto.log in ${S3RS_STATE_DIR:-.local} (the repository's .local/):
#   a test suite with a state dir of its own never sees (or stops) the demo's server
# start reuses a live server and returns once the port answers. moto keeps its data in
# memory: stopping it discards every bucket.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${S3RS_MOTO_PORT:-5555}"
HOST=127.0.0.1
LOCAL="${S3RS_STATE_DIR:-$REPO/.local}"
PIDFILE="$LOCAL/moto.pid"
LOG="$LOCAL/moto.log"
PY="$REPO/.venv/bin/python"

port_open() { (exec 3<>"/dev/tcp/$HOST/$PORT") 2>/dev/null; }
our_pid() {  # prints the pid from the pid file if that process is alive and is moto
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  grep -q moto "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}
pid_port() {  # the port a moto process of ours was started with
  tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | sed -n 's/.* -p \([0-9]*\).*/\1/p'
}
is_moto() {  # does whatever listens on the port answer like moto?
  # /moto-api/config is small whatever the server holds (data.json dumps every object, which
  # on a busy test server outlasts any timeout)
  "$PY" - "http://$HOST:$PORT/moto-api/config" <<'EOF' 2>/dev/null
import json, sys, urllib.request
json.loads(urllib.request.urlopen(sys.argv[1], timeout=10).read())
EOF
}

start() {
  local pid
  if pid="$(our_pid)"; then
    local running_port
    running_port="$(pid_port "$pid")"
    if [ -n "$running_port" ] && [ "$running_port" != "$PORT" ]; then
      echo "moto: error: moto (pid $pid) already runs on port $running_port, not $PORT;" \
        "run '$0 stop' first or use S3RS_MOTO_PORT=$running_port" >&2
      return 1
    fi
    if port_open; then
      echo "ok: moto already running (pid $pid) on http://$HOST:$PORT"
      return 0
    fi
  elif port_open; then
    if is_moto; then
      echo "ok: a moto server not started by this script already answers on http://$HOST:$PORT"
      return 0
    fi
    echo "moto: error: port $PORT is taken by another program; set S3RS_MOTO_PORT" >&2
    return 1
  fi
  [ -x "$PY" ] || { echo "moto: error: .venv missing; run scripts/setup.sh first" >&2; return 1; }
  mkdir -p "$LOCAL"
  if [ -z "${pid:-}" ]; then
    echo "starting: moto S3 server on http://$HOST:$PORT (log: $LOG)"
    # Restore default signal handlers (a non-interactive shell starts background jobs
    # with SIGINT/SIGQUIT ignored, and ignored signals survive exec) and leave the
    # terminal's session, then exec moto: `stop` can then end it by pid.
    "$PY" -c '
import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP):
    signal.signal(s, signal.SIG_DFL)
os.setsid()
os.execv(sys.executable, [sys.executable, "-m", "moto.server", "-H", sys.argv[1], "-p", sys.argv[2]])
' "$HOST" "$PORT" </dev/null >>"$LOG" 2>&1 &
    pid=$!
    echo "$pid" >"$PIDFILE"
  fi
  local deadline=$((SECONDS + 30))
  until port_open; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      echo "moto: error: the server exited; last lines of $LOG:" >&2
      tail -n 5 "$LOG" >&2
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "moto: error: no answer on port $PORT after 30 s (pid $pid)" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "ok: moto running (pid $pid) on http://$HOST:$PORT"
}

stop() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    echo "ok: moto not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "moto: pid $pid ignored SIGTERM for 10 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  echo "ok: moto stopped (pid $pid)"
}

status() {
  local pid
  if pid="$(our_pid)" && port_open; then
    echo "running: moto (pid $pid) on http://$HOST:$PORT"
  elif [ -n "${pid:-}" ]; then
    echo "starting or unresponsive: moto (pid $pid), port $PORT not answering"
    return 1
  elif port_open; then
    echo "not ours: port $PORT answers but was not started by this script"
    return 1
  else
    echo "stopped: moto"
    return 3
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  restart) stop; start ;;
  *) echo "usage: $0 start|stop|status|restart" >&2; exit 2 ;;
esac
