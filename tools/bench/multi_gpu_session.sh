#!/usr/bin/env bash
# One session on a machine with two (or more) GPUs for issue 14, in about 10 minutes, on a folder made by
# scripts/pack_build.sh (rbee, the CUDA plug-in, the unit tests) next to a llama.cpp source from
# tools/bench/llamacpp_source.sh:
#   1. what the machine offers: GPUs, their links (nvidia-smi topo), peer access, NCCL;
#   2. correctness: the multi-device unit tests on the GPUs (tensor split of every tiny architecture over
#      cuda:0,cuda:1 against the CPU; the memory plan), then Llama-2-7B-shape F16 greedy tokens over 64 steps
#      with --split tensor, --split layer and half the layers on the CPU (--gpu-layers 16) against one GPU
#      (rbee compare: equal, or the reference's top-2 margin where they split);
#   3. the memory plan against what the allocators hold (rbee plan --check) for 7B on one GPU and over two;
#   4. speed (tools/bench/gpu_vs_llamacpp.py --multi-gpu): 7B F16 tg128 / pp512 on one GPU, --split tensor and
#      --split layer over the GPUs, 64 batched streams, the Llama-2-70B-shape Q8_0 model over two cards, and
#      llama.cpp's -sm none / tensor / layer on the same files, in the same run.
# Every step writes into $OUT as it finishes (summary.txt first), so a session cut short keeps what it measured.
#
#   OUT=/tmp/out tools/bench/multi_gpu_session.sh PACK_DIR LLAMA_SRC [MODELS_DIR]
#   e.g. (device machine)  cd .devpack-multidev && OUT=$OUT ./multi_gpu_session.sh . llama.cpp /tmp/rbee-models
#   5. the all-reduce latency (bench/rbee_bench_collective: one decode row .. 256 rows, 16 KiB .. 4 MiB) under each
#      path RBEE_ALLREDUCE can force (COLLECTIVE_PATHS, default "auto oneshot flag nccl") and, with AB=1 or
#      AB=batched, 7B tensor-split tg128 or 64-stream S_TG with changes switched off beside the default (see below);
#   6. LONGCTX=1: the Llama-2-70B-shape Q8_0 model at CTX70 (65536) positions, which one 80 GB card cannot hold:
#      the plan on one GPU (refused) and over two (--check), then `rbee bench` pp512 / tg64 at that context with
#      --split tensor and --split layer (--no-fit: refused rather than shrunk);
#   7. NSYS=1: nsys's kernel and API summaries of a 64-stream tensor-split run (where nsys is installed);
#   8. STEP_TIMES=1: the A/B runs with RBEE_STEP_TIMES=1 (rbee/core/step_times.h: the host's phases of a step; nsys
#      is not on the lent machines), their tables kept; PROFILE=1: RBEE_OP_PROFILE=1 tables of 64 streams, one GPU
#      and the tensor split (eager, each op synchronized: where a step's device time goes, op by op).
# Knobs: TEST_FILTER (gtest filter of step 2), COMPARE_MODES="tensor layer offload" (step 2's rbee compare runs),
# PLAN_CHECK70=0 (LONGCTX without the two-GPU plan --check), SKIP_TESTS=1, SKIP_COMPARE=1, SKIP_PLAN=1, SKIP_BENCH=1, SKIP_COLLECTIVE=1, AB=1|batched, AB_ROUNDS=2,
# AB=tp6 / tp6-batched / tp6-each (the sixth session's switches: both off against the default and one GPU, then each
# alone at 64 streams), AB=tp7 / tp7-batched / tp7-each (the seventh session's: all three off against the default and one
# GPU with and without 16-bit row passes, then each alone at 64 streams), AB=tp8 (RBEE_TP_OVERLAP=1 and off at 64 streams
# and tg128, each beside one GPU), AB=ar3 (the all-reduce candidates RBEE_ALLREDUCE=ll and the flag kernel with
# RBEE_ALLREDUCE_FENCE=release RBEE_ALLREDUCE_STORES=wide at 64 streams, beside the default and one GPU), COMPARE_MODES may add tensor-overlap (the split with RBEE_TP_OVERLAP=1), LONGCTX=1, CTX70=65536, LONGCTX_MODES="tensor layer", NSYS=1, COLLECTIVE_PATHS (also flag+block, flag+release+wide, ll, ll+256), PLAN_7B=0 (plan only the 70B model), ROWS=7b,batched,70b (bench rows), REPS=3,
# NGPU=2, ONLY_RBEE=1 (the bench without llama.cpp), LLAMA_BUILD_DONE=FILE (see below), TEST_TIMEOUT=300, COMPARE_TIMEOUT=240 (seconds per rbee compare), BENCH_TIMEOUT=0 (seconds per benchmark command, 0: none).
# The unit tests read tests/data from RBEE_SOURCE_DIR: by default the tree this script is in.
set -u
pack=$(cd "${1:?usage: multi_gpu_session.sh PACK_DIR LLAMA_SRC [MODELS_DIR]}" && pwd)
llama_src=${2:?usage: multi_gpu_session.sh PACK_DIR LLAMA_SRC [MODELS_DIR]}
models=${3:-/tmp/rbee-models}
out=${OUT:-multi_gpu_out}
ngpu=${NGPU:-2}
reps=${REPS:-3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" "$models"
export LD_LIBRARY_PATH="$pack:$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RBEE_BACKEND_PATH="$pack"
if [ -z "${RBEE_SOURCE_DIR:-}" ] && [ -d "$here/../../tests/data" ]; then export RBEE_SOURCE_DIR="$(cd "$here/../.." && pwd)"; fi
# NVLink multicast stays off (it can take a shared host's GPUs out of service). NCCL is opened at run time
# (libnccl.so.2): add the Python wheel's copy (nvidia-nccl) to the search path where the system has none.
export NCCL_NVLS_ENABLE=0
if nccl_lib=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null) &&
   [ -e "$nccl_lib/libnccl.so.2" ]; then
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl_lib"
fi
rbee="$pack/rbee"
status=0
note() { echo "== $*" | tee -a "$out/summary.txt"; }
stamp() { date -u +%H:%M:%S; }
devices=$(seq -s, -f 'cuda:%g' 0 $((ngpu - 1)))
m7="$models/llama2-7b-f16.gguf"
m70="$models/llama2-70b-q8_0.gguf"
# LONGCTX=1: the 70B shape with a context length of CTX70 in the file (the preset's is 4096; -c is capped at it).
m70l="$models/llama2-70b-q8_0-ctx${CTX70:-65536}.gguf"

