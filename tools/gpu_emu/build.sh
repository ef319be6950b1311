#!/bin/sh
# Builds the GPU kernel source as an emulated "cuda" backend plug-in that runs on the CPU (tools/gpu_emu/README.md).
#
#   tools/gpu_emu/build.sh BUILD_DIR [WARP_SIZE]
#
# BUILD_DIR is a configured CPU build of this tree (e.g. build/cpu) whose librbee_engine.so the plug-in links;
# the plug-in goes to BUILD_DIR/gpu_emu/librbee_backend_cuda.so. Then run the conformance suite's cuda cases:
#
#   RBEE_BACKEND_PATH=BUILD_DIR/gpu_emu BUILD_DIR/tests/rbee_conformance --gtest_filter='*cuda*'
#
# WARP_SIZE (32 or 64, default 32) is the emulated RBEE_DEVICE_WARP_SIZE. CXX picks the compiler (e.g. "ccache g++"),
# RBEE_EMU_OPT its optimization flags (default "-O1 -g"; "-O1" alone compiles faster on a busy machine).
set -eu
build=$(cd "$1" && pwd)
warp=${2:-32}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out="$build/gpu_emu"
mkdir -p "$out/obj"
python3 "$here/rewrite.py" "$root/src/backends/gpu" "$out/src/backends/gpu"
# Host-device code shared with the CPU backend (plain C++ already, no rewriting).
mkdir -p "$out/src/backends" && rm -rf "$out/src/backends/common" && cp -a "$root/src/backends/common" "$out/src/backends/common"  # -a: mtimes kept, objects stay current

cxx=${CXX:-g++}
flags="-std=c++20 ${RBEE_EMU_OPT:--O1 -g} -fPIC -Wall -Wno-unused-parameter -Wno-unused-variable -Wno-unused-but-set-variable -Wno-unknown-pragmas -Wno-sign-compare
  -DRBEE_DEVICE_WARP_SIZE=$warp -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB -DFMT_SHARED
  -I$here -I$here/include -I$out/src -I$root/include"
objs=""
for src in "$out"/src/backends/gpu/*.cu "$out"/src/backends/gpu/kernels/*.cu "$here/emu_runtime.cpp" "$here/emu_blas.cpp" "$here/emu_dnn.cpp"; do
  obj="$out/obj/$(basename "$src").w$warp.o"
  lang=c++
  case "$src" in *.cu) pre="-include $here/prelude.h" ;; *) pre="" ;; esac
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ "$here/prelude.h" -nt "$obj" ] || \
     [ -n "$(find "$here/include" -name '*.h' -newer "$obj" | head -1)" ] || [ "$here/emu_runtime.h" -nt "$obj" ] || \
     [ -n "$(find "$out/src" -name '*.h' -newer "$obj" -o -name '*.cuh' -newer "$obj" | head -1)" ]; then
    echo "emu: $(basename "$src")"
    # shellcheck disable=SC2086
    $cxx $flags $pre -x $lang -c "$src" -o "$obj"
  fi
  objs="$objs $obj"
done
# shellcheck disable=SC2086
$cxx -shared -o "$out/librbee_backend_cuda.so" $objs -L"$build" -Wl,-rpath,"$build" -lrbee_engine -lfmt -lspdlog
echo "emu: $out/librbee_backend_cuda.so (warp $warp)"
