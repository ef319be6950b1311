#!/usr/bin/env bash
# Issue 10's GPU session in two device calls (the machine's /tmp stays between calls while it is warm):
#
#   here:  tools/bench/gpu_session.sh pack CARRY        CPU build (build/ci) packed + CUDA kit + llama.cpp source,
#                                                       compressed into the folder CARRY (git-ignored, < 40 MiB)
#   there: tools/bench/gpu_session.sh prepare CARRY     unpack to /tmp, compile the CUDA plug-in and llama.cpp at
#                                                       once, write the random-weight models, GPU conformance of
#                                                       the LLM kernels, GPU-vs-CPU model checks
#          tools/bench/gpu_session.sh compare CARRY     rbee vs llama.cpp, every row of issue 10's table
#
# From a helper's worktree: run ITS copy of this script for `pack` with an absolute CARRY inside the lead's
# checkout (the device machine only sees that one), e.g. MAIN/.devpack-NAME (MAIN: that checkout's root): the pack
# carries the worktree's build/ci, and its src/include/cmake, which `prepare` compiles the CUDA plug-in from.
#
# Knobs: NO_LLAMA=1 (pack/prepare/compare without llama.cpp: a helper's run against the hardware limit only; no
# 4-9 minute llama.cpp build), CONFORMANCE_FILTER (gtest filter of prepare's GPU conformance, default
# '*cuda*:-*rocm*'; 'none' skips it), SKIP_GPU_CHECK=1 (prepare without gpu_check.sh compare), ROWS, REPS.
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
  rm -rf "$carry" /tmp/rbee-pack-tmp && mkdir -p "$carry" /tmp/rbee-pack-tmp
  scripts/pack_build.sh build/ci /tmp/rbee-pack-tmp/pack >/dev/null
  scripts/pack_cuda_kit.sh build/ci /tmp/rbee-pack-tmp/pack
  tar -C /tmp/rbee-pack-tmp -czf "$carry/pack.tgz" pack
  if [ "${NO_LLAMA:-0}" != 1 ]; then
    if [ -n "${LLAMA_SRC:-}" ]; then cp -r "$LLAMA_SRC" /tmp/rbee-pack-tmp/llama.cpp    # a cut made earlier
    else tools/bench/llamacpp_source.sh /tmp/rbee-pack-tmp/llama.cpp >/dev/null; fi
    tar -C /tmp/rbee-pack-tmp -czf "$carry/llama.tgz" llama.cpp
  fi
  # The source tree the plug-in compiles from travels too: the device machine sees the lead's checkout, and a pack
  # made from another worktree must compile that worktree's kernels.
  tar -czf "$carry/tree.tgz" src include cmake
  rm -rf /tmp/rbee-pack-tmp
  du -sh "$carry"
  ;;
prepare)
  mkdir -p "$out" && rm -rf "$work/pack" "$work/llama.cpp" && mkdir -p "$work"
  tar -C "$work" -xzf "$carry/pack.tgz"
  llama_args=(--only-rbee)
  if [ "${NO_LLAMA:-0}" != 1 ]; then tar -C "$work" -xzf "$carry/llama.tgz"; llama_args=(--llama-src "$work/llama.cpp"); fi
  tree=$PWD
  if [ -f "$carry/tree.tgz" ]; then mkdir -p "$work/tree" && tar -C "$work/tree" -xzf "$carry/tree.tgz" && tree=$work/tree; fi
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader; date -u
  export LD_LIBRARY_PATH=$pack:$pack/lib RBEE_BACKEND_PATH=$pack
  stamp "CUDA plug-in (nvcc here) and llama.cpp (in its own session) at once"
  python3 tools/bench/gpu_vs_llamacpp.py --rbee "$pack" "${llama_args[@]}" --llama-build /tmp/llama-build \
    --jobs 8 --prepare-only > "$out/prepare.log" 2>&1 &
  prep=$!
  ROOT=$tree JOBS=10 "$pack/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1; tail -n 3 "$out/cuda_plugin.log"
  wait $prep; echo "models + llama.cpp: rc $?"; tail -n 3 "$out/prepare.log"
  [ -f "$pack/librbee_backend_cuda.so" ] || { echo "no CUDA plug-in"; exit 1; }
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