note "$(stamp) session start; GPUs:"
nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 |
  tee -a "$out/summary.txt"
nvidia-smi topo -m > "$out/topo.txt" 2>&1 && head -8 "$out/topo.txt" | tee -a "$out/summary.txt"
"$rbee" devices > "$out/devices.txt" 2>&1
note "NCCL: $(ls /usr/lib/x86_64-linux-gnu/libnccl.so* /usr/local/lib/libnccl.so* ${nccl_lib:+$nccl_lib/libnccl.so*} 2>/dev/null | head -1 || true)"

# llama.cpp builds in the background while the models are written and the correctness steps run.
bench_py=(python3 "$here/gpu_vs_llamacpp.py" --rbee "$pack" --llama-src "$llama_src" --models "$models"
          --reps "$reps" --multi-gpu "$ngpu" --multi-rows "${ROWS:-7b,batched,70b}" --json-out "$out/bench.json"
          --md-out "$out/bench.md" --timeout "${BENCH_TIMEOUT:-0}")
[ "${ONLY_RBEE:-0}" = 1 ] && bench_py+=(--only-rbee)
# LLAMA_BUILD_DONE=FILE: the caller already started the build (e.g. while compiling the CUDA plug-in) and touches
# FILE when it ends; the bench waits for it instead of starting another build.
if [ -n "${LLAMA_BUILD_DONE:-}" ]; then
  :
elif [ "${SKIP_BENCH:-0}" != 1 ] && [ "${ONLY_RBEE:-0}" != 1 ] && [ ! -x /tmp/llama-build/bin/llama-bench ]; then
  (cmake -S "$llama_src" -B /tmp/llama-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
     -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > "$out/llama-build.log" 2>&1 &&
   cmake --build /tmp/llama-build -j "$(nproc)" --target llama-bench llama-batched-bench >> "$out/llama-build.log" 2>&1;
   echo "exit $?" >> "$out/llama-build.log") &
  llama_build_pid=$!
