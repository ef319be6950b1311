#!/usr/bin/env bash
# ctest entry of the API tests: runs pytest on tests/api/ (or the folder RBEE_API_TEST_DIR names, e.g.
# tests/sd_api/) from the project venv against the built worker.
# Exits 77 (ctest: Skipped) with a message when the venv or its test packages are missing.
#   run_api_tests.sh WORKER_BIN MODEL [pytest args...]    (MODEL: a file or a folder)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
py="$root/.venv/bin/python"
if [ ! -x "$py" ]; then
  echo "SKIPPED: no venv at $root/.venv (run scripts/setup.sh)"
  exit 77
fi
if ! "$py" -c "import pytest, requests, openai" 2>/dev/null; then
  echo "SKIPPED: the venv lacks pytest/requests/openai (pip install -r tools/requirements-test.txt)"
  exit 77
fi
export RBEE_WORKER_BIN="$1" RBEE_MODEL="$2"
shift 2
if [ ! -e "$RBEE_MODEL" ]; then
  echo "SKIPPED: model $RBEE_MODEL is missing (run scripts/setup.sh)"
  exit 77
fi
cd "${RBEE_API_TEST_DIR:-$here}"
exec "$py" -m pytest -q -p no:cacheprovider "$@" .
