#!/usr/bin/env bash
# `make ui`: the Dagster UI (webserver, daemon, one code server) on the local stack.
#   scripts/ui.sh            http://127.0.0.1:3000   (S3RS_UI_HOST / S3RS_UI_PORT to change)
# Runs `dagster dev -w workspace.yaml` (code location s3rs) in its own process group from
# $DAGSTER_HOME. Ctrl-C, SIGTERM or SIGHUP stops that whole group: dagster dev is asked to
# shut down (SIGINT: it stops the webserver, the daemon and the code server), anything
# still there after $S3RS_UI_GRACE seconds gets SIGTERM, then SIGKILL. The moto server is
# left running (`make stop` stops it, with its buckets), and so is the Spark Connect server.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
# One Spark for every run the UI launches: a Spark Connect server (`s3rs spark start`, a
# no-op when one runs; it outlives the UI, `make stop` ends it), unless S3RS_SPARK_MASTER
# is set. env.sh then points S3RS_SPARK_MASTER at it.
# A master that scripts/env.sh defaulted (`source scripts/env.sh` in this shell) is not a
# choice: the server is started all the same, and env.sh then points runs at it.
if [ -z "${S3RS_SPARK_MASTER:-}" ] || [ "${S3RS_SPARK_MASTER_FROM:-}" = env.sh ]; then
  unset S3RS_SPARK_MASTER S3RS_SPARK_MASTER_FROM
  S3RS_SPARK_STATE_DIR="${S3RS_SPARK_STATE_DIR:-${S3RS_STATE_DIR:-$REPO/.local}/spark-connect}" \
    "$REPO/.venv/bin/python" -m s3rs_assets.cli spark start
fi
# shellcheck source=scripts/env.sh
source scripts/env.sh
bash scripts/moto.sh start
echo "Spark: $S3RS_SPARK_MASTER"

HOST="${S3RS_UI_HOST:-127.0.0.1}"
PORT="${S3RS_UI_PORT:-3000}"
GRACE="${S3RS_UI_GRACE:-20}"

# Known warnings that say nothing to a user of this project: `dagster dev` is superseded
# by `dg dev` (dagster-dg-cli, a separate package and project layout the card does not
# use), and the per-table assets use `backfill_policy` (beta: single-run backfills).
# Literal message prefixes, so no process has to import dagster to read the filter.
export PYTHONWARNINGS="${PYTHONWARNINGS:+$PYTHONWARNINGS,}ignore:Function \`dev_command\` is superseded:Warning,ignore:Parameter \`backfill_policy\` of function \`asset\` is currently in beta:Warning"

echo "Dagster UI: http://$HOST:$PORT (DAGSTER_HOME=$DAGSTER_HOME; Ctrl-C stops it)"

# Job control: the background job gets its own process group (pgid = its pid), so Ctrl-C
# in the terminal reaches this script and not dagster dev's services directly. dagster dev
# stops cleanly on SIGINT (and turns SIGTERM into one), which it cannot do when SIGINT is
# ignored, as it is for a background job of a non-interactive shell and everything that
# job starts: the exec below restores SIGINT's default before dagster dev starts.
set -m
# From DAGSTER_HOME: its dagster.yaml is the instance's, so dagster dev does not warn about
# the repository's own copy; workspace.yaml resolves paths from where it lives.
(cd "$DAGSTER_HOME" && exec "$REPO/.venv/bin/python" -c \
  'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
  "$REPO/.venv/bin/dagster" dev -w "$REPO/workspace.yaml" -h "$HOST" -p "$PORT") &
DEV=$!
set +m

group_left() {  # the live (non-zombie) processes in dagster dev's group: "pid command"
  ps -eo pgid=,pid=,stat=,args= | awk -v g="$DEV" '$1 == g && $3 !~ /^Z/ { $1 = ""; $3 = ""; print }'
}
group_alive() { [ -n "$(group_left)" ]; }
stop() {
  trap '' INT TERM HUP
  kill -INT "$DEV" 2>/dev/null || true
  local deadline=$((SECONDS + GRACE))
  while group_alive && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
  if group_alive; then
    echo "ui: still running after ${GRACE}s, sending SIGTERM:" >&2
    group_left >&2
    kill -TERM -- "-$DEV" 2>/dev/null || true
    deadline=$((SECONDS + 10))
    while group_alive && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
  fi
  if group_alive; then
    echo "ui: SIGKILL to process group $DEV" >&2
    kill -KILL -- "-$DEV" 2>/dev/null || true
  fi
  wait "$DEV" 2>/dev/null || true
  echo "Dagster UI stopped"
  exit 0
}
trap stop INT TERM HUP

rc=0
wait "$DEV" || rc=$?
# dagster dev ended by itself (or a signal arrived: `stop` exits before this line)
if group_alive; then
  kill -TERM -- "-$DEV" 2>/dev/null || true
fi
exit "$rc"