fi
# Models are written only for the steps that read them: the 70B file (68 GiB) only for the bench's 70b rows. Two
# 70B files fill a 128 GiB disk (the fifth session lost its second call to that), so a write that would leave less
# than 8 GiB free is refused, and a failed write leaves no .part behind.
free_gib() { df -P -BG "$models" | awk 'NR == 2 { sub("G", "", $4); print $4 }'; }
write_model() {  # PRESET TYPE PATH GIB [extra random-model args]
  local preset=$1 type=$2 path=$3 gib=$4
  shift 4
  if [ "$(free_gib)" -lt $((gib + 8)) ]; then
    note "not writing $path: $(free_gib) GiB free on $models, $gib GiB needed"
    status=1
    return 1
  fi
  note "$(stamp) writing $path"
  "$rbee" random-model --preset "$preset" --type "$type" "$@" -o "$path.part" > /dev/null && mv "$path.part" "$path" ||
    { rm -f "$path.part"; status=1; return 1; }
}
[ -f "$m7" ] || write_model llama2-7b f16 "$m7" 13
case ",${ROWS:-7b,batched,70b}," in
  *,70b,*) [ "${SKIP_BENCH:-0}" != 1 ] && [ ! -f "$m70" ] && write_model llama2-70b q8_0 "$m70" 69 ;;
esac
if [ "${LONGCTX:-0}" = 1 ] && [ ! -f "$m70l" ]; then
  write_model llama2-70b q8_0 "$m70l" 69 --ctx-length "${CTX70:-65536}"
fi

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  note "$(stamp) unit tests on the GPUs"
  RBEE_LOG_LEVEL=warn timeout "${TEST_TIMEOUT:-300}" "$pack/tests/rbee_unit_tests" --gtest_brief=1 \
    --gtest_filter="${TEST_FILTER:-MultiDevice.*:Collective.*:MemoryPlan.*}" \
    > "$out/unit.log" 2>&1 || status=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]' "$out/unit.log" | tee -a "$out/summary.txt"
fi

