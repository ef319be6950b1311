#!/usr/bin/env bash
# Builds rbee (warnings are errors) and runs every test: unit tests, the op conformance suite on every
# backend present (GPU cases report SKIPPED on machines without that GPU), goldens and tool tests.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -R Softmax
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${RBEE_PRESET:-ci}
jobs=${RBEE_JOBS:-$(nproc)}
cmake --preset "$preset" >/dev/null
cmake --build "build/$preset" -j "$jobs"
cd "build/$preset"
ctest -j "$jobs" --output-on-failure --timeout 900 "$@"
