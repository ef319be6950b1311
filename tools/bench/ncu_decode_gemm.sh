#!/usr/bin/env bash
# Nsight Compute on the decode products' bench (rbee_bench_decode_gemm_gpu), from a carry folder made by
# gpu_session.sh pack (pack.tar.xz + plugin.so.xz):  tools/bench/ncu_decode_gemm.sh CARRY
# Each entry of NCU_RUNS ("ENV|KERNEL REGEX|BENCH FILTER|ROWS;...") profiles NCU_COUNT (2) launches of the kernels
# matching the regex after NCU_SKIP (20), with the sections below; reports land in $OUT/ncu_<i>.txt.
set -uo pipefail
carry=$(cd "${1:?usage: ncu_decode_gemm.sh CARRY}" && pwd)
W=/tmp/rbee-ncu
rm -rf "$W" && mkdir -p "$W"
tar -C "$W" -xJf "$carry/pack.tar.xz" && xz -dc "$carry/plugin.so.xz" > "$W/pack/librbee_backend_cuda.so" || exit 1
export LD_LIBRARY_PATH=$W/pack:$W/pack/lib RBEE_BACKEND_PATH=$W/pack
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu"; exit 1; }
IFS=';' read -r -a runs <<< "${NCU_RUNS:?}"
for i in "${!runs[@]}"; do
  IFS='|' read -r e regex filter rows <<< "${runs[$i]}"
  echo "--- $i: $e, kernels $regex, bench $filter, rows $rows"
  env $e timeout 150 "$ncu" --kernel-name "regex:$regex" --launch-skip "${NCU_SKIP:-20}" --launch-count "${NCU_COUNT:-2}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats ${NCU_EXTRA:-} \
    "$W/pack/bench/rbee_bench_decode_gemm_gpu" --filter "$filter" --rows "$rows" --min-seconds 0.05 \
    > "${OUT:-/tmp}/ncu_$i.txt" 2>&1
  echo "rc $?"
  grep -E "skinny|gemm|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit|Registers Per|Dynamic Shared|Compute \(SM\)|No Eligible|Issued Warp|Warp Cycles Per Issued|One or More" \
    "${OUT:-/tmp}/ncu_$i.txt" | head -40
done