if [ "${SKIP_COMPARE:-0}" != 1 ]; then
  compare_modes=()
  for m in ${COMPARE_MODES:-tensor layer offload}; do
    case $m in
      tensor) compare_modes+=("--devices $devices --split tensor") ;;
      layer) compare_modes+=("--devices $devices --split layer") ;;
      offload) compare_modes+=("--backend cuda --gpu-layers 16") ;;
      # The tensor split with the eighth session's overlapped all-reduce (RBEE_TP_OVERLAP=1).
      tensor-overlap) compare_modes+=("RBEE_TP_OVERLAP=1 --devices $devices --split tensor") ;;
    esac
  done
  for mode in "${compare_modes[@]}"; do
    note "$(stamp) rbee compare 7B F16 ($mode) against one GPU, 64 greedy steps"
    envs=""  # leading RBEE_X=V words of a mode go to the environment
    while [[ $mode == RBEE_*=*" "* ]]; do envs="$envs ${mode%% *}"; mode=${mode#* }; done
    # shellcheck disable=SC2086
    env $envs timeout "${COMPARE_TIMEOUT:-240}" "$rbee" compare -m "$m7" $mode --reference cuda --steps 64 -q \
      > "$out/compare.log.tmp" 2>&1 || status=1
    grep -E "^(compare|greedy|prefill)" "$out/compare.log.tmp" | tee -a "$out/summary.txt"
    cat "$out/compare.log.tmp" >> "$out/compare.log"
  done
  rm -f "$out/compare.log.tmp"
fi

if [ "${SKIP_PLAN:-0}" != 1 ]; then
  plan_modes=("--backend cuda" "--devices $devices --split tensor" "--devices $devices --split layer")
  [ "${PLAN_7B:-1}" = 0 ] && plan_modes=()
  for mode in "${plan_modes[@]}"; do
    note "$(stamp) rbee plan --check 7B F16 ($mode), 8 sequences, 264-token steps"
    # shellcheck disable=SC2086
    timeout 120 "$rbee" plan -m "$m7" $mode -c 4096 --parallel 8 --batch-tokens 264 --check > "$out/plan.tmp" 2>&1 ||
      status=1
    tee -a "$out/summary.txt" < "$out/plan.tmp" | grep -E "^\| |^note|does not fit" > /dev/null
    cat "$out/plan.tmp" >> "$out/plan.log"
  done
  if [ -f "$m70" ]; then
    # 70B Q8_0 is 68.3 GiB of weights: at 4096 positions it fits one 80 GB H100 (70.1 of 78.6 GiB), so the
    # model that does not fit one card is this one with 65536 positions (20 GiB of KV cache): one GPU (refused
    # with the numbers), then two (planned against held).
    note "$(stamp) rbee plan 70B Q8_0: one GPU at 4096 and 65536 positions, then two at 65536 (--check)"
    "$rbee" plan -m "$m70" --backend cuda --gpu-layers 80 -c 4096 2>&1 | tee -a "$out/summary.txt"
    "$rbee" plan -m "$m70" --backend cuda --gpu-layers 80 -c 65536 2>&1 | tee -a "$out/summary.txt"
    "$rbee" plan -m "$m70" --devices "$devices" --split tensor -c 65536 --check 2>&1 | tee -a "$out/summary.txt"
  fi
  rm -f "$out/plan.tmp"
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  if [ -n "${LLAMA_BUILD_DONE:-}" ]; then
    note "$(stamp) waiting for the llama.cpp build ($LLAMA_BUILD_DONE)"
    while [ ! -e "$LLAMA_BUILD_DONE" ]; do sleep 2; done
  elif [ -n "${llama_build_pid:-}" ]; then
    note "$(stamp) waiting for the llama.cpp build"
    wait "$llama_build_pid"
    tail -1 "$out/llama-build.log" | tee -a "$out/summary.txt"
  fi
  note "$(stamp) speed: rbee and llama.cpp, same files, same run"
  "${bench_py[@]}" > "$out/bench.log" 2>&1 || status=1
  grep -E "FAILED|^\||^devices" "$out/bench.log" | tee -a "$out/summary.txt"
fi
if [ "${SKIP_COLLECTIVE:-0}" != 1 ] && [ -x "$pack/bench/rbee_bench_collective" ]; then
  for path in ${COLLECTIVE_PATHS:-auto oneshot flag nccl}; do
    note "$(stamp) all-reduce latency over $ngpu GPUs, RBEE_ALLREDUCE=$path"
    # PATH+KNOB+...: the flag kernel's knobs as in tests/unit/test_collective.cpp: "block" (one fence per block),
    # "release" (release / acquire flags, no fences), "wide" (RBEE_ALLREDUCE_STORES=wide: 16-byte units whole), a
    # number (RBEE_ALLREDUCE_BLOCKS, also the ll kernel's grid), "scalar" (RBEE_ALLREDUCE_LOADS=scalar).
    knobs=(RBEE_ALLREDUCE_FENCE=thread)
    IFS=+ read -r -a parts <<< "$path"
    path=${parts[0]}
    for knob in "${parts[@]:1}"; do
      case $knob in
        block) knobs+=(RBEE_ALLREDUCE_FENCE=block) ;;
        release|thread) knobs+=(RBEE_ALLREDUCE_FENCE=$knob) ;;
        wide|split) knobs+=(RBEE_ALLREDUCE_STORES=$knob) ;;
        scalar) knobs+=(RBEE_ALLREDUCE_LOADS=scalar) ;;
        *) knobs+=(RBEE_ALLREDUCE_BLOCKS=$knob) ;;
      esac
    done
    # nccl is recorded into the graphs too: a hang there costs 60 s, not the call.
    env RBEE_ALLREDUCE="$path" "${knobs[@]}" timeout 60 "$pack/bench/rbee_bench_collective" --ranks "$ngpu" 2>&1 |
      tee -a "$out/summary.txt" || status=1
  done
fi

