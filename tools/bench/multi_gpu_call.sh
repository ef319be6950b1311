#!/usr/bin/env bash
# Issue 14's two-GPU session in two chained device calls on one lease (the machine's /tmp and the processes started
# in their own session stay while it is warm), from a carry folder made here:
#
#   here:  PACK_XZ=1 NO_LLAMA=1 tools/bench/gpu_session.sh pack MAIN/.devpack-NAME     (build/ci + CUDA plug-in)
#          tools/bench/llamacpp_source.sh /tmp/llama.cpp && tar -C /tmp -czf MAIN/.devpack-NAME/llama.tgz llama.cpp
#          cp tools/bench/{multi_gpu_call.sh,multi_gpu_session.sh,gpu_vs_llamacpp.py} MAIN/.devpack-NAME/
#   there: .devpack-NAME/multi_gpu_call.sh checks .devpack-NAME    (call 1)
#          .devpack-NAME/multi_gpu_call.sh table .devpack-NAME     (call 2, on the same warm machine)
#
# checks: unpacks the build, starts llama.cpp's build (llama-bench, llama-batched-bench; CUDA sm_90, default flags)
#         and the writing of the Llama-2-70B-shape Q8_0 model with CTX70 (65536) positions, each in its own process
#         session at low priority; writes the 7B F16 model; then multi_gpu_session.sh: the GPU tests (TEST_FILTER),
#         rbee compare --split tensor against one GPU, the all-reduce latency (COLLECTIVE_PATHS), the A/B rounds
#         AB_SPECS with RBEE_STEP_TIMES=1 on every side, and PROFILE=1's op tables; first the GPU conformance cases
#         CONF_FILTER (default '*Fused*cuda*': the row passes before the vendor GEMM; 'none' skips them).
# table:  waits for llama.cpp's build, then REPS (2) alternating rows of rbee and llama.cpp on the same files (7B
#         tg128 / pp512, 64 streams; one GPU, tensor and layer split), then the 70B model that one 80 GB card
#         cannot hold at CTX70 positions: the one-GPU plan (refused) and `rbee bench` --split tensor (LONGCTX_MODES).
# Everything lands in $OUT (summary.txt first). The background jobs' logs: /tmp/rbee-mg/*.log.
#
# llama.cpp prebuilt (gpu_session.sh prepare's LLAMA_SAVE=1 pieces, llama-bin.tar.xz.aa/.ab/...): the pieces may
# travel in either call's carry (pack + plug-in + all pieces exceed one call's 64 MiB); each call moves those it
# carries to $work/llama-pieces, and the table call unpacks them into /tmp/llama-build once all LLAMA_PIECES (default
# 3) are there; no llama.cpp build starts where a piece travels. CTX70 defaults to 65536 positions on 80 GB cards and
# 262144 on larger ones (H200: the context at which the 70B model does not fit one card); SKIP_70B=1: neither call
# writes or runs it.
# CHECKS_STOP (default 300
# s after the call began): the checks call starts no A/B spec after that (AB_SPECS, default "tp7-batched tp7:1 tp7-each:1",
# multi_gpu_session.sh's AB specs, each SPEC:ROUNDS rounds or AB_ROUNDS, default 2; "tp8" is RBEE_TP_OVERLAP=1 and off
# at 64 streams, also with RBEE_TP_OVERLAP_SPLIT=75, and at tg128; "ar3" the all-reduce candidates at 64 streams). COMPARE_MODES (default "tensor layer"; "tensor-overlap": the split with RBEE_TP_OVERLAP=1).
set -uo pipefail
phase=${1:?usage: multi_gpu_call.sh checks|table CARRY}
carry=$(cd "${2:?usage: multi_gpu_call.sh checks|table CARRY}" && pwd)
repo=$PWD  # the checkout the device tool copied (tests/data for the unit tests)
work=/tmp/rbee-mg
pack=$work/pack
models=/tmp/rbee-models
out=${OUT:-$work/out}
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
ctx70=${CTX70:-$([ "${gpu_mib:-0}" -gt 100000 ] && echo 262144 || echo 65536)}
m70l=$models/llama2-70b-q8_0-ctx$ctx70.gguf
mkdir -p "$work" "$models" "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export RBEE_SOURCE_DIR=$repo
t0=$(date +%s)
stamp() { echo "--- $1 at +$(( $(date +%s) - t0 )) s" | tee -a "$out/calls.txt"; }
session=("$carry/multi_gpu_session.sh" "$pack" "$work/llama.cpp" "$models")
# PROFILE=1 is this script's step: the session script's own runs must not each repeat the op profiles.
profile=${PROFILE:-0}
export PROFILE=0
# Prebuilt llama.cpp pieces carried by this call (see above).
if ls "$carry"/llama-bin.tar.xz.* > /dev/null 2>&1; then
  mkdir -p "$work/llama-pieces" && cp "$carry"/llama-bin.tar.xz.* "$work/llama-pieces/"
