#!/usr/bin/env bash
# One GPU session for issue 15 (serving at scale), run from the repository root of the device's tree:
#   1. the cost of verifying k drafts against one decode step on a random Llama-2-7B shape (rbee bench --verify),
#      1 and 16 sequences;
#   2. speculative decoding's speed-up with prompt lookup on SmolLM2 (real weights, real acceptance) on the GPU,
#      with the greedy answers compared to plain decoding (the script fails when one differs), and the same
#      comparison on the random 7B shape (greedy identity only: acceptance means nothing on random weights);
#   3. TTFT p50 with a shared 1,000-token system prompt and 32 concurrent chats, with and without the prefix
#      cache, on SmolLM2 and on the random 7B shape (answers compared between the two modes as well).
#
#   here:  tools/bench/gpu_session.sh pack MAIN/.devpack-serving   (build/ci packed + CUDA kit + llama.cpp
#          source + src/include/cmake; rbee and llm-worker-rbee must be built in build/ci)
#   there: tools/bench/serving_gpu_session.sh .devpack-serving   (unpacks pack.tgz (and tree.tgz) to
#          /tmp/rbee-session unless gpu_session.sh prepare did already, compiles the CUDA plug-in there when it is
#          missing, runs). The device's tree must hold this script and
#          tools/bench/{spec_decode,prefix_cache_ttft,serving_common}.py (main once serving is merged).
#   or:    [SMOL=path/to/SmolLM2-135M-Instruct.Q4_1.gguf] tools/bench/serving_gpu_session.sh PACK_DIR
#          (a scripts/pack_build.sh folder holding rbee, llm-worker-rbee and librbee_backend_cuda.so)
#
# Python standard library only. Logs and JSON go to $OUT (the device tool's result folder), else $RBEE_OUT, else
# serving_gpu_out; summary.txt collects the tables. SmolLM2 (94 MiB) does not fit a device call's 64 MiB carry:
# its rows run only where SMOL (default models/SmolLM2-135M-Instruct.Q4_1.gguf) exists; the 7B rows need nothing
# but the pack (rbee random-model writes the model under /tmp). PARTS (default "verify spec ttft big") picks the
# parts ("big": the random 7B rows of spec and ttft; "invariant": below) and ROUNDS (default 2) the TTFT rounds, to
# fit a device call's time limit (SPEC_ROUNDS: the spec rounds; TTFT_ARGS: more prefix_cache_ttft.py arguments).
# Batch invariance (docs/DESIGN.md): BATCH_INVARIANT (off, on or both; default both) is passed to spec_decode.py and
# prefix_cache_ttft.py (--batch-invariant), which then compare answers within each setting; part "invariant" runs
# the conformance cases tests/conformance/test_batch_invariance.cpp and test_batch_invariant_model.cpp on cuda (the
# pack's tests/rbee_conformance). Without SmolLM2's file, the spec and TTFT identity rows run on a random-weight
# model of SmolLM2-135M's shape (rbee random-model --preset smollm2-135m --type q4_1; speed-ups mean nothing there).
set -u
parts=${PARTS:-verify spec ttft big}
bi=${BATCH_INVARIANT:-both}
rounds=${ROUNDS:-2}
want() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
arg=${1:-.devpack}
out=${OUT:-${RBEE_OUT:-serving_gpu_out}}
mkdir -p "$out"
tree=$PWD  # the sources the CUDA plug-in compiles from
if [ -f "$arg/pack.tgz" ]; then  # a gpu_session.sh pack folder
  pack=/tmp/rbee-session/pack
  if [ ! -x "$pack/llm-worker-rbee" ]; then
    mkdir -p /tmp/rbee-session && tar -C /tmp/rbee-session -xzf "$arg/pack.tgz" || { echo "cannot unpack $arg/pack.tgz"; exit 1; }
  fi
  # A pack made in a helper's worktree carries that worktree's src/include/cmake (gpu_session.sh pack).
  if [ -f "$arg/tree.tgz" ]; then
    [ -d /tmp/rbee-session/tree/src ] || { mkdir -p /tmp/rbee-session/tree && tar -C /tmp/rbee-session/tree -xzf "$arg/tree.tgz"; }
    tree=/tmp/rbee-session/tree
  fi
else
  pack=$arg
fi
for f in rbee llm-worker-rbee; do
  [ -x "$pack/$f" ] || { echo "serving_gpu_session.sh: $pack/$f is missing (pack build/ci with rbee and llm-worker-rbee built)"; exit 1; }
