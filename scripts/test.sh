#!/usr/bin/env bash
# Builds rbee (warnings are errors) and runs every test: unit tests, the op conformance suite on every
# backend present (GPU cases report SKIPPED on machines without that GPU), goldens, API and tool tests.
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -R Softmax
# RBEE_PRESET (default ci), RBEE_JOBS (default: every CPU). scripts/build_rocm.sh compiles the ROCm plug-in.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${RBEE_PRESET:-ci}
jobs=${RBEE_JOBS:-$(nproc)}
cmake --preset "$preset" >/dev/null
cmake --build "build/$preset" -j "$jobs"
(cd "build/$preset" && ctest -j "$jobs" --output-on-failure --timeout 900 "$@")

