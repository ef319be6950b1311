#!/usr/bin/env bash
# One GPU session for the single-sequence decode step (issue 10, item 4), on a machine where scripts/pack_build.sh's
# folder was unpacked. Correctness first, then speed, each part logged to $RBEE_OUT as soon as it ends (a run cut
# short by its time limit keeps what finished; summary.txt has one line per part):
#   1. conformance (cuda cases of $RBEE_CONF_FILTER: the fused ops, qmatmul, attention, sampling), then
#      compute-sanitizer memcheck on $RBEE_MEMCHECK_FILTER (fused-op cases)
#   2. GPU against CPU greedy decoding (rbee compare) of tiny random-weight models of each family's code path
#   3. tg128 of Llama-2-7B-shaped random-weight models (rbee bench, which measures the copy bandwidth in the same
#      process and reports tg128 against bytes per token / copy bandwidth), for each weight type RBEE_DECODE_FUSION=1
#      (fused for every type) and RBEE_DECODE_FUSION=0 (the unfused op sequence) back to back
#   4. what is left for the weakest row (the first type): RBEE_MATVEC_PAIRS=1 (then the default again),
#      RBEE_PDL=1, RBEE_MATVEC_R=1, the per-op profile of the fused step, the
#      kernel rows (rbee_bench_gpu_llm --only $RBEE_KERNEL_SECTIONS, copy measured in the same run) and, when ncu
#      is there, Nsight Compute's memory / speed-of-light sections of three of the step's matvec launches
#
#   RBEE_OUT=out tools/bench/decode_gpu_session.sh PACK_DIR [TYPES]     (TYPES default: "q4_k q4_0 q8_0 f16")
#
# A pack without librbee_backend_cuda.so but with scripts/pack_cuda_kit.sh's kit compiles the plug-in first (from
# $RBEE_TREE, default the current directory; $RBEE_JOBS nvcc at once, default every core).
# Models are written to $RBEE_MODELS (default /dev/shm/rbee-decode when /dev/shm has 40 GB free, else
# /tmp/rbee-decode; the four 7B files need ~29 GB), in the background while parts 1-2 run; each type's tg128 starts
# when its file is written. RBEE_TG_REPS (default 2) timed runs per tg128.
set -u
pack=$(cd "${1:?usage: decode_gpu_session.sh PACK_DIR [TYPES]}" && pwd)
types=${2:-q4_k q4_0 q8_0 f16}
out=${RBEE_OUT:-decode_gpu_out}
if [ -z "${RBEE_MODELS:-}" ] && [ "$(df --output=avail -k /dev/shm 2>/dev/null | tail -1)" -gt 41943040 ] 2>/dev/null; then
  models=/dev/shm/rbee-decode
else
  models=${RBEE_MODELS:-/tmp/rbee-decode}