done
if [ ! -f "$pack/librbee_backend_cuda.so" ]; then
  [ -x "$pack/build_cuda_plugin.sh" ] || { echo "serving_gpu_session.sh: no CUDA plug-in in $pack and no build_cuda_plugin.sh (scripts/pack_cuda_kit.sh)"; exit 1; }
  echo "== compiling the CUDA plug-in ($pack/build_cuda_plugin.sh)"
  ROOT=$tree JOBS=${JOBS:-16} "$pack/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1
  tail -n 3 "$out/cuda_plugin.log"
  [ -f "$pack/librbee_backend_cuda.so" ] || { echo "serving_gpu_session.sh: the CUDA plug-in did not build"; exit 1; }
fi
export LD_LIBRARY_PATH="$pack:$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RBEE_BACKEND_PATH="$pack"
status=0
note() { echo "== $*" | tee -a "$out/summary.txt"; }
smol=models/SmolLM2-135M-Instruct.Q4_1.gguf
big=/tmp/rbee-llama2-7b-q4_0.gguf

note "card: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
if want big || want verify; then
  [ -f "$big" ] || "$pack/rbee" random-model --preset llama2-7b --type q4_0 -o "$big" > "$out/random_model.log" 2>&1 ||
    status=1
fi
if want invariant; then
  note "batch invariance: conformance cases on cuda (RBEE_BATCH_INVARIANT on and off)"
  if [ -x "$pack/tests/rbee_conformance" ]; then
    "$pack/tests/rbee_conformance" --gtest_filter='*BatchInvariant*cuda*' > "$out/invariance_conformance.txt" 2>&1 ||
      status=1
    grep -E '^\[batch-invariance\]|^\[  (PASSED|FAILED|SKIPPED) ' "$out/invariance_conformance.txt" |
      tee -a "$out/summary.txt"
  else
    note "SKIPPED: $pack/tests/rbee_conformance is missing"
  fi
fi
if want verify; then
  for b in 1 16; do
    note "verify cost, llama2-7b q4_0 random, $b sequence(s), context 512"
    "$pack/rbee" bench -m "$big" --backend cuda --verify 1,2,4,8 --verify-batch $b -p 512 -r 20 2>&1 |
      tee -a "$out/summary.txt" || status=1
  done
fi
smol=${SMOL:-$smol}
smol_kind="SmolLM2"
if [ ! -f "$smol" ]; then
  note "$smol is missing: SmolLM2 rows run on a random-weight model of its shape (identity only)"
  smol=/tmp/rbee-smollm2-135m-q4_1.gguf
  smol_kind="random SmolLM2-135M shape"
  [ -f "$smol" ] || "$pack/rbee" random-model --preset smollm2-135m --type q4_1 -o "$smol" >> "$out/random_model.log" 2>&1 ||
    status=1
fi
models=("$smol")
want big && models+=("$big")
if want spec; then
  note "speculative decoding, prompt lookup, $smol_kind on cuda (--batch-invariant $bi)"
  python3 tools/bench/spec_decode.py --worker "$pack/llm-worker-rbee" --model "$smol" --backend cuda --tokens 2,4,8 \
    --rounds "${SPEC_ROUNDS:-2}" --batch-invariant "$bi" --json-out "$out/spec_smollm2.json" > "$out/spec_smollm2.txt" 2>&1 || status=1
  sed -n '/^| round/,$p' "$out/spec_smollm2.txt" | tee -a "$out/summary.txt"
fi
# Greedy identity on the GPU without SmolLM2: prompt lookup on the random 7B (answers are noise and acceptance
# says nothing, but every speculative answer must equal the plain one; the script fails when one differs).
if want spec && want big; then
  note "speculative decoding, greedy identity, llama2-7b q4_0 random on cuda (--batch-invariant $bi)"
  python3 tools/bench/spec_decode.py --worker "$pack/llm-worker-rbee" --model "$big" --backend cuda --tokens 4 \
    --requests 3 --max-tokens 96 --rounds 1 --batch-invariant "$bi" --json-out "$out/spec_7b.json" > "$out/spec_7b.txt" 2>&1 || status=1
  sed -n '/^| round/,$p' "$out/spec_7b.txt" | tee -a "$out/summary.txt"
fi
if want ttft; then
  for m in "${models[@]}"; do
    note "prefix cache TTFT, $(basename "$m") on cuda (--batch-invariant $bi)"
    python3 tools/bench/prefix_cache_ttft.py --worker "$pack/llm-worker-rbee" --model "$m" --backend cuda \
      --rounds "$rounds" --batch-invariant "$bi" ${TTFT_ARGS:-} --json-out "$out/ttft_$(basename "$m" .gguf).json" > "$out/ttft_$(basename "$m" .gguf).txt" \
      2>&1 || status=1
    sed -n '/^| run/,$p' "$out/ttft_$(basename "$m" .gguf).txt" | tee -a "$out/summary.txt"
  done
fi
exit $status
