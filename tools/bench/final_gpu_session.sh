#!/usr/bin/env bash
# The lead's end-of-session GPU run on merged main, after `tools/bench/gpu_session.sh prepare CARRY` on the same warm
# machine (that call compiled the CUDA plug-in into /tmp/rbee-session/pack, wrote the issue-10 models to
# /tmp/rbee-models and ran the GPU conformance and the GPU-vs-CPU model checks). Each change of the session is timed
# against its own switch back to main's previous behaviour IN THE SAME CALL (ratios only within one call):
#
#   tools/bench/final_gpu_session.sh PARTS        PARTS: comma list of
#     memcheck   compute-sanitizer memcheck over the session's new conformance cases (MEMCHECK_FILTER overrides)
#     llm        rbee bench rows, each with and without the session's switches:
#                  int8 MMQ changes      RBEE_MMQ_PATH=0 (main's kernel) vs default: 7B Q4_0 / Q4_K pp512, batched
#                  decode attention      RBEE_ATTN_DECODE_VEC=0 vs default (helper attn), 7B F16 / Q4_0 batched
#                  F16 decode            RBEE_ATTN_SPLIT_MIN_CTX=0 RBEE_REDUCE_SPLIT=0 vs default, 1B / 7B F16 tg128
#     invariance the batch-invariant mode's cost and the serving identity checks (batch_invariance_gpu_session.sh)
#     identity   greedy identity on the random 7B Q4_0 shape, --batch-invariant both: prefix cache vs none (32
#                chats, 1,000-token shared system prompt) and prompt-lookup speculation k = 4 vs plain decoding
#     attnkernel rbee_bench_gpu_llm --only attention (each decode row default, flash and scalar)
#     sd         SD 1.5 512x512 20 steps: the previous session's code by its switches (SD_PREV="ENV=V ...", default
#                the switch of session 7's change: RBEE_CONV_IMPLICIT=0) vs the defaults, batch 1 and 4
#     sdpeer     diffusers eager + torch.compile on the same card (PYTHONPATH must hold diffusers 0.42.1; the compile
#                needs > 100 s: SDPEER_TIMEOUT, default 300)
#     sdxl       SDXL base 1024x1024 20 steps guidance 5 (random weights: ~16-19 s to draw them a run), the defaults;
#                with SDXL_PREV="ENV=V ..." also a run with those switches first (A/B)
#     sdxlpeer   diffusers SDXL eager + torch.compile on the same card (fp16 VAE as rbee's; the compile of the SDXL
#                UNet takes minutes: SDXLPEER_TIMEOUT, default 420)
# Logs under $OUT (or /tmp/rbee-session/out); summary.txt collects one line per row.
set -uo pipefail
cd "$(dirname "$0")/../.."
parts=${1:-memcheck,llm,invariance,sd}
has() { case ",$parts," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
P=/tmp/rbee-session/pack
M=/tmp/rbee-models
out=${OUT:-/tmp/rbee-session/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$P:$P/lib RBEE_BACKEND_PATH=$P
[ -f "$P/librbee_backend_cuda.so" ] || { echo "final_gpu_session.sh: run gpu_session.sh prepare first"; exit 1; }
t0=$(date +%s)
note() { echo "[+$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
# One `rbee bench` row: label, env assignments..., --, bench args. Prints the t/s rows and S_TG columns.
row() {
  local label=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout "${ROW_TIMEOUT:-100}" "$P/rbee" bench --backend cuda -q "$@" > "$out/row.tmp" 2>&1
  local rc=$?
  { echo "--- $label (exit $rc): ${envs[*]} rbee bench $*"; cat "$out/row.tmp"; } >> "$out/rows.log"
  note "$label (exit $rc): $(grep -E ' (tg|pp)[0-9]+ |^\| +[0-9]+ +\| +[0-9]+ +\||copy [0-9]' "$out/row.tmp" |
    tr -s ' -' | tail -4 | tr '\n' ';')"
}
note "card: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), $(date -u +%FT%TZ)"

if has memcheck; then
  filter=${MEMCHECK_FILTER:-*QMatmulConformance*cuda_q4_k_m100_n300_k4096:*QMatmulConformance*cuda_q4_0_m100_n300_k4096:*QMatmulConformance*cuda_q4_k_m40_n200_k2048:*DecodeAtTheSplit*cuda_mha128_f16:*DecodeAtTheSplit*cuda_gqa8_64_bf16:*ReduceLongRows*cuda*:*LinearConformance*/cuda*sd_*f16*:*BatchInvariant*cuda_q4_k*:*BatchedDecode*cuda_mha128_f16:*BatchedDecode*cuda_gqa4_128_bf16:*DecodeAtTheSplitBoundary*cuda_softcap256_f16:*DecodeAtTheSplitBoundary*cuda_mha64_bf16:*PagedDeviceIndices*cuda*}
  timeout "${MEMCHECK_TIMEOUT:-120}" compute-sanitizer --tool memcheck --error-exitcode 9 "$P/tests/rbee_conformance" \
    --gtest_brief=1 --gtest_filter="$filter" > "$out/memcheck.log" 2>&1
  note "memcheck (exit $?): $(grep -E '^\[  (PASSED|FAILED)  \]|ERROR SUMMARY' "$out/memcheck.log" | tr '\n' ' ')"
fi

if has llm; then
  q40=$M/llama2-7b-q4_0.gguf q4k=$M/llama2-7b-q4_k.gguf f16=$M/llama2-7b-f16.gguf f1b=$M/llama3.2-1b-f16.gguf
  old_mmq=RBEE_MMQ_PATH=0
  old_attn=RBEE_ATTN_DECODE_VEC=0
  row "7B Q4_0 pp512 new" -- -m "$q40" -p 512 -n 0 -r 2
  row "7B Q4_0 pp512 main's MMQ" $old_mmq -- -m "$q40" -p 512 -n 0 -r 2 --no-limits
  row "7B Q4_K pp512 new" -- -m "$q4k" -p 512 -n 0 -r 2 --no-limits
  row "7B Q4_K pp512 main's MMQ" $old_mmq -- -m "$q4k" -p 512 -n 0 -r 2 --no-limits
  row "7B Q4_0 batched new" -- -m "$q40" -p 128 -n 128 -r 1 --batch 16,64,128 --no-limits
  row "7B Q4_0 batched main's MMQ + attention" $old_mmq $old_attn -- -m "$q40" -p 128 -n 128 -r 1 --batch 16,64,128 --no-limits
  row "7B F16 batched new" -- -m "$f16" -p 128 -n 128 -r 1 --batch 16,64,128 --no-limits
  row "7B F16 batched main's attention" $old_attn -- -m "$f16" -p 128 -n 128 -r 1 --batch 16,64,128 --no-limits
  row "1B F16 tg128 new" -- -m "$f1b" -p 0 -n 128 -r 3
  row "1B F16 tg128 main's (split attention, one-block argmax)" RBEE_ATTN_SPLIT_MIN_CTX=0 RBEE_REDUCE_SPLIT=0 -- -m "$f1b" -p 0 -n 128 -r 3 --no-limits
  row "7B F16 tg128 new" -- -m "$f16" -p 0 -n 128 -r 2 --no-limits
  row "7B Q4_0 tg128 new" -- -m "$q40" -p 0 -n 128 -r 2 --no-limits
fi

if has invariance; then
  # The pack is already unpacked and compiled in /tmp/rbee-session: the script reuses it.
  PARTS="spec cost ttft" BIG=1 timeout "${INV_TIMEOUT:-200}" tools/bench/batch_invariance_gpu_session.sh "${CARRY:-.devpack-final}" \
    > "$out/invariance.log" 2>&1
  note "invariance (exit $?)"; grep -E "same text|identical answers|^\| (pp|tg|S_)|on / off|mode" "$out/invariance.log" |
    head -40 | tee -a "$out/summary.txt"
fi

if has identity; then
  big=$M/llama2-7b-q4_0.gguf
  timeout "${ID_TIMEOUT:-150}" python3 tools/bench/prefix_cache_ttft.py --worker "$P/llm-worker-rbee" --model "$big" \
    --backend cuda --batch-invariant both --rounds 1 > "$out/identity.log" 2>&1
  note "7B prefix cache identity (exit $?): $(grep -E 'identical answers' "$out/identity.log" | tr '\n' ' ')"
  timeout "${ID_TIMEOUT:-150}" python3 tools/bench/spec_decode.py --worker "$P/llm-worker-rbee" --model "$big" \
    --backend cuda --tokens 4 --requests 3 --max-tokens 96 --rounds 1 --batch-invariant both >> "$out/identity.log" 2>&1
  note "7B speculation identity (exit $?): $(grep -E '^\| 0 \| prompt-lookup' "$out/identity.log" | tr '\n' ' ')"
fi

if has attnkernel; then
  timeout 120 "$P/rbee_bench_gpu_llm" --backend cuda --only attention --reps 5 > "$out/attention_kernels.txt" 2>&1
  note "attention kernel rows (exit $?): $out/attention_kernels.txt"
fi

if has sd; then
  tok=tests/data/tiny_sd/sd15/tokenizer
  # sd "ENV=V ..." ARGS: one rbee_sd_bench run with those switches ("" for the defaults).
  sd() { local envs=$1; shift; env $envs timeout "${SD_TIMEOUT:-100}" "$P/rbee_sd_bench" --random-sd15 --tokenizer $tok \
    --backend cuda --f16 --steps 20 --width 512 --height 512 "$@"; }
  # The previous session's code by its switches (SD_PREV; session 7: the implicit-GEMM convolution of the VAE's
  # 512x512 level off), then the defaults, batch 1 and 4.
  prev=${SD_PREV-RBEE_CONV_IMPLICIT=0}
  sd "$prev" --runs 3 --warmup 1 > "$out/sd_prev.txt" 2>&1
  note "SD 1.5, previous session's code ($prev): $(grep -E '^result' "$out/sd_prev.txt" | tr '\n' ' ')"
  sd "" --runs 3 --warmup 1 > "$out/sd_new.txt" 2>&1
  note "SD 1.5 new: $(grep -E '^load|^warmup 0|^result|graphs' "$out/sd_new.txt" | tr '\n' ' ')"
  sd "$prev" --runs 2 --warmup 1 --batch 4 > "$out/sd_prev_batch4.txt" 2>&1
  note "SD 1.5 batch 4, previous session's code: $(grep -E '^result' "$out/sd_prev_batch4.txt" | tr '\n' ' ')"
  sd "" --runs 2 --warmup 1 --batch 4 > "$out/sd_batch4.txt" 2>&1
  note "SD 1.5 batch 4: $(grep -E '^result|graphs' "$out/sd_batch4.txt" | tr '\n' ' ')"
fi

if has sdpeer; then
  PYTHONUNBUFFERED=1 timeout "${SDPEER_TIMEOUT:-300}" python3 tools/bench/sd_bench_diffusers.py --steps 20 --width 512 \
    --height 512 --runs 3 --modes eager,compiled --compile-warmup 1 > "$out/sd_diffusers.txt" 2>&1
  note "SD 1.5 diffusers (exit $?): $(grep -E '^load|^result|compile' "$out/sd_diffusers.txt" | tr '\n' ' ')"
fi
if has sdxl; then
  # xl "ENV=V ..." ARGS: one rbee_sd_bench run of the SDXL base architecture with those switches.
  xl() { local envs=$1; shift; env $envs timeout "${SDXL_TIMEOUT:-120}" "$P/rbee_sd_bench" --random-sdxl \
    --tokenizer tests/data/tiny_sd/sd15/tokenizer --tokenizer-2 tests/data/tiny_sd/sdxl/tokenizer_2 --backend cuda --f16 \
    --steps 20 --width 1024 --height 1024 --guidance 5 "$@"; }
  if [ -n "${SDXL_PREV:-}" ]; then
    xl "$SDXL_PREV" --runs 2 --warmup 1 > "$out/sdxl_prev.txt" 2>&1
    note "SDXL with $SDXL_PREV: $(grep -E '^result' "$out/sdxl_prev.txt" | tr '\n' ' ')"
  fi
  xl "" --runs 3 --warmup 1 > "$out/sdxl_new.txt" 2>&1
  note "SDXL new: $(grep -E '^load|^warmup 0|^result|graphs' "$out/sdxl_new.txt" | tr '\n' ' ')"
fi

if has sdxlpeer; then
  PYTHONUNBUFFERED=1 timeout "${SDXLPEER_TIMEOUT:-420}" python3 tools/bench/sd_bench_diffusers.py --sdxl --steps 20 \
    --width 1024 --height 1024 --guidance 5 --runs 2 --modes eager,compiled --compile-warmup 1 \
    > "$out/sdxl_diffusers.txt" 2>&1
  note "SDXL diffusers (exit $?): $(grep -E '^load|^result|compile' "$out/sdxl_diffusers.txt" | tr '\n' ' ')"
fi
rm -f "$out/row.tmp"
note end