fi
reps=${RBEE_TG_REPS:-2}
mkdir -p "$out" "$models"
export LD_LIBRARY_PATH="$pack:$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RBEE_BACKEND_PATH="$pack"
rbee="$pack/rbee"
t0=$(date +%s)
note() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
write() { [ -f "$models/$1-$2.gguf" ] || "$rbee" random-model --preset "$1" --type "$2" -o "$models/$1-$2.gguf" >/dev/null 2>&1; }
gtest_result() { grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$1" | tr '\n' ' '; }

note "card: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null), $(date -u +%FT%TZ), models in $models"
# Models in the background (niced: a plug-in compile below goes first), each 7B file flagged when complete.
( for spec in tiny-llama:q4_0 tiny-llama:q4_k tiny-qwen2:q8_0 tiny-gemma3:f16; do write "${spec%%:*}" "${spec##*:}"; done
  touch "$models/tiny.done" ) &
for type in $types; do
  ( [ -f "$models/llama2-7b-$type.gguf" ] || nice -n 10 "$rbee" random-model --preset llama2-7b --type "$type" \
      -o "$models/llama2-7b-$type.gguf" >/dev/null 2>&1
    touch "$models/llama2-7b-$type.done" ) &
done

# ---- 0. the CUDA plug-in, when the pack has none: compiled here from the pack's kit (scripts/pack_cuda_kit.sh)
# and the source tree in $RBEE_TREE (the worktree the pack was made from) ----
if [ ! -f "$pack/librbee_backend_cuda.so" ] && [ -x "$pack/build_cuda_plugin.sh" ]; then
  ROOT=${RBEE_TREE:-$PWD} JOBS=${RBEE_JOBS:-$(nproc)} "$pack/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1
  note "CUDA plug-in compiled here: exit $?, $(tail -1 "$out/cuda_plugin.log")"
  [ -f "$pack/librbee_backend_cuda.so" ] || { note "no CUDA plug-in: stop"; exit 1; }
fi
while [ ! -f "$models/tiny.done" ]; do sleep 1; done

# ---- 1. conformance, memcheck ----
timeout "${RBEE_CONF_TIMEOUT:-100}" "$pack/tests/rbee_conformance" --gtest_brief=1 \
  --gtest_filter="${RBEE_CONF_FILTER:-*Fused*cuda*:*QMatmul*cuda*:*Attention*cuda*:*Sample*cuda*}" > "$out/conformance.log" 2>&1
note "conformance (exit $?): $(gtest_result "$out/conformance.log")"
grep -E '^\[  FAILED  \]' "$out/conformance.log" | head -20 | tee -a "$out/summary.txt"
if command -v compute-sanitizer >/dev/null; then
  timeout "${RBEE_MEMCHECK_TIMEOUT:-40}" compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$pack/tests/rbee_conformance" --gtest_brief=1 \
    --gtest_filter="${RBEE_MEMCHECK_FILTER:-Fused/*cuda_q4_k*:Fused/*cuda_q4_0*:Fused/*cuda_q8_0*:Fused/*cuda_f16*:Fused/RopeKv*cuda*}" > "$out/memcheck.log" 2>&1
  note "memcheck (exit $?): $(gtest_result "$out/memcheck.log") $(grep -E 'ERROR SUMMARY' "$out/memcheck.log" | tail -1)"
fi
RBEE_MATVEC_PAIRS=1 timeout 60 "$pack/tests/rbee_conformance" --gtest_brief=1 \
  --gtest_filter='*QMatmul*cuda*q4_k*:*QMatmul*cuda*q5_k*:Fused/*cuda_q4_k*:Fused/*cuda_q5_k*' > "$out/conformance_pairs.log" 2>&1
note "conformance, RBEE_MATVEC_PAIRS=1 (exit $?): $(gtest_result "$out/conformance_pairs.log")"

# ---- 2. GPU against CPU ----
tolerance() { case "$1" in f32|f16|bf16) echo 0.01 ;; q8_0) echo 0.08 ;; *) echo 0.3 ;; esac; }
for spec in tiny-llama:q4_k tiny-llama:q4_0 tiny-qwen2:q8_0 tiny-gemma3:f16; do
  m="$models/${spec%%:*}-${spec##*:}.gguf"
  timeout 40 "$rbee" compare -m "$m" --backend cuda -q -c 256 --steps 64 --tol "$(tolerance "${spec##*:}")" \
    > "$out/compare.log.tmp" 2>&1
  rc=$?
  { echo "--- $spec (exit $rc)"; grep -v '\[info\]' "$out/compare.log.tmp"; } >> "$out/compare.log"
  note "compare $spec: exit $rc, $(grep -v '\[info\]' "$out/compare.log.tmp" | tail -1)"
done
rm -f "$out/compare.log.tmp"

# ---- 3. tg128 ----
bench() {  # label, type, env...
  local label=$1 type=$2
  shift 2
  while [ ! -f "$models/llama2-7b-$type.done" ]; do sleep 1; done
  env "$@" timeout 90 "$rbee" bench -m "$models/llama2-7b-$type.gguf" --backend cuda -p 0 -n 128 -r "$reps" \
    > "$out/tg128.tmp" 2>&1
  { echo "--- $type $label"; cat "$out/tg128.tmp"; } >> "$out/tg128.log"
  note "tg128 llama2-7b $type $label: $(grep -E 'tg128' "$out/tg128.tmp" | tail -1 | tr -s ' ') | $(grep -oE 'copy [0-9.]+ GB/s' "$out/tg128.tmp" | head -1)"
}
for type in $types; do
  bench fused "$type" RBEE_DECODE_FUSION=1
  bench unfused "$type" RBEE_DECODE_FUSION=0
done

# ---- 4. the weakest row ----
first=${types%% *}
bench "fused RBEE_MATVEC_PAIRS=1" "$first" RBEE_DECODE_FUSION=1 RBEE_MATVEC_PAIRS=1
bench "fused (again)" "$first" RBEE_DECODE_FUSION=1
bench "fused RBEE_PDL=1" "$first" RBEE_DECODE_FUSION=1 RBEE_PDL=1
bench "fused RBEE_MATVEC_R=1" "$first" RBEE_DECODE_FUSION=1 RBEE_MATVEC_R=1
RBEE_OP_PROFILE=1 RBEE_DECODE_FUSION=1 timeout 60 "$rbee" bench -m "$models/llama2-7b-$first.gguf" --backend cuda -p 0 \
  -n 16 -r 1 --no-limits > "$out/profile_fused.txt" 2>&1
note "profile $first fused: exit $?"
timeout 90 "$pack/rbee_bench_gpu_llm" --backend cuda --only "${RBEE_KERNEL_SECTIONS:-matvec,fused}" --reps 5 \
  > "$out/kernels.txt" 2>&1
note "kernel rows: exit $? ($(grep -c . "$out/kernels.txt") lines)"
if command -v ncu >/dev/null; then
  RBEE_DECODE_FUSION=1 timeout 90 ncu --kernel-name regex:quant_matvec_kernel --launch-skip 300 --launch-count 3 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    "$rbee" bench -m "$models/llama2-7b-$first.gguf" --backend cuda -p 0 -n 4 -r 1 --no-limits --no-graph \
    > "$out/ncu.txt" 2>&1
  note "ncu: exit $?"
fi
note "end"
