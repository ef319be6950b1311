#!/usr/bin/env bash
# The mmq helper's GPU session (issue 10: block-type qmatmul from 16 rows up, block-type matvec), from a pack made
# by `NO_LLAMA=1 tools/bench/gpu_session.sh pack CARRY` (CARRY holds pack.tgz and tree.tgz; this script is copied
# into CARRY too, since the device machine sees the lead's checkout):
#   CARRY/mmq_gpu_session.sh CARRY PHASES        (on the GPU machine, from the repository root)
# After `tools/bench/gpu_session.sh prepare` (which unpacks and compiles into the same /tmp/rbee-session/pack and
# writes the models to /tmp/rbee-models), the phases other than `build` run as they are:
#   tools/bench/mmq_gpu_session.sh - conf,rows,e2e
# PHASES (comma-separated, in order):
#   build      unpack to /tmp/rbee-session, compile the CUDA plug-in there (nvcc, every core)
#   conf       rbee_conformance '*QMatmul*cuda*:*Fused*cuda*' (CONF_FILTER overrides) for each RBEE_MMQ_PATH of
#              CONF_PATHS (default 1), and compute-sanitizer memcheck of MEMCHECK_FILTER (if set) for each
#   rows       rbee_bench_gpu_llm mmq and prompt rows (Q4_0, Q4_K; M from MMQ_ROWS) for each RBEE_MMQ_PATH of
#              MMQ_PATHS (default "1 0": this branch, main's kernel; 2: the wider tiles), back to back
#   matvec     matvec rows with RBEE_MATVEC_PAIRS=0 and =1 back to back
#   ncu        Nsight Compute sections of three MMQ launches (Q4_0 M=128, Q4_0 M=512, Q4_K M=512; 4096 x 4096)
#   e2e        7B Q4_0 / Q4_K models (MODELS, default /tmp/rbee-models; rbee random-model writes the missing ones),
#              then `rbee bench` pp512 and batched S_TG at BATCHES streams (default 64,128),
#              for each RBEE_MMQ_PATH of MMQ_PATHS, back to back
# Logs go to $OUT (the device tool's result folder) or /tmp/rbee-session/out.
set -uo pipefail
carry=${1:?usage: mmq_gpu_session.sh CARRY PHASES}
phases=${2:-build,rows}
work=/tmp/rbee-session
P=$work/pack
out=${OUT:-$work/out}
mkdir -p "$out"
t0=$(date +%s)
stamp() { echo "--- $1 at +$(( $(date +%s) - t0 )) s"; }
has() { [[ ",$phases," == *",$1,"* ]]; }
export LD_LIBRARY_PATH=$P:$P/lib RBEE_BACKEND_PATH=$P
if has build; then
  rm -rf "$work" && mkdir -p "$work/tree" "$out"
  tar -C "$work" -xzf "$carry/pack.tgz" && tar -C "$work/tree" -xzf "$carry/tree.tgz"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader; date -u
  stamp "CUDA plug-in"
  ROOT=$work/tree JOBS=16 "$P/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1; tail -n 2 "$out/cuda_plugin.log"
  [ -f "$P/librbee_backend_cuda.so" ] || { echo "no CUDA plug-in"; exit 1; }
fi
B=$P/rbee_bench_gpu_llm
if has conf; then
  for path in ${CONF_PATHS:-1}; do
    stamp "conformance RBEE_MMQ_PATH=$path"
    RBEE_MMQ_PATH=$path timeout 120 "$P/tests/rbee_conformance" --gtest_brief=1 \
      --gtest_filter="${CONF_FILTER:-*QMatmul*cuda*:*Fused*cuda*}" > "$out/conformance_path$path.log" 2>&1
    echo "conformance rc $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests ran|FAILED  \]" "$out/conformance_path$path.log" | head
    if [ -n "${MEMCHECK_FILTER:-}" ]; then
      stamp "memcheck RBEE_MMQ_PATH=$path"
      RBEE_MMQ_PATH=$path timeout 120 compute-sanitizer --tool memcheck --print-limit 20 "$P/tests/rbee_conformance" \
        --gtest_brief=1 --gtest_filter="$MEMCHECK_FILTER" > "$out/memcheck_path$path.log" 2>&1
      echo "memcheck rc $?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" "$out/memcheck_path$path.log" | head
    fi
  done
fi
if has rows; then
  for path in ${MMQ_PATHS:-1 0}; do
    stamp "mmq rows RBEE_MMQ_PATH=$path"
    RBEE_MMQ_PATH=$path timeout 100 "$B" --backend cuda --reps "${REPS:-10}" --only mmq,prompt --types q4_0,q4_k \
      --mmq-rows "${MMQ_ROWS:-16,32,64,96,128,256,512}" 2>&1 | tee "$out/rows_path$path.log" | grep -E 'copy|gemm|mmq|prompt|pp512'
  done
fi
if has matvec; then
  for pairs in 0 1; do
    stamp "matvec RBEE_MATVEC_PAIRS=$pairs"
    RBEE_MATVEC_PAIRS=$pairs timeout 60 "$B" --backend cuda --reps 10 --only matvec 2>&1 | tee "$out/matvec_pairs$pairs.log" \
      | grep -E 'copy|q4_0|q4_k|Q4_0|Q4_K'
  done
fi
if has ncu; then
  sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats"
  for spec in q4_0:128 q4_0:512 q4_k:512; do
    t=${spec%:*}; m=${spec#*:}
    stamp "ncu $t M=$m"
    timeout 60 ncu --clock-control none -k regex:quant_mmq_kernel -c 1 $sections \
      "$B" --backend cuda --reps 1 --only mmq --types "$t" --mmq-rows "$m" > "$out/ncu_${t}_m$m.txt" 2>&1
    grep -E 'quant_mmq_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Theoretical Occupancy|Block Limit|Executed Ipc A' \
      "$out/ncu_${t}_m$m.txt" | head -24
    grep -E '^ +Stall|stall' "$out/ncu_${t}_m$m.txt" | head -5
  done
fi
if has e2e; then
  stamp "7B models"
  M=${MODELS:-/tmp/rbee-models}; mkdir -p "$M"   # gpu_session.sh prepare writes them there (same names)
  for t in ${E2E_TYPES:-q4_0 q4_k}; do
    f=$M/llama2-7b-$t.gguf
    [ -f "$f" ] || timeout 150 "$P/rbee" random-model --preset llama2-7b --type "$t" -o "$f" > /dev/null 2>&1
  done
  ls -la "$M"
  for t in ${E2E_TYPES:-q4_0 q4_k}; do
    for path in ${MMQ_PATHS:-1 0}; do
      stamp "e2e $t RBEE_MMQ_PATH=$path"
      RBEE_MMQ_PATH=$path timeout 100 "$P/rbee" bench -m "$M/llama2-7b-$t.gguf" --backend cuda -p 512 -n 0 -r 2 2>&1 \
        | tail -n 4
      RBEE_MMQ_PATH=$path timeout 150 "$P/rbee" bench -m "$M/llama2-7b-$t.gguf" --backend cuda -p 128 -n 128 -r 1 \
        --batch "${BATCHES:-64,128}" --no-limits 2>&1 | tail -n 6
    done
  done
fi
stamp end
