#!/usr/bin/env bash
# The eighth two-GPU session's second call (issue 14): checks and A/B of this session's changes in one device call,
# from a carry folder made here as for multi_gpu_call.sh (pack.tar.xz + plugin.so.xz + the session scripts):
#   tools/bench/tp9_call.sh CARRY
# 1. multi_gpu_call.sh checks: GPU conformance (CONF_FILTER), the GPU unit tests (TEST_FILTER), rbee compare
#    --split tensor, rbee_bench_collective (COLLECTIVE_PATHS), the A/B rows AB_CUSTOM (AB=custom, AB_ROUNDS rounds).
# 2. rbee_bench_reduce_norm (REDUCE_NORM_BENCH=1, the default) under both flag orders; rbee_bench_decode_gemm_gpu on
#    GPU 0 with RBEE_DECODE_GEMM_TUNE=0 and =1 (GEMM_BENCH_TUNES="0 1"; empty: none).
# 3. NCU=1: one GPU's 64-stream decode step kernel by kernel (ncu_step_profile.sh).
# Everything lands in $OUT as out.tgz (all logs) and summary.txt.
set -uo pipefail
carry=$(cd "${1:?usage: tp9_call.sh CARRY}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
R=${OUT:?}
export OUT=/tmp/tp9-out
rm -rf "$OUT" && mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
row64="--batch 64 -p 128 -n 128 -r 1 --no-limits|^\\|  +128 "
rowtg="-p 0 -n 128 -r 2 --no-limits|tg128"
export AB_CUSTOM=${AB_CUSTOM:-"default|tp|$row64;RBEE_TP_REDUCE_NORM=0|tp|$row64;RBEE_DECODE_GEMM_TUNE=0|tp|$row64;default|one|$row64;RBEE_DECODE_GEMM_TUNE=0|one|$row64;default|tp|$rowtg;default|one|$rowtg"}
SKIP_70B=1 CHECKS_STOP=${CHECKS_STOP:-330} AB_SPECS="custom:${AB_ROUNDS:-2}" \
  CONF_FILTER=${CONF_FILTER:-'*RopeKv*cuda*:*QMatmulDecodeRows*cuda*:*Fused*cuda*'} \
  TEST_FILTER=${TEST_FILTER:-'ReduceNorm.*:Collective.GpuCommunicatorEager:Collective.GpuCommunicatorInGraphs:MultiDevice.TensorSplitOverGpuDevices'} \
  COMPARE_MODES=${COMPARE_MODES:-tensor} COLLECTIVE_PATHS=${COLLECTIVE_PATHS:-auto} \
  "$carry/multi_gpu_call.sh" checks "$carry"
P=/tmp/rbee-mg/pack
export LD_LIBRARY_PATH=$P:$P/lib RBEE_BACKEND_PATH=$P
if [ "${REDUCE_NORM_BENCH:-1}" = 1 ]; then
  for fence in thread release; do
    echo "--- rbee_bench_reduce_norm, RBEE_ALLREDUCE_FENCE=$fence at +$SECONDS s" | tee -a "$OUT/summary.txt"
    RBEE_ALLREDUCE_FENCE=$fence timeout 120 "$P/bench/rbee_bench_reduce_norm" 2>&1 | grep -v '^\[20' | tee -a "$OUT/summary.txt"
  done
fi
for tune in ${GEMM_BENCH_TUNES-0 1}; do
  echo "--- decode GEMM bench, RBEE_DECODE_GEMM_TUNE=$tune at +$SECONDS s" | tee -a "$OUT/summary.txt"
  CUDA_VISIBLE_DEVICES=0 RBEE_DECODE_GEMM_TUNE=$tune timeout 150 "$P/bench/rbee_bench_decode_gemm_gpu" \
    --label "tune$tune" > "$OUT/decode_gemm_tune$tune.txt" 2>&1
  grep -v '^\[20' "$OUT/decode_gemm_tune$tune.txt" | tail -40 >> "$OUT/summary.txt"
done
if [ "${NCU:-1}" = 1 ]; then
  echo "--- ncu at +$SECONDS s" | tee -a "$OUT/summary.txt"
  CUDA_VISIBLE_DEVICES=0 NCU_TIMEOUT=150 "$here/ncu_step_profile.sh" "$P/rbee" /tmp/rbee-models/llama2-7b-f16.gguf \
    /tmp/ncu2 --batch 64 -p 8 -n 4 -r 1 --no-limits > "$OUT/ncu_run.txt" 2>&1
  cp /tmp/ncu2/ncu_table.md "$OUT/" 2>/dev/null && head -45 /tmp/ncu2/ncu_table.md >> "$OUT/summary.txt"
  xz -c /tmp/ncu2/ncu.csv > "$R/ncu.csv.xz" 2>/dev/null
fi
echo "--- done at +$SECONDS s" | tee -a "$OUT/summary.txt"
tar -C /tmp -czf "$R/out.tgz" tp9-out
cp "$OUT/summary.txt" "$R/"
