#!/usr/bin/env bash
# Packs a build's programs, plug-ins and the shared libraries they need (all but glibc and the GPU driver) into
# one folder, so a GPU machine without our Debian build dependencies can run scripts/gpu_check.sh on it:
#   scripts/pack_build.sh build/cuda-sm90 .devpack        (here)
# The CUDA runtime and cuBLAS are not packed: the GPU machine has its own CUDA toolkit of the same major version.
#   LD_LIBRARY_PATH=.devpack:.devpack/lib RBEE_BACKEND_PATH=.devpack RBEE_BUILD_DIR=.devpack scripts/gpu_check.sh conformance compare bench  (there)
set -euo pipefail
build=${1:?usage: pack_build.sh BUILD_DIR OUT_DIR}
out=${2:?usage: pack_build.sh BUILD_DIR OUT_DIR}
rm -rf "$out"
mkdir -p "$out/lib" "$out/tests" "$out/bench"
copy() { [ -e "$1" ] && cp -L "$1" "$2" && strip --strip-unneeded "$2/$(basename "$1")" 2>/dev/null; true; }
for f in rbee rbee_bench_gpu_llm rbee_sd_bench llm-worker-rbee; do copy "$build/$f" "$out"; done
for f in "$build"/librbee_*.so; do copy "$f" "$out"; done
for f in "$build"/tests/rbee_conformance "$build"/tests/rbee_unit_tests; do copy "$f" "$out/tests"; done
for f in "$build"/bench/rbee_bench_*; do [ -x "$f" ] && copy "$f" "$out/bench"; done
# Shared libraries from the system that the packed programs need, except glibc's own and the GPU runtime's.
find "$out" -type f -perm -u+x | while read -r bin; do
  ldd "$bin" 2>/dev/null | awk '/=> \//{print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libcuda|libcudart|libcublas|libcublasLt|libnvidia[^/]*|libstdc\+\+|libgcc_s)\.so' \
  | grep -v "$(cd "$build" && pwd)" | while read -r lib; do cp -L "$lib" "$out/lib/"; done
du -sh "$out"