# AB=1: the tensor split's tg128 with the fourth session's changes switched off (RBEE_ALLREDUCE=oneshot: the one-shot
# all-reduce up to 1 MiB, no flag kernel; RBEE_TP_SPLIT_HEAD=0: the whole head on rank 0), beside the default and
# one GPU; AB=batched: the same for S_TG of 64 streams, and the flag kernel with one fence per block
# (RBEE_ALLREDUCE_FENCE=block); AB=each / each-batched: each change alone. Alternating, AB_ROUNDS rounds (default
# 2), so each change is measured against its own baseline.
ab_run() {  # ENVS|DEVICE ARGS|BENCH ARGS|WHAT TO KEEP
  local envs=${1%%|*} rest=${1#*|}
  local mode=${rest%%|*}; rest=${rest#*|}
  local args=${rest%%|*} keep=${rest#*|}
  [ "$envs" = default ] && envs=""
  note "$(stamp) A/B round $round: ${envs:-default} rbee bench 7B F16 $args ($mode)"
  # STEP_TIMES=1: every side of the A/B with RBEE_STEP_TIMES=1 (the same small cost on each), its table kept.
  if [ "${STEP_TIMES:-0}" = 1 ]; then envs="RBEE_STEP_TIMES=1 $envs"; keep="$keep|step times|  .* calls "; fi
  # shellcheck disable=SC2086
  env $envs timeout 120 "$rbee" bench -m "$m7" $mode $args 2>&1 | grep -E "$keep" | tee -a "$out/summary.txt" || status=1
}
tp="--devices $devices --split tensor"
tp7_before="RBEE_BLAS_HALF_ACTS=0 RBEE_TP_RESIDUAL_IN_REDUCE=0 RBEE_ALLREDUCE_PREFETCH_MB=0"
case "${AB:-0}" in
  1) ab_specs=("default|$tp|-p 0 -n 128 -r 2|tg128|limits measured"
               "RBEE_ALLREDUCE=oneshot RBEE_TP_SPLIT_HEAD=0|$tp|-p 0 -n 128 -r 2 --no-limits|tg128"
               "default|--backend cuda|-p 0 -n 128 -r 2|tg128|limits measured") ;;
  batched) ab_specs=("default|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                     "RBEE_ALLREDUCE=oneshot RBEE_TP_SPLIT_HEAD=0|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                     "RBEE_ALLREDUCE_FENCE=block|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                     "default|--backend cuda|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 ") ;;
  each) ab_specs=("default|--devices $devices --split tensor|-p 0 -n 128 -r 2|tg128|limits measured"
               "RBEE_ALLREDUCE=oneshot RBEE_TP_SPLIT_HEAD=0|--devices $devices --split tensor|-p 0 -n 128 -r 2 --no-limits|tg128"
               "RBEE_TP_SPLIT_HEAD=0|--devices $devices --split tensor|-p 0 -n 128 -r 2 --no-limits|tg128"
               "default|--backend cuda|-p 0 -n 128 -r 2|tg128|limits measured") ;;
  # The fifth session's changes: the rank threads' spin (RBEE_TP_SPIN_US=0: sleep on a condition variable, as
  # before) and the flag kernel's grid and loads (RBEE_ALLREDUCE_BLOCKS=64 RBEE_ALLREDUCE_LOADS=scalar: as before).
  tp5) ab_specs=("default|$tp|-p 0 -n 128 -r 2|tg128|limits measured"
                 "RBEE_TP_SPIN_US=0|$tp|-p 0 -n 128 -r 2 --no-limits|tg128"
                 "default|--backend cuda|-p 0 -n 128 -r 2 --no-limits|tg128") ;;
  tp5-batched) ab_specs=("default|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                         "RBEE_TP_SPIN_US=0 RBEE_ALLREDUCE_BLOCKS=64 RBEE_ALLREDUCE_LOADS=scalar|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                         "RBEE_ALLREDUCE_BLOCKS=64 RBEE_ALLREDUCE_LOADS=scalar|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                         "default|--backend cuda|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 ") ;;
  # The sixth session's changes: the lean decode step of the ranks (RBEE_TP_LEAN_STEP=0: zeros and copy into the
  # input slot from the host, and the copy of every rank's output, as before) and the head's gather of each rank's
  # own rows (RBEE_TP_GATHER=sum: zeros and an all-reduce of every row, as before).
  tp6) ab_specs=("default|$tp|-p 0 -n 128 -r 2|tg128|limits measured"
                 "RBEE_TP_LEAN_STEP=0 RBEE_TP_GATHER=sum|$tp|-p 0 -n 128 -r 2 --no-limits|tg128"
                 "default|--backend cuda|-p 0 -n 128 -r 2|tg128|limits measured") ;;
  tp6-batched) ab_specs=("default|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                         "RBEE_TP_LEAN_STEP=0 RBEE_TP_GATHER=sum|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                         "default|--backend cuda|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 ") ;;
  tp6-each) ab_specs=("default|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                      "RBEE_TP_GATHER=sum|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                      "RBEE_TP_LEAN_STEP=0|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 ") ;;
  # The seventh session's switches: the norm / SwiGLU row passes writing the vendor GEMM's 16-bit input
  # (RBEE_BLAS_HALF_ACTS=0: f32 rows and a rounding pass, as before), rank 0's MLP residual added by the all-reduce's
  # push (RBEE_TP_RESIDUAL_IN_REDUCE=0: by the projection, as before) and the all-reduce's L2 prefetch of the next
  # weights (RBEE_ALLREDUCE_PREFETCH_MB=0: none, as before). "before" = all three off = the sixth session's step.
  tp7) ab_specs=("default|$tp|-p 0 -n 128 -r 2|tg128|limits measured"
                 "$tp7_before|$tp|-p 0 -n 128 -r 2 --no-limits|tg128"
                 "default|--backend cuda|-p 0 -n 128 -r 2|tg128|limits measured") ;;
  tp7-tg) ab_specs=("default|$tp|-p 0 -n 128 -r 2|tg128|limits measured"
                    "default|--backend cuda|-p 0 -n 128 -r 2 --no-limits|tg128") ;;
  tp7-batched) ab_specs=("default|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                         "$tp7_before|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                         "RBEE_ALLREDUCE_PREFETCH_MB=0|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                         "default|--backend cuda|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                         "RBEE_BLAS_HALF_ACTS=0|--backend cuda|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 ") ;;
  # After the first call of that session: the prefetch's requests spread over every block and its default layout
  # the row heads (RBEE_ALLREDUCE_PREFETCH=rows, the first rows, was measured in the first call).
  tp7b-batched) ab_specs=("default|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                          "RBEE_ALLREDUCE_PREFETCH_MB=0|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                          "$tp7_before|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                          "default|--backend cuda|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                          "RBEE_BLAS_HALF_ACTS=0|--backend cuda|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 ") ;;
  tp7-each) ab_specs=("RBEE_TP_RESIDUAL_IN_REDUCE=0|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                      "RBEE_BLAS_HALF_ACTS=0|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                      "RBEE_ALLREDUCE_PREFETCH_MB=40|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                      "RBEE_ALLREDUCE_PREFETCH=heads|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                      "default|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 ") ;;
  # The eighth session's switch, off by default: RBEE_TP_OVERLAP=1 cuts the attention output and down projection in
  # two by output columns and runs the first half's all-reduce on a side stream beside the second half's product
  # (docs/perf-notes/multi-device.md, "prepared for the eighth two-GPU session"). On and off alternate, at 64
  # streams (also with a first part of 75% of the columns, RBEE_TP_OVERLAP_SPLIT=75) and at tg128, beside one GPU.
  tp8) ab_specs=("RBEE_TP_OVERLAP=1|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                 "default|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                 "RBEE_TP_OVERLAP=1 RBEE_TP_OVERLAP_SPLIT=75|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                 "default|--backend cuda|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                 "RBEE_TP_OVERLAP=1|$tp|-p 0 -n 128 -r 2 --no-limits|tg128"
                 "default|$tp|-p 0 -n 128 -r 2 --no-limits|tg128"
                 "default|--backend cuda|-p 0 -n 128 -r 2 --no-limits|tg128") ;;
  # Issue 14's all-reduce candidates (docs/perf-notes/multi-device.md, "prepared for the eighth two-GPU session:
  # all-reduce"), each behind a switch: the ll kernel for every message (RBEE_ALLREDUCE=ll), and the default size
  # rule with the flag kernel's 16-byte stores and release / acquire flags (the flag kernel carries the 1 MiB
  # messages of 64 streams), at 64 streams beside the default and one GPU.
  ar3) ab_specs=("default|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                 "RBEE_ALLREDUCE=ll|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                 "RBEE_ALLREDUCE_FENCE=release RBEE_ALLREDUCE_STORES=wide|$tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                 "default|--backend cuda|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 ") ;;
  each-batched) ab_specs=("default|--devices $devices --split tensor|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                     "RBEE_ALLREDUCE=oneshot RBEE_TP_SPLIT_HEAD=0|--devices $devices --split tensor|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                     "RBEE_ALLREDUCE=oneshot|--devices $devices --split tensor|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 "
                     "default|--backend cuda|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 ") ;;
  # Any rows, from the environment: AB_CUSTOM="ENV|WHERE|BENCH ARGS|ROW PATTERN;..." with WHERE "tp" (the tensor
  # split over the GPUs) or "one" (one GPU), e.g. "RBEE_X=0|tp|--batch 64 -p 128 -n 128 -r 1 --no-limits|^\|  +128 ".
  custom) IFS=';' read -r -a custom_rows <<< "${AB_CUSTOM:?AB=custom needs AB_CUSTOM}"
          ab_specs=()
          for row in "${custom_rows[@]}"; do
            IFS='|' read -r c_env c_where c_args c_pat <<< "$row"
            [ "$c_where" = one ] && c_where="--backend cuda" || c_where=$tp
            ab_specs+=("$c_env|$c_where|$c_args|$c_pat")
          done ;;
  *) ab_specs=() ;;
