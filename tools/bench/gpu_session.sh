#!/usr/bin/env bash
# Issue 10's GPU session in two device calls (the machine's /tmp stays between calls while it is warm):
#
#   here:  tools/bench/gpu_session.sh pack CARRY        CPU build (build/ci) packed + CUDA kit + llama.cpp source,
#                                                       compressed into the folder CARRY (git-ignored, < 40 MiB)
#   there: tools/bench/gpu_session.sh prepare CARRY     unpack to /tmp, compile the CUDA plug-in, then llama.cpp and
#                                                       the random-weight models in the background while the GPU
#                                                       conformance, the GPU-vs-CPU model checks and (optionally)
#                                                       compute-sanitizer run
#          tools/bench/gpu_session.sh compare CARRY     rbee vs llama.cpp, every row of issue 10's table
#
# From a helper's worktree: run ITS copy of this script for `pack` with an absolute CARRY inside the lead's
# checkout (the device machine only sees that one), e.g. MAIN/.devpack-NAME (MAIN: that checkout's root): the pack
# carries the worktree's build/ci, and its src/include/cmake, which `prepare` compiles the CUDA plug-in from.
#
# Knobs: NO_LLAMA=1 (pack/prepare/compare without llama.cpp: a helper's run against the hardware limit only; no
# 4-9 minute llama.cpp build), CONFORMANCE_FILTER (gtest filter of prepare's GPU conformance, default
# '*cuda*:-*rocm*'; 'none' skips it), SKIP_GPU_CHECK=1 (prepare without gpu_check.sh compare), ROWS, REPS;
# SANITIZE_TOOLS / SANITIZE_TIMEOUT / SANITIZE_FILTER (prepare: compute-sanitizer while llama.cpp compiles);
# LLAMA_SAVE=1 (prepare: llama.cpp's bin/ back through $OUT as llama-bin.tar.xz.* pieces) and LLAMA_BIN=DIR (pack:
# carry those pieces instead of the source; prepare then skips the build).
#
# Logs and JSON go to $OUT (the device tool's result folder) or /tmp/rbee-session/out.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:?usage: gpu_session.sh pack|prepare|compare CARRY}
carry=${2:?usage: gpu_session.sh pack|prepare|compare CARRY}
work=/tmp/rbee-session
pack=$work/pack
out=${OUT:-$work/out}
t0=$(date +%s)
stamp() { echo "--- $1 at +$(( $(date +%s) - t0 )) s"; }

case "$phase" in
pack)
  # A staging folder of its own: two worktrees may pack at the same time.
  stage=$(mktemp -d /tmp/rbee-pack-XXXXXX)
  rm -rf "$carry" && mkdir -p "$carry"
  scripts/pack_build.sh build/ci "$stage"/pack >/dev/null
  scripts/pack_cuda_kit.sh build/ci "$stage"/pack
  # A plug-in compiled here from this tree (scripts/build_cuda_plugin.sh; newer than every file of src/ and include/
  # and than the engine it links) travels stripped and xz-compressed (~12 MB of 76): prepare then compiles nothing.
  # Otherwise the device compiles it (PACK_PLUGIN=0 forces that).
  rm -f "$stage"/pack/librbee_backend_cuda.so
  plugin=build/cuda-plugin/librbee_backend_cuda.so
  if [ -f $plugin ] && [ "${PACK_PLUGIN:-1}" = 1 ] && [ $plugin -nt build/ci/librbee_engine.so ] &&
     [ -z "$(find src include cmake -newer $plugin -print -quit)" ]; then
    rm -rf "$stage"/pack/obj
    strip --strip-unneeded -o "$stage"/plugin.so build/cuda-plugin/librbee_backend_cuda.so
    xz -T0 -6 -c "$stage"/plugin.so > "$carry/plugin.so.xz"
    echo "gpu_session.sh: the CUDA plug-in compiled here travels ($(du -h "$carry/plugin.so.xz" | cut -f1))"
  fi
  # PACK_XZ=1: pack.tar.xz (~30% smaller; only this script's prepare reads it), else pack.tgz (the other session
  # scripts read that).
  if [ "${PACK_XZ:-0}" = 1 ]; then XZ_OPT="-T0 -6" tar -C "$stage" -cJf "$carry/pack.tar.xz" pack
  else tar -C "$stage" -czf "$carry/pack.tgz" pack; fi
  if [ "${NO_LLAMA:-0}" != 1 ] && [ -n "${LLAMA_BIN:-}" ]; then
    cp "$LLAMA_BIN"/llama-bin.tar.xz.* "$carry/"       # llama.cpp built in an earlier session (LLAMA_SAVE=1)
  elif [ "${NO_LLAMA:-0}" != 1 ]; then
    if [ -n "${LLAMA_SRC:-}" ]; then cp -r "$LLAMA_SRC" "$stage"/llama.cpp    # a cut made earlier
    else tools/bench/llamacpp_source.sh "$stage"/llama.cpp >/dev/null; fi
    tar -C "$stage" -czf "$carry/llama.tgz" llama.cpp
  fi
  # The source tree the plug-in compiles from travels too: the device machine sees the lead's checkout, and a pack
  # made from another worktree must compile that worktree's kernels.
  tar -czf "$carry/tree.tgz" src include cmake
  rm -rf "$stage"
  du -sh "$carry"
  ;;
