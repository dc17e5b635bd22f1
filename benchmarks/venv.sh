#!/usr/bin/env bash
# Create or update .venv-bench, the benchmark's own environment:
#   the project, editable from this checkout, with its `dev` and `bench` extras
#   (moto's server; dlt[postgres] with connectorx, reladiff, sling-linux-amd64: pinned in
#   pyproject.toml).
# The shared .venv never gets dlt or reladiff. Idempotent: a second run costs a second
# unless pyproject.toml changed. Usage: bash benchmarks/venv.sh   (PYTHON=python3.11 to pick)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${S3RS_BENCH_VENV:-$REPO/.venv-bench}"
PY="${PYTHON:-python3}"
STAMP="$VENV/.s3rs-bench-stamp"

if [ ! -x "$VENV/bin/python" ]; then
  echo "bench venv: creating $VENV"
  "$PY" -m venv "$VENV"  # a plain venv: nothing shared with the system's or .venv's packages
fi
want="$(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1) $REPO"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ]; then
  exit 0
fi
echo "bench venv: installing s3rs[dev,bench] from $REPO"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e "$REPO[dev,bench]"
echo "$want" >"$STAMP"
