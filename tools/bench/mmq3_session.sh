#!/usr/bin/env bash
# The mmq3 helper's GPU calls (issue 10: prompt processing of the block types on the int8 tensor-core MMQ), from a
# pack made here by `NO_LLAMA=1 tools/bench/gpu_session.sh pack CARRY` (CARRY holds pack.tgz, tree.tgz and a copy of
# this script, since the device machine sees the lead's checkout):
#   bash CARRY/mmq3_session.sh CARRY PHASES      (on the GPU machine, from the repository root)
# PHASES (comma-separated, run in this order):
#   build    unpack to /tmp/rbee-mmq3; a pack without librbee_backend_cuda.so compiles it there from tree.tgz
#            (the objects it lacks), one with it (compiled here, obj/ left out to keep the carry small) uses it
#   models   start writing the 7B models of E2E_TYPES (default q4_k q4_0) with `rbee random-model`, in the background
#   conf     rbee_conformance CONF_FILTER (default '*QMatmul*cuda*') with the default path, then compute-sanitizer
#            memcheck of MEMCHECK_FILTER (if set)
#   rows     rbee_bench_gpu_llm --only mmq,prompt (TYPES, default q4_0,q4_k,q8_0; M from MMQ_ROWS, default 128,512)
#            for each RBEE_MMQ_PATH of PATHS (default "1 2"), back to back
#   ncu      Nsight Compute of one Q4_K MMQ launch at M = 512 (4096 x 4096) per RBEE_MMQ_PATH of NCU_PATHS (default 1)
#   e2e      waits for the models, then `rbee bench -p 512 -n 0 -r 2` per type of E2E_TYPES and path of PATHS, and
#            (BATCHES set, e.g. 64,128) the batched rows `-p 128 -n 128 --batch BATCHES` of Q4_0
# The lead's run on merged main, after `tools/bench/gpu_session.sh prepare` (models in /tmp/rbee-models):
#   PACK=/tmp/rbee-session/pack PATHS="1 3" E2E_TYPES="q4_k q4_0 q8_0" BATCHES=64,128 \
#     MEMCHECK_FILTER='...' tools/bench/mmq3_session.sh - conf,rows,e2e
# Logs go to $OUT (the device tool's result folder) or /tmp/rbee-mmq3/out.
set -uo pipefail
carry=${1:?usage: mmq3_session.sh CARRY PHASES}
phases=${2:-build,rows}
work=/tmp/rbee-mmq3
P=${PACK:-$work/pack}  # PACK: an unpacked build with the CUDA plug-in (e.g. /tmp/rbee-session/pack after
                       # `tools/bench/gpu_session.sh prepare`); then run without `build`, CARRY unused ("-")
out=${OUT:-$work/out}
M=/tmp/rbee-models
mkdir -p "$out" "$M"
t0=$(date +%s)
stamp() { echo "--- $1 at +$(( $(date +%s) - t0 )) s"; }
has() { [[ ",$phases," == *",$1,"* ]]; }
export LD_LIBRARY_PATH=$P:$P/lib RBEE_BACKEND_PATH=$P
paths=${PATHS:-1 2}
types=${E2E_TYPES:-q4_k q4_0}
if has build; then
  rm -rf "$work" && mkdir -p "$work/tree" "$out"
  tar -C "$work" -xzf "$carry/pack.tgz"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader; date -u
  # A pack that carries the plug-in compiled here (scripts/build_cuda_plugin.sh) uses it; else compile it here.
  if [ ! -f "$P/librbee_backend_cuda.so" ]; then
    stamp "CUDA plug-in"
    tar -C "$work/tree" -xzf "$carry/tree.tgz"
    ROOT=$work/tree JOBS=16 "$P/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1; tail -n 2 "$out/cuda_plugin.log"
  fi
  [ -f "$P/librbee_backend_cuda.so" ] || { echo "no CUDA plug-in"; exit 1; }
fi
models_pid=
if has models; then
  stamp "models (background)"
  (for t in $types; do
     f=$M/llama2-7b-$t.gguf
     [ -f "$f" ] || "$P/rbee" random-model --preset llama2-7b --type "$t" -o "$f" > /dev/null 2>&1
   done) &
  models_pid=$!