esac
if [ "${#ab_specs[@]}" -gt 0 ]; then
  for round in $(seq 1 "${AB_ROUNDS:-2}"); do
    for spec in "${ab_specs[@]}"; do ab_run "$spec"; done
  done
fi
if [ "${PROFILE:-0}" = 1 ]; then
  for mode in "$tp" "--backend cuda"; do
    note "$(stamp) op profile (RBEE_OP_PROFILE=1, eager, synchronized per op): 7B F16 64 streams, 16 steps ($mode)"
    # shellcheck disable=SC2086
    RBEE_OP_PROFILE=1 timeout 180 "$rbee" bench -m "$m7" $mode --batch 64 -p 128 -n 16 -r 1 --no-limits > "$out/profile.tmp" 2>&1 ||
      status=1
    grep -E "^profile:|^  kind " "$out/profile.tmp" | tee -a "$out/summary.txt"
    grep -E "^  [a-z+_,]+ +[Ff]32 \[64," "$out/profile.tmp" | head -16 | tee -a "$out/summary.txt"
    cat "$out/profile.tmp" >> "$out/profile.log"
  done
  rm -f "$out/profile.tmp"
fi
if [ "${NSYS:-0}" = 1 ]; then
  nsys_bin=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  if [ -n "$nsys_bin" ]; then
    note "$(stamp) nsys: 64 streams, --split tensor, 32 steps"
    timeout 150 "$nsys_bin" profile -t cuda,osrt -o /tmp/tp64 -f true "$rbee" bench -m "$m7" --devices "$devices" \
      --split tensor --batch 64 -p 128 -n 32 -r 1 --no-limits > "$out/nsys.log" 2>&1 || status=1
    timeout 90 "$nsys_bin" stats -r cuda_gpu_kern_sum,cuda_api_sum,osrt_sum -f csv -o "$out/nsys" /tmp/tp64.nsys-rep \
      >> "$out/nsys.log" 2>&1 || status=1
    for f in "$out"/nsys_*.csv; do [ -f "$f" ] && { echo "-- $f"; head -14 "$f"; } | tee -a "$out/summary.txt"; done
  else
    note "nsys: not installed"
  fi
