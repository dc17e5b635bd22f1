#!/usr/bin/env bash
# The test command (`make test`, CI): set up what the tests need, then run pytest.
#   scripts/test.sh [pytest args...]      default: -q --durations=25 on two workers
#   (every failure is reported, and the 25 slowest tests: CI's time limit is watched from
#   its own output). The workers (pytest-xdist) take whole files, the slowest first
#   (conftest.SLOWEST_FILES); S3RS_TEST_WORKERS=1 runs them in one process. With your own
#   args nothing is added: `make test ARGS="-k cursor"` runs in one process.
# The tests start their own moto server in-process and make their own throwaway
# databases; they need MariaDB and PostgreSQL, which setup.sh ensures.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
bash scripts/setup.sh --tests  # the browser test needs Chromium too
export PYSPARK_PYTHON="$REPO/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$REPO/.venv/bin/python"
if [ "$#" -eq 0 ]; then
  set -- -q --durations=25
  workers="${S3RS_TEST_WORKERS:-2}"
  if [ "$workers" != 1 ]; then
    set -- "$@" -n "$workers" --dist loadfile --no-loadscope-reorder
  fi
fi
exec "$REPO/.venv/bin/pytest" "$@"
