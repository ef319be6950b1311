#!/usr/bin/env bash
# Builds rbee (warnings are errors) and runs every test: unit tests, the op conformance suite on every
# backend present (GPU cases report SKIPPED on machines without that GPU), goldens, API and tool tests.
# Where Debian's hipcc is installed it then compiles the ROCm plug-in for gfx908, gfx90a and gfx1030 (compiled,
# not run: no AMD GPU is needed for that step).
#   scripts/test.sh [ctest args...]     e.g. scripts/test.sh -R Softmax
# RBEE_PRESET (default ci), RBEE_JOBS (default: every CPU), RBEE_TEST_ROCM=off skips the ROCm compile.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${RBEE_PRESET:-ci}
jobs=${RBEE_JOBS:-$(nproc)}
cmake --preset "$preset" >/dev/null
cmake --build "build/$preset" -j "$jobs"
(cd "build/$preset" && ctest -j "$jobs" --output-on-failure --timeout 900 "$@")

if [ "${RBEE_TEST_ROCM:-auto}" != off ] && command -v hipcc >/dev/null 2>&1; then
  echo "test.sh: compiling the ROCm backend with $(hipcc --version 2>/dev/null | grep -m1 -i 'HIP version' || echo hipcc)"
  cmake --preset rocm >/dev/null
  cmake --build build/rocm -j "$jobs" --target rbee_backend_rocm
  targets=$(grep -E '^RBEE_HIP_TARGETS' build/rocm/CMakeCache.txt | cut -d= -f2)
  echo "test.sh: ROCm backend compiled for ${targets}: $(ls build/rocm/librbee_backend_rocm.so)"
fi
