#!/usr/bin/env bash
# The test command (`make test`, CI): set up what the tests need, then run pytest.
#   scripts/test.sh [pytest args...]      default: -q --durations=25 (every failure is
#   reported, and the 25 slowest tests: CI's time limit is watched from its own output)
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
fi
exec "$REPO/.venv/bin/pytest" "$@"