fi
if [ "${LONGCTX:-0}" = 1 ] && [ -f "$m70l" ]; then
  ctx=${CTX70:-65536}
  m70=$m70l
  note "$(stamp) 70B Q8_0 at $ctx positions: one GPU (the plan refuses), two GPUs (plan --check)"
  "$rbee" plan -m "$m70" --backend cuda --gpu-layers 80 -c "$ctx" --no-fit 2>&1 | tail -4 | tee -a "$out/summary.txt"
  if [ "${PLAN_CHECK70:-1}" = 1 ]; then
    timeout 240 "$rbee" plan -m "$m70" --devices "$devices" --split tensor -c "$ctx" --check 2>&1 | tee -a "$out/summary.txt" ||
      status=1
  fi
  for mode in ${LONGCTX_MODES:-tensor layer}; do
    note "$(stamp) 70B Q8_0, -c $ctx, --split $mode: rbee bench pp512 tg64"
    timeout 240 "$rbee" bench -m "$m70" --devices "$devices" --split "$mode" -c "$ctx" --no-fit -p 512 -n 64 -r 1 \
      --no-limits 2>&1 | grep -vE "^\s*$|progress" | tail -12 | tee -a "$out/summary.txt" || status=1
  done
fi
note "$(stamp) session end, status $status"
exit $status