fi

case "$phase" in
checks)
  rm -rf "$pack" "$work/llama.cpp"
  tar -C "$work" -xJf "$carry/pack.tar.xz" || exit 1
  prebuilt=0
  [ -d "$work/llama-pieces" ] && prebuilt=1
  # Neither pieces nor a source (a call that measures rbee alone, or whose table call carries the pieces): no build.
  [ "$prebuilt" = 1 ] || [ -f "$carry/llama.tgz" ] || { prebuilt=1; echo "(no llama.cpp in this call)" > "$work/llama-build.log"; }
  [ "$prebuilt" = 1 ] || tar -C "$work" -xzf "$carry/llama.tgz" || exit 1
  if [ -f "$carry/plugin.so.xz" ]; then
    xz -dc "$carry/plugin.so.xz" > "$pack/librbee_backend_cuda.so"
  else
    stamp "CUDA plug-in (nvcc here, from the carried tree)"
    mkdir -p "$work/tree" && tar -C "$work/tree" -xzf "$carry/tree.tgz"
    ROOT=$work/tree JOBS=32 "$pack/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1 || exit 1
  fi
  stamp "unpacked; llama.cpp build (unless prebuilt: $prebuilt) and the 70B model start in the background"
  [ "$prebuilt" = 1 ] || setsid nice -n 19 bash -c "cmake -S $work/llama.cpp -B /tmp/llama-build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF && \
    cmake --build /tmp/llama-build -j ${LLAMA_JOBS:-24} --target llama-bench llama-batched-bench; \
    echo exit \$? > $work/llama.done" > "$work/llama-build.log" 2>&1 < /dev/null &
  export LD_LIBRARY_PATH="$pack:$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RBEE_BACKEND_PATH=$pack
  # 68 GiB: only onto a disk with room for it and the 7B file (the fifth session filled a 128 GiB disk).
  if [ "${SKIP_70B:-0}" = 1 ]; then
    echo "not written: SKIP_70B=1" > "$work/m70.done"
  elif [ ! -f "$m70l" ] && [ "$(df -P -BG "$models" | awk 'NR == 2 { sub("G", "", $4); print $4 }')" -ge 90 ]; then
    setsid nice -n 10 bash -c "'$pack/rbee' random-model --preset llama2-70b --type q8_0 --ctx-length $ctx70 \
      -o '$m70l.part' > /dev/null && mv '$m70l.part' '$m70l'; rc=\$?; [ \$rc = 0 ] || rm -f '$m70l.part'; \
      echo exit \$rc > $work/m70.done" \
      > "$work/m70.log" 2>&1 < /dev/null &
  elif [ ! -f "$m70l" ]; then
    echo "not written: $(df -h "$models" | tail -1)" > "$work/m70.done"
  else
    echo "exit 0" > "$work/m70.done"
  fi
  "$pack/rbee" random-model --preset llama2-7b --type f16 -o "$models/llama2-7b-f16.gguf" > /dev/null || exit 1
  stamp "7B F16 written; tests, compare, all-reduce latency"
  # GPU conformance of the kernels a change touched (CONF_FILTER; 'none' skips it), against the CPU backend.
  if [ "${CONF_FILTER:-*Fused*cuda*}" != none ]; then
    stamp "GPU conformance ${CONF_FILTER:-*Fused*cuda*}"
    RBEE_LOG_LEVEL=warn timeout "${CONF_TIMEOUT:-120}" "$pack/tests/rbee_conformance" --gtest_brief=1 \
      --gtest_filter="${CONF_FILTER:-*Fused*cuda*}" > "$out/conformance.log" 2>&1
    grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]' "$out/conformance.log" | tee -a "$out/summary.txt"
  fi
  OUT=$out ROWS=7b SKIP_BENCH=1 SKIP_PLAN=1 COMPARE_MODES=${COMPARE_MODES:-tensor layer} \
    TEST_FILTER=${TEST_FILTER:-'Collective.*:CollectiveGather.*:MultiDevice.TensorSplitOverGpuDevices:MultiDevice.BenchDecode*:RankThreads.*:SideStream.*:TpOverlap.*'} \
    COLLECTIVE_PATHS=${COLLECTIVE_PATHS:-auto} "${session[@]}"
  # The A/B rounds time the host too: they wait (up to M70_WAIT s, default 90) for the 70B model's write to end.
  waited=0
  while [ ! -e "$work/m70.done" ] && [ "$waited" -lt "${M70_WAIT:-90}" ]; do sleep 2; waited=$((waited + 2)); done
  stamp "70B write: $(cat $work/m70.done 2>/dev/null || echo "still writing after ${waited} s")"
  for ab in ${AB_SPECS:-tp7-batched tp7:1 tp7-each:1}; do
    if [ $(( $(date +%s) - t0 )) -gt "${CHECKS_STOP:-300}" ]; then stamp "A/B $ab skipped (CHECKS_STOP)"; continue; fi
    rounds=${ab#*:}  # SPEC:ROUNDS, or SPEC alone (AB_ROUNDS)
    [ "$rounds" = "$ab" ] && rounds=${AB_ROUNDS:-2}
    ab=${ab%%:*}
    stamp "A/B $ab ($rounds rounds)"
    OUT=$out ROWS=7b AB=$ab AB_ROUNDS=$rounds STEP_TIMES=1 SKIP_TESTS=1 SKIP_COMPARE=1 SKIP_PLAN=1 SKIP_BENCH=1 \
      SKIP_COLLECTIVE=1 "${session[@]}"
  done
  if [ "$profile" = 1 ]; then
    stamp "op profiles"
    OUT=$out ROWS=7b PROFILE=1 SKIP_TESTS=1 SKIP_COMPARE=1 SKIP_PLAN=1 SKIP_BENCH=1 SKIP_COLLECTIVE=1 "${session[@]}"
  fi
  cp "$out/unit.log" "$work/unit.log" 2>/dev/null  # for the table call: $OUT is emptied between calls
  cp "$out/conformance.log" "$work/conformance.log" 2>/dev/null
  stamp "checks done; llama.cpp: $(cat $work/llama.done 2>/dev/null || tail -c 200 $work/llama-build.log | tr '\n' ' ')"
  ;;
table)
  # llama.cpp's build gets LLAMA_WAIT seconds more (default 240); a build that failed or is not done by then is
  # left out (the table then has rbee's rows alone) rather than started again.
  if [ ! -x /tmp/llama-build/bin/llama-bench ] && [ "$(ls "$work"/llama-pieces/llama-bin.tar.xz.* 2>/dev/null | wc -l)" -ge "${LLAMA_PIECES:-3}" ]; then
    mkdir -p /tmp/llama-build && cat "$work"/llama-pieces/llama-bin.tar.xz.* | tar -C /tmp/llama-build -xJf - &&
      echo "exit 0 (prebuilt bin/ carried)" > "$work/llama.done"
  fi
  stamp "table: waiting for llama.cpp ($(cat $work/llama.done 2>/dev/null || tail -c 120 $work/llama-build.log | tr '\n' ' '))"
  waited=0
  [ -e "$work/llama-build.log" ] || [ -e "$work/llama.done" ] || echo "exit 1 (no build started, no prebuilt pieces)" > "$work/llama.done"
  while [ ! -e "$work/llama.done" ] && [ "$waited" -lt "${LLAMA_WAIT:-240}" ]; do sleep 2; waited=$((waited + 2)); done
  only_rbee=0
  if ! grep -q "exit 0" "$work/llama.done" 2>/dev/null; then
    only_rbee=1
    echo "llama.cpp not built: $(tail -c 600 $work/llama-build.log)" | tee -a "$out/summary.txt"
  fi
  stamp "table: llama.cpp waited ${waited} s"
  # A change whose GPU tests failed in the checks call is switched off for the table (and said so).
  if grep -q "FAILED.*Collective\." "$work/unit.log" 2>/dev/null; then
    export RBEE_ALLREDUCE_BLOCKS=64 RBEE_ALLREDUCE_LOADS=scalar
    echo "table: Collective tests failed in the checks call: the flag kernel as before (64 blocks, scalar loads)" |
      tee -a "$out/summary.txt"
  fi
  if grep -q "FAILED.*CollectiveGather\." "$work/unit.log" 2>/dev/null; then
    export RBEE_TP_GATHER=sum
    echo "table: CollectiveGather tests failed in the checks call: the head's gather as before (RBEE_TP_GATHER=sum)" |
      tee -a "$out/summary.txt"
  fi
  if grep -q "FAILED.*MultiDevice\." "$work/unit.log" 2>/dev/null; then
    export RBEE_TP_LEAN_STEP=0 RBEE_TP_GATHER=sum
    echo "table: MultiDevice tests failed in the checks call: the sixth session's changes off" | tee -a "$out/summary.txt"
  fi
  if grep -q "FAILED" "$work/conformance.log" 2>/dev/null; then
    export RBEE_BLAS_HALF_ACTS=0
    echo "table: GPU conformance failed in the checks call: f32 row passes and rounding (RBEE_BLAS_HALF_ACTS=0)" |
      tee -a "$out/summary.txt"
  fi
  if grep -q "FAILED.*Collective\.\|FAILED.*MultiDevice\." "$work/unit.log" 2>/dev/null; then
    export RBEE_TP_RESIDUAL_IN_REDUCE=0 RBEE_ALLREDUCE_PREFETCH_MB=0
    echo "table: Collective / MultiDevice tests failed: the seventh session's all-reduce extras off" | tee -a "$out/summary.txt"
  fi
  if grep -q "FAILED.*RankThreads\." "$work/unit.log" 2>/dev/null; then
    export RBEE_TP_SPIN_US=0
    echo "table: RankThreads tests failed in the checks call: rank threads sleep (RBEE_TP_SPIN_US=0)" | tee -a "$out/summary.txt"
  fi
  OUT=$out REPS=${REPS:-2} ROWS=${ROWS:-7b,batched} ONLY_RBEE=$only_rbee SKIP_TESTS=1 SKIP_COMPARE=1 SKIP_PLAN=1 \
    SKIP_COLLECTIVE=1 "${session[@]}"
  stamp "table done; 70B: $(cat $work/m70.done 2>/dev/null || echo 'still writing')"
  if [ "${SKIP_70B:-0}" != 1 ]; then
    while [ ! -e "$work/m70.done" ]; do sleep 2; done
    grep -q "exit 0" "$work/m70.done" || { echo "70B model: $(cat $work/m70.log)" | tee -a "$out/summary.txt"; exit 1; }
    OUT=$out LONGCTX=1 CTX70=$ctx70 LONGCTX_MODES=${LONGCTX_MODES:-tensor} PLAN_CHECK70=${PLAN_CHECK70:-0} ROWS=7b \
      SKIP_TESTS=1 SKIP_COMPARE=1 SKIP_PLAN=1 SKIP_BENCH=1 SKIP_COLLECTIVE=1 "${session[@]}"
  fi
  stamp "table call done"
  ;;
*) echo "multi_gpu_call.sh: unknown phase $phase" >&2; exit 2 ;;
esac