fi
B=$P/rbee_bench_gpu_llm
if has conf; then
  stamp "conformance"
  timeout 150 "$P/tests/rbee_conformance" --gtest_brief=1 --gtest_filter="${CONF_FILTER:-*QMatmul*cuda*}" \
    > "$out/conformance.log" 2>&1
  echo "conformance rc $?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|tests ran|FAILED  \]" "$out/conformance.log" | head
  if [ -n "${MEMCHECK_FILTER:-}" ]; then
    stamp "memcheck"
    timeout 150 compute-sanitizer --tool memcheck --print-limit 20 "$P/tests/rbee_conformance" --gtest_brief=1 \
      --gtest_filter="$MEMCHECK_FILTER" > "$out/memcheck.log" 2>&1
    echo "memcheck rc $?"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" "$out/memcheck.log" | head
  fi
fi
if has rows; then
  for path in $paths; do
    stamp "rows RBEE_MMQ_PATH=$path"
    RBEE_MMQ_PATH=$path timeout 120 "$B" --backend cuda --reps "${REPS:-5}" --only mmq,prompt \
      --types "${TYPES:-q4_0,q4_k,q8_0}" --mmq-rows "${MMQ_ROWS:-128,512}" 2>&1 | tee "$out/rows_path$path.log" \
      | grep -E 'copy|gemm|mmq|prompt|pp512'
  done
fi
if has ncu; then
  sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
    --section SourceCounters"
  for path in ${NCU_PATHS:-1}; do
    stamp "ncu q4_k M=512 RBEE_MMQ_PATH=$path"
    RBEE_MMQ_PATH=$path timeout 90 ncu --clock-control none -k regex:quant_mmq_kernel -c 1 $sections \
      "$B" --backend cuda --reps 1 --only mmq --types q4_k --mmq-rows 512 > "$out/ncu_q4_k_path$path.txt" 2>&1
    grep -E 'quant_mmq_kernel|Duration|Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Executed Ipc A|Bank|Local|Stall|stall|Pipe' \
      "$out/ncu_q4_k_path$path.txt" | head -60
  done
  # Pipe utilisation, stall reasons per issued instruction, shared-memory bank conflicts (regex metrics: a name
  # this ncu lacks matches nothing instead of failing the run; ncu takes --metrics once, a comma-separated list).
  ncu_metrics=('regex:^sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$'
    'regex:^sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$'
    'regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$'
    'regex:^l1tex__data_bank_conflicts_pipe_lsu_mem_shared.*\.sum$'
    'regex:^l1tex__data_pipe_lsu_wavefronts_mem_shared.*\.sum$'
    'regex:^l1tex__t_(sectors|requests)_pipe_lsu_mem_(global|local)_op_(ld|st)\.sum$')
  for path in ${NCU_METRIC_PATHS:-1}; do
    stamp "ncu metrics q4_k M=512 RBEE_MMQ_PATH=$path"
    RBEE_MMQ_PATH=$path timeout 90 ncu --clock-control none -k regex:quant_mmq_kernel -c 1 \
      --metrics "$(IFS=,; echo "${ncu_metrics[*]}")" \
      "$B" --backend cuda --reps 1 --only mmq --types q4_k --mmq-rows 512 > "$out/ncu_metrics_q4_k_path$path.txt" 2>&1
    echo "ncu rc $?"; grep -vE '^==PROF==|^ *$' "$out/ncu_metrics_q4_k_path$path.txt" | grep -E ' [0-9]' | \
      awk '$NF != 0 && $NF != "0"' | tail -n 70
  done
fi
if has e2e; then
  stamp "waiting for the models"
  [ -n "$models_pid" ] && wait "$models_pid"
  ls -la "$M"
  for t in $types; do
    for path in $paths; do
      stamp "e2e $t pp512 RBEE_MMQ_PATH=$path"
      RBEE_MMQ_PATH=$path timeout 100 "$P/rbee" bench -m "$M/llama2-7b-$t.gguf" --backend cuda -p 512 -n 0 -r 2 \
        --no-limits 2>&1 | tail -n 3
    done
  done
  if [ -n "${BATCHES:-}" ]; then
    for path in $paths; do
      stamp "e2e q4_0 batched $BATCHES RBEE_MMQ_PATH=$path"
      RBEE_MMQ_PATH=$path timeout 150 "$P/rbee" bench -m "$M/llama2-7b-q4_0.gguf" --backend cuda -p 128 -n 128 -r 1 \
        --batch "$BATCHES" --no-limits 2>&1 | tail -n 4
    done
  fi
fi
stamp end
