#!/usr/bin/env bash
# Compiles the ROCm backend plug-in (librbee_backend_rocm.so) with hipcc for the targets in RBEE_HIP_TARGETS
# (default gfx908;gfx90a;gfx1030, what Debian 12's hipcc 5.2 supports). Compiled, not run: no AMD GPU is needed.
# CI runs it after the tests, against the engine they built; with ROCm 6.x pass e.g. RBEE_HIP_TARGETS="gfx942;gfx1100".
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v hipcc >/dev/null 2>&1; then
  echo "build_rocm.sh: hipcc not found (scripts/setup.sh installs Debian's); nothing compiled" >&2
  exit 1
fi
jobs=${RBEE_JOBS:-$(nproc)}
echo "build_rocm.sh: $(hipcc --version 2>/dev/null | grep -m1 -i 'HIP version' || echo hipcc)"
hip_targets=()
if [ -n "${RBEE_HIP_TARGETS:-}" ]; then hip_targets=(-DRBEE_HIP_TARGETS="$RBEE_HIP_TARGETS"); fi
# With an engine already built (RBEE_ENGINE_BUILD, default build/ci, what scripts/test.sh builds), only the
# plug-in is compiled and linked against it (build/rocm-plugin); otherwise the rocm preset builds the engine too.
engine_build=${RBEE_ENGINE_BUILD:-build/ci}
if [ -f "$engine_build/librbee_engine.so" ]; then
  out=build/rocm-plugin
  echo "build_rocm.sh: plug-in only, against $engine_build/librbee_engine.so"
  cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_HIP=ON -DRBEE_BUILD_TESTS=OFF \
    -DRBEE_BUILD_BENCH=OFF -DRBEE_PREBUILT_ENGINE="$PWD/$engine_build/librbee_engine.so" "${hip_targets[@]}" >/dev/null
else
  out=build/rocm
  cmake --preset rocm "${hip_targets[@]}" >/dev/null
fi
cmake --build "$out" -j "$jobs" --target rbee_backend_rocm
targets=$(grep -E '^RBEE_HIP_TARGETS' "$out/CMakeCache.txt" | cut -d= -f2)
echo "build_rocm.sh: ROCm backend compiled for ${targets}: $(ls "$out/librbee_backend_rocm.so")"
