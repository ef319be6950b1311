#!/usr/bin/env bash
# One GPU session for the single-sequence decode step (issue 10, item 4), on a machine where scripts/pack_build.sh's
# folder was unpacked. Correctness first, then speed, each part logged to $RBEE_OUT as soon as it ends (a run cut
# short by its time limit keeps what finished):
#   1. conformance: the fused ops and qmatmul (cuda cases), the decode-graph and graph-capture cases; the fused ops
#      and decode graphs again with programmatic dependent launches (RBEE_PDL=1)
#   2. GPU against CPU logits (rbee compare) of tiny random-weight models of each family's code path
#   3. kernel rows: rbee_bench_gpu_llm --only fused (RBEE_KERNEL_SECTIONS: other sections; the copy bandwidth is
#      measured in the same run)
#   4. tg128 of Llama-2-7B-shaped random-weight models (rbee bench, which measures the copy bandwidth in the same
#      run and reports tg128 against bytes per token / copy bandwidth), for each weight type the fused decode step
#      and RBEE_DECODE_FUSION=0 (the unfused op sequence) alternately; then RBEE_PDL=1, RBEE_L2_PREFETCH=0 and
#      RBEE_MATVEC_R=1 on the first type, and the per-op profile of both steps.
#
#   RBEE_OUT=out tools/bench/decode_gpu_session.sh PACK_DIR [TYPES]     (TYPES default: "q4_0 q4_k q8_0 f16")
#
# Models are written to $RBEE_MODELS (default /tmp/rbee-decode; the four 7B files need ~29 GB), in the background
# while parts 1-3 run; each type's tg128 starts when its file is written.
set -u
pack=$(cd "${1:?usage: decode_gpu_session.sh PACK_DIR [TYPES]}" && pwd)
types=${2:-q4_0 q4_k q8_0 f16}
out=${RBEE_OUT:-decode_gpu_out}
models=${RBEE_MODELS:-/tmp/rbee-decode}
mkdir -p "$out" "$models"
export LD_LIBRARY_PATH="$pack:$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RBEE_BACKEND_PATH="$pack"
rbee="$pack/rbee"
t0=$(date +%s)
note() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
write() { [ -f "$models/$1-$2.gguf" ] || "$rbee" random-model --preset "$1" --type "$2" -o "$models/$1-$2.gguf" >/dev/null 2>&1; }

note "card: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null), $(date -u +%FT%TZ)"
for spec in tiny-llama:q4_0 tiny-llama:q4_k tiny-qwen2:q8_0 tiny-gemma3:f16; do write "${spec%%:*}" "${spec##*:}"; done
# (RBEE_7B_STARTED=1: the caller already writes them, touching llama2-7b-TYPE.done after each.)
if [ -z "${RBEE_7B_STARTED:-}" ]; then
  for type in $types; do (write llama2-7b "$type"; touch "$models/llama2-7b-$type.done") & done
fi

# ---- 1. conformance ----
timeout 120 "$pack/tests/rbee_conformance" --gtest_brief=1 \
  --gtest_filter='*Fused*cuda*:*QMatmul*cuda*:*DecodeGraph*cuda*:*GraphCapture*cuda*' > "$out/conformance.log" 2>&1
note "conformance: $(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$out/conformance.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$out/conformance.log" | head -20 | tee -a "$out/summary.txt"
RBEE_PDL=1 timeout 60 "$pack/tests/rbee_conformance" --gtest_brief=1 \
  --gtest_filter='*Fused*cuda*:*DecodeGraph*cuda*:*GraphCapture*cuda*' > "$out/conformance_pdl.log" 2>&1
note "conformance, RBEE_PDL=1: $(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$out/conformance_pdl.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$out/conformance_pdl.log" | head -10 | tee -a "$out/summary.txt"

# ---- 2. GPU against CPU ----
tolerance() { case "$1" in f32|f16|bf16) echo 0.01 ;; q8_0) echo 0.08 ;; *) echo 0.3 ;; esac; }
for spec in tiny-llama:q4_0 tiny-llama:q4_k tiny-qwen2:q8_0 tiny-gemma3:f16; do
  m="$models/${spec%%:*}-${spec##*:}.gguf"
  timeout 60 "$rbee" compare -m "$m" --backend cuda -q -c 256 --steps 64 --tol "$(tolerance "${spec##*:}")" \
    > "$out/compare.log.tmp" 2>&1
  rc=$?
  { echo "--- $spec (exit $rc)"; grep -v '\[info\]' "$out/compare.log.tmp"; } >> "$out/compare.log"
  note "compare $spec: exit $rc, $(grep -v '\[info\]' "$out/compare.log.tmp" | tail -1)"
done
RBEE_PDL=1 timeout 60 "$rbee" compare -m "$models/tiny-llama-q4_k.gguf" --backend cuda -q -c 256 --steps 64 --tol 0.3 \
  > "$out/compare.log.tmp" 2>&1
note "compare tiny-llama:q4_k with RBEE_PDL=1: exit $?, $(grep -v '\[info\]' "$out/compare.log.tmp" | tail -1)"
rm -f "$out/compare.log.tmp"

# ---- 3. kernel rows ----
"$pack/rbee_bench_gpu_llm" --backend cuda --only "${RBEE_KERNEL_SECTIONS:-fused}" --reps 5 > "$out/kernels.txt" 2>&1
note "kernel rows: exit $? ($(grep -c . "$out/kernels.txt") lines)"

# ---- 4. tg128 ----
bench() {  # label, type, env...
  local label=$1 type=$2
  shift 2
  while [ ! -f "$models/llama2-7b-$type.done" ]; do sleep 1; done
  env "$@" timeout 120 "$rbee" bench -m "$models/llama2-7b-$type.gguf" --backend cuda -p 0 -n 128 -r 3 >> "$out/tg128.log" 2>&1
  note "tg128 llama2-7b $type $label: $(grep -E 'tg128' "$out/tg128.log" | tail -1 | awk -F'|' '{print $7, "|", $8, "|", $9}')"
}
for type in $types; do
  bench fused "$type"
  bench unfused "$type" RBEE_DECODE_FUSION=0
done
first=${types%% *}
bench "fused RBEE_PDL=1" "$first" RBEE_PDL=1
bench "fused RBEE_L2_PREFETCH=0" "$first" RBEE_L2_PREFETCH=0
bench "fused RBEE_MATVEC_R=1" "$first" RBEE_MATVEC_R=1
RBEE_OP_PROFILE=1 "$rbee" bench -m "$models/llama2-7b-$first.gguf" --backend cuda -p 0 -n 32 -r 1 --no-limits \
  > "$out/profile_fused.txt" 2>&1
RBEE_OP_PROFILE=1 RBEE_DECODE_FUSION=0 "$rbee" bench -m "$models/llama2-7b-$first.gguf" --backend cuda -p 0 -n 32 \
  -r 1 --no-limits > "$out/profile_unfused.txt" 2>&1
note "end"
