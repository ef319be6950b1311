#!/usr/bin/env bash
# Compiles the CUDA backend plug-in alone (librbee_backend_cuda.so), against the engine of a CPU build that
# already exists (RBEE_ENGINE_BUILD, default build/ci: what scripts/test.sh builds), and puts it next to that
# build's programs. CPU build + this = a whole CUDA build, without compiling the engine a second time:
#   scripts/test.sh (or cmake --build build/ci) && scripts/build_cuda_plugin.sh
#   scripts/pack_build.sh build/ci .devpack        # then carry .devpack to a GPU machine (scripts/gpu_check.sh)
# RBEE_CUDA_ARCHS (default 90: the H100/H200 of our GPU sessions; the `cuda` preset builds 80;86;89;90).
# No GPU is needed to compile.
set -euo pipefail
cd "$(dirname "$0")/.."
engine_build=${RBEE_ENGINE_BUILD:-build/ci}
archs=${RBEE_CUDA_ARCHS:-90}
jobs=${RBEE_JOBS:-$(nproc)}
[ -f "$engine_build/librbee_engine.so" ] || { echo "build_cuda_plugin.sh: no $engine_build/librbee_engine.so (build it first)" >&2; exit 1; }
out=build/cuda-plugin
cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRBEE_CUDA=ON -DRBEE_CUDA_ARCHS="$archs" \
  -DRBEE_BUILD_TESTS=OFF -DRBEE_BUILD_BENCH=OFF -DRBEE_PREBUILT_ENGINE="$PWD/$engine_build/librbee_engine.so" >/dev/null
cmake --build "$out" -j "$jobs" --target rbee_backend_cuda
cp "$out/librbee_backend_cuda.so" "$engine_build/"
echo "build_cuda_plugin.sh: CUDA plug-in for sm_${archs//;/, sm_} in $engine_build/librbee_backend_cuda.so"
