#!/usr/bin/env bash
# One short GPU session for batch invariance (docs/DESIGN.md "Batch invariance", docs/perf-notes/batch-invariance.md):
#   1. the conformance cases on cuda: tests/conformance/test_batch_invariance.cpp (each op, one row alone vs inside
#      launches of M = 2..9, 16, 64; attention decode vs verify / prefill-over-cache / batches; the switch on: equal
#      bits, off: rounding-sized differences, printed) and test_batch_invariant_model.cpp (tiny random models
#      through the scheduler: batch of 4, prefix cache, speculative k = 4 / 8 vs each prompt alone);
#   2. the serving identity checks with and without --batch-invariant on a random-weight model of SmolLM2-135M's
#      shape (SmolLM2's own file is too large for a device call's carry): spec_decode.py (prompt lookup k = 8, the
#      verify launches of 9 rows) and prefix_cache_ttft.py (a shared 1,000-token system prompt, concurrent chats,
#      cache vs --no-prefix-cache), each with --batch-invariant both;
#   3. the cost of the switch: rbee bench pp512 / tg128 and 32 batched sequences, with and without
#      RBEE_BATCH_INVARIANT=1 in the same call; on the random llama2-7b Q4_0 shape too when BIG=1.
#
#   here:  NO_LLAMA=1 tools/bench/gpu_session.sh pack CARRY; mkdir -p CARRY/tools/bench;
#          cp tools/bench/{batch_invariance_gpu_session.sh,spec_decode.py,prefix_cache_ttft.py,serving_common.py}
#             CARRY/tools/bench/
#   there: CARRY/tools/bench/batch_invariance_gpu_session.sh CARRY   (unpacks to /tmp/rbee-session unless done,
#          compiles the CUDA plug-in from the carried tree when missing; output in $OUT, summary.txt)
# PARTS (default "conformance spec cost ttft", run in that order) picks the parts; each step has its own timeout.
set -u
carry=${1:?usage: batch_invariance_gpu_session.sh CARRY}
here=$(cd "$(dirname "$0")" && pwd)
parts=${PARTS:-conformance spec cost ttft}
want() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
out=${OUT:-${RBEE_OUT:-/tmp/rbee-session/out}}
mkdir -p "$out"
work=/tmp/rbee-session
pack=$work/pack
t0=$(date +%s)
note() { echo "== $* (+$(( $(date +%s) - t0 )) s)" | tee -a "$out/summary.txt"; }
status=0

if [ ! -x "$pack/rbee" ]; then
  mkdir -p "$work" && tar -C "$work" -xzf "$carry/pack.tgz" || { echo "cannot unpack $carry/pack.tgz"; exit 1; }
fi
tree=$work/tree
if [ ! -d "$tree/src" ]; then mkdir -p "$tree" && tar -C "$tree" -xzf "$carry/tree.tgz"; fi
if [ ! -f "$pack/librbee_backend_cuda.so" ]; then
  note "compiling the CUDA plug-in"
  ROOT=$tree JOBS=${JOBS:-16} "$pack/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1
  tail -n 2 "$out/cuda_plugin.log"
  [ -f "$pack/librbee_backend_cuda.so" ] || { echo "the CUDA plug-in did not build"; exit 1; }
fi
export LD_LIBRARY_PATH="$pack:$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RBEE_BACKEND_PATH="$pack"
unset RBEE_BATCH_INVARIANT
note "card: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

if want conformance; then
  note "conformance *BatchInvariant*cuda*"
  timeout "${CONFORMANCE_TIMEOUT:-60}" "$pack/tests/rbee_conformance" --gtest_filter='*BatchInvariant*cuda*' \
    > "$out/conformance.txt" 2>&1 || status=1
  grep -E '^\[batch-invariance\]' "$out/conformance.txt" >> "$out/summary.txt"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests? ran' "$out/conformance.txt" | tee -a "$out/summary.txt"
fi

smol=/tmp/rbee-smollm2-135m-q4_1.gguf
if want spec || want ttft || want cost; then
  [ -f "$smol" ] || "$pack/rbee" random-model --preset smollm2-135m --type q4_1 -o "$smol" > "$out/random_model.log" 2>&1 ||
    status=1
fi
if want spec; then
  note "spec_decode.py, random SmolLM2-135M shape, prompt lookup k=8, --batch-invariant both"
  timeout "${SPEC_TIMEOUT:-60}" python3 "$here/spec_decode.py" --worker "$pack/llm-worker-rbee" --model "$smol" \
    --backend cuda --tokens 8 --requests 3 --max-tokens 96 --rounds 1 --batch-invariant both \
    --json-out "$out/spec.json" > "$out/spec.txt" 2>&1 || status=1
  sed -n '/^| round/,$p' "$out/spec.txt" | tee -a "$out/summary.txt"
fi
if want cost; then
  models=("$smol")
  if [ "${BIG:-0}" = 1 ]; then
    big=/tmp/rbee-llama2-7b-q4_0.gguf
    [ -f "$big" ] || "$pack/rbee" random-model --preset llama2-7b --type q4_0 -o "$big" >> "$out/random_model.log" 2>&1
    models+=("$big")
  fi
  for m in "${models[@]}"; do
    for inv in 0 1; do
      note "rbee bench $(basename "$m") RBEE_BATCH_INVARIANT=$inv: pp512 tg128, then 32 sequences (p 128, n 32)"
      RBEE_BATCH_INVARIANT=$inv timeout 40 "$pack/rbee" bench -m "$m" --backend cuda -p 512 -n 128 -r 2 --no-limits \
        2>&1 | grep -E '^\| *([0-9]|llama)' | tee -a "$out/summary.txt"
      RBEE_BATCH_INVARIANT=$inv timeout 40 "$pack/rbee" bench -m "$m" --backend cuda -p 128 -n 32 --batch 32 -r 1 \
        --no-limits 2>&1 | grep -E '^\| *([0-9]|llama)' | tee -a "$out/summary.txt"
    done
  done
fi
if want ttft; then
  note "prefix_cache_ttft.py, random SmolLM2-135M shape, ${CHATS:-16} chats, --batch-invariant both"
  timeout "${TTFT_TIMEOUT:-70}" python3 "$here/prefix_cache_ttft.py" --worker "$pack/llm-worker-rbee" --model "$smol" \
    --backend cuda --chats "${CHATS:-16}" --parallel "${CHATS:-16}" --turns 1 --rounds 1 --batch-invariant both \
    --json-out "$out/ttft.json" > "$out/ttft.txt" 2>&1 || status=1
  sed -n '/^| run/,$p' "$out/ttft.txt" | tee -a "$out/summary.txt"
fi
note "end, status $status"
exit $status
