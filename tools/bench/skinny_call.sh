#!/usr/bin/env bash
# The skinny 16-bit decode product (backends/gpu/kernels/gemm_skinny.h) on one GPU, in one device call, from a
# carry folder made here (PACK_XZ=1 NO_LLAMA=1 tools/bench/gpu_session.sh pack MAIN/.devpack-NAME, plus this
# script):
#   there: .devpack-NAME/skinny_call.sh .devpack-NAME
# 1. GPU conformance CONF_FILTER with RBEE_SKINNY_GEMM=1 (every 9..64-row 16-bit product on the skinny kernel);
# 2. rbee_bench_decode_gemm_gpu (Llama-2-7B's decode products, one GPU and a tensor-split rank, weights cold) once
#    per entry of GEMM_BENCH_ENVS ("ENV;ENV;...", each ENV a space-separated list of NAME=VALUE, or "default");
# 3. rbee bench rows (7B F16 random weights) for each entry of BENCH_ENVS, BENCH_ROUNDS rounds (0: none), alternating:
#    64 streams (--batch 64 -p 128 -n 128) and BENCH_EXTRA_ARGS rows (";"-separated bench argument lists);
# 4. rbee compare of the GPU against the CPU on SmolLM2 if COMPARE=1.
# Everything lands in $OUT: summary.txt and out.tgz.
set -uo pipefail
carry=$(cd "${1:?usage: skinny_call.sh CARRY}" && pwd)
R=${OUT:?}
work=/tmp/rbee-sk
pack=$work/pack
models=/tmp/rbee-models
log=$work/out
rm -rf "$work" && mkdir -p "$work" "$models" "$log"
t0=$(date +%s)
say() { echo "$*" | tee -a "$log/summary.txt"; }
stamp() { say "--- $1 at +$(( $(date +%s) - t0 )) s"; }
tar -C "$work" -xJf "$carry/pack.tar.xz" || exit 1
xz -dc "$carry/plugin.so.xz" > "$pack/librbee_backend_cuda.so" || exit 1
export LD_LIBRARY_PATH="$pack:$pack/lib" RBEE_BACKEND_PATH=$pack
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$log/summary.txt"
model_job=""
if [ "${BENCH_ROUNDS:-2}" != 0 ]; then  # BENCH_ROUNDS=0: no bench rows, no 7B model written
  "$pack/rbee" random-model --preset llama2-7b --type f16 -o "$models/llama2-7b-f16.gguf" > /dev/null &
  model_job=$!
fi
run_env() {  # run_env "A=1 B=2" cmd...: the command with those variables ("default": none)
  local envs=$1; shift
  if [ "$envs" = default ]; then "$@"; else env $envs "$@"; fi
}
filter=${CONF_FILTER:-'*SkinnyGemm*cuda*:*QMatmulDecodeRows*cuda*:*Fused*cuda*:*DecodeGraph*cuda*:*GraphCapture*cuda*'}
if [ "$filter" != none ]; then
  stamp "conformance with RBEE_SKINNY_GEMM=1 ($filter)"
  RBEE_SKINNY_GEMM=1 timeout "${CONF_TIMEOUT:-150}" "$pack/tests/rbee_conformance" --gtest_brief=1 \
    --gtest_filter="$filter" > "$log/conformance.log" 2>&1
  say "conformance rc $?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests ran|FAILED  \]|Failure|got " "$log/conformance.log" | head -40 | tee -a "$log/summary.txt"
fi
IFS=';' read -r -a gemm_envs <<< "${GEMM_BENCH_ENVS:-RBEE_SKINNY_GEMM=0;RBEE_SKINNY_GEMM=1}"
for i in "${!gemm_envs[@]}"; do
  e=${gemm_envs[$i]}
  stamp "decode GEMM bench: $e"
  run_env "$e" timeout 150 "$pack/bench/rbee_bench_decode_gemm_gpu" --label "env$i" > "$log/decode_gemm_$i.txt" 2>&1
  grep -v '^\[20' "$log/decode_gemm_$i.txt" | tail -"${GEMM_TAIL:-40}" >> "$log/summary.txt"
done
[ -z "$model_job" ] || wait $model_job || { say "model writing failed"; }
IFS=';' read -r -a bench_envs <<< "${BENCH_ENVS:-RBEE_SKINNY_GEMM=0;RBEE_SKINNY_GEMM=1}"
IFS=';' read -r -a bench_rows <<< "${BENCH_ROWS:---batch 64 -p 128 -n 128 -r 1 --no-limits;--batch 32 -p 128 -n 128 -r 1 --no-limits}"
for round in $(seq 1 "${BENCH_ROUNDS:-2}"); do
  for row in "${bench_rows[@]}"; do
    for e in "${bench_envs[@]}"; do
      stamp "round $round: rbee bench $row ($e)"
      run_env "$e" timeout 120 "$pack/rbee" bench -m "$models/llama2-7b-f16.gguf" --backend cuda $row \
        > "$log/bench.txt" 2>&1
      grep -E "^\||S_TG|error|Error" "$log/bench.txt" | tail -4 | tee -a "$log/summary.txt"
    done
  done
done
if [ "${COMPARE:-0}" = 1 ]; then
  stamp "GPU vs CPU model checks (RBEE_SKINNY_GEMM=1)"
  RBEE_SKINNY_GEMM=1 RBEE_BUILD_DIR=$pack RBEE_OUT=$log timeout 150 scripts/gpu_check.sh compare > "$log/compare.log" 2>&1
  say "compare rc $?"; grep -E "FAILED|max|match|===" "$log/compare.log" | head -20 | tee -a "$log/summary.txt"
fi
stamp done
tar -C "$work" -czf "$R/out.tgz" out
cp "$log/summary.txt" "$R/"