prepare)
  mkdir -p "$out" && rm -rf "$work/pack" "$work/llama.cpp" && mkdir -p "$work"
  if [ -f "$carry/pack.tar.xz" ]; then tar -C "$work" -xJf "$carry/pack.tar.xz"; else tar -C "$work" -xzf "$carry/pack.tgz"; fi
  llama_args=(--only-rbee)
  if [ "${NO_LLAMA:-0}" != 1 ]; then
    llama_args=()
    if [ -f "$carry/llama.tgz" ]; then tar -C "$work" -xzf "$carry/llama.tgz"; llama_args=(--llama-src "$work/llama.cpp"); fi
  fi
  tree=$PWD
  if [ -f "$carry/tree.tgz" ]; then mkdir -p "$work/tree" && tar -C "$work/tree" -xzf "$carry/tree.tgz" && tree=$work/tree; fi
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader; date -u
  export LD_LIBRARY_PATH=$pack:$pack/lib RBEE_BACKEND_PATH=$pack
  # llama.cpp built in an earlier session and carried back (LLAMA_BIN: pieces of a tar.xz of its build's bin/, made by
  # LLAMA_SAVE=1 below): no 4-minute build.
  if [ "${NO_LLAMA:-0}" != 1 ] && ls "$carry"/llama-bin.tar.xz.* >/dev/null 2>&1; then
    mkdir -p /tmp/llama-build && cat "$carry"/llama-bin.tar.xz.* | tar -C /tmp/llama-build -xJf - && echo "llama.cpp: prebuilt bin/ carried"
  fi
  # The plug-in first, on every core (80 s alone; beside the llama.cpp build it took up to 4.5 minutes), then llama.cpp
  # and the models in the background while the GPU checks run (the GPU is idle during that build otherwise).
  if [ -f "$carry/plugin.so.xz" ]; then
    xz -dc "$carry/plugin.so.xz" > "$pack/librbee_backend_cuda.so" && echo "CUDA plug-in: compiled before packing"
  else
    stamp "CUDA plug-in (nvcc here)"
    ROOT=$tree JOBS=${PLUGIN_JOBS:-16} "$pack/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1; tail -n 3 "$out/cuda_plugin.log"
  fi
  [ -f "$pack/librbee_backend_cuda.so" ] || { echo "no CUDA plug-in"; exit 1; }
  stamp "llama.cpp build and models (background)"
  python3 tools/bench/gpu_vs_llamacpp.py --rbee "$pack" "${llama_args[@]}" --llama-build /tmp/llama-build \
    --jobs 14 --prepare-only > "$out/prepare.log" 2>&1 &
  prep=$!
  "$pack/rbee" devices 2>&1 | tail -n 4
  filter=${CONFORMANCE_FILTER:-'*cuda*:-*rocm*'}
  if [ "$filter" != none ]; then
    stamp "GPU conformance ($filter)"
    timeout "${CONFORMANCE_TIMEOUT:-150}" "$pack/tests/rbee_conformance" --gtest_brief=1 \
      --gtest_filter="$filter" > "$out/conformance.log" 2>&1
    echo "conformance rc $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests ran|FAILED  \]" "$out/conformance.log" | head -30
  fi
  if [ "${SKIP_GPU_CHECK:-0}" != 1 ]; then
    stamp "GPU vs CPU model checks"
    RBEE_BUILD_DIR=$pack RBEE_OUT=$out timeout 120 scripts/gpu_check.sh compare > "$out/compare.log" 2>&1
    echo "compare rc $?"; grep -E "FAILED|max|match|===" "$out/compare.log" | head -20
  fi
  # SANITIZE_TOOLS (e.g. "memcheck"): compute-sanitizer over the conformance suite's GPU cases while llama.cpp
  # compiles, stopped after SANITIZE_TIMEOUT seconds (the log says how many cases finished without an error).
  if [ -n "${SANITIZE_TOOLS:-}" ]; then
    stamp "compute-sanitizer ($SANITIZE_TOOLS) over '${SANITIZE_FILTER:-*cuda*:-*rocm*}'"
    RBEE_BUILD_DIR=$pack RBEE_OUT=$out RBEE_SANITIZE_TOOLS="$SANITIZE_TOOLS" RBEE_SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-200} \
      RBEE_SANITIZE_FILTER="${SANITIZE_FILTER:-*cuda*:-*rocm*}" scripts/gpu_check.sh sanitize 2>&1 | grep -E "^sanitize|FAILED|passed" | head -20
  fi
  wait $prep; echo "models + llama.cpp: rc $?"; tail -n 3 "$out/prepare.log"
  # LLAMA_SAVE=1: the llama.cpp build's bin/ back through $OUT in 15 MiB pieces (llama-bin.tar.xz.aa, ...), to carry
  # in a later session's pack folder (LLAMA_BIN above).
  if [ "${LLAMA_SAVE:-0}" = 1 ] && [ -x /tmp/llama-build/bin/llama-bench ]; then
    tar -C /tmp/llama-build -cf - bin | xz -T16 -6 | split -b 15M - "$out/llama-bin.tar.xz." && ls -la "$out"/llama-bin.tar.xz.*
  fi
  stamp end
  ;;
compare)
  mkdir -p "$out"
  export LD_LIBRARY_PATH=$pack:$pack/lib RBEE_BACKEND_PATH=$pack
  only=(); [ "${NO_LLAMA:-0}" = 1 ] && only=(--only-rbee)
  python3 tools/bench/gpu_vs_llamacpp.py --rbee "$pack" "${only[@]}" --llama-build /tmp/llama-build --rows "${ROWS:-all}" \
    --reps "${REPS:-3}" --json-out "$out/gpu_vs_llamacpp.json" --md-out "$out/gpu_vs_llamacpp.md" 2>&1 | tee "$out/compare_rows.log"
  stamp end
  ;;
*) echo "gpu_session.sh: unknown phase $phase" >&2; exit 2 ;;
esac
