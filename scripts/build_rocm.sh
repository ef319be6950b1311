#!/usr/bin/env bash
# Compiles the ROCm backend plug-in (librbee_backend_rocm.so) with hipcc for the targets in RBEE_HIP_TARGETS
# (default gfx908;gfx90a;gfx1030, what Debian 12's hipcc 5.2 supports). Compiled, not run: no AMD GPU is needed.
# CI runs it after the tests; with ROCm 6.x pass e.g. RBEE_HIP_TARGETS="gfx942;gfx1100".
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v hipcc >/dev/null 2>&1; then
  echo "build_rocm.sh: hipcc not found (scripts/setup.sh installs Debian's); nothing compiled" >&2
  exit 1
fi
jobs=${RBEE_JOBS:-$(nproc)}
echo "build_rocm.sh: $(hipcc --version 2>/dev/null | grep -m1 -i 'HIP version' || echo hipcc)"
if [ -n "${RBEE_HIP_TARGETS:-}" ]; then
  cmake --preset rocm -DRBEE_HIP_TARGETS="$RBEE_HIP_TARGETS" >/dev/null
else
  cmake --preset rocm >/dev/null
fi
cmake --build build/rocm -j "$jobs" --target rbee_backend_rocm
targets=$(grep -E '^RBEE_HIP_TARGETS' build/rocm/CMakeCache.txt | cut -d= -f2)
echo "build_rocm.sh: ROCm backend compiled for ${targets}: $(ls build/rocm/librbee_backend_rocm.so)"
