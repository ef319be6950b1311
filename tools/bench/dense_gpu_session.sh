#!/usr/bin/env bash
# The 16-bit LLM rows of issue 10 (F16 tg128 of Llama-2-7B and Llama-3.2-1B, 7B F16 batched decode at 16 / 128
# streams): profile and A/B on one GPU machine, in one device call, against the copy bandwidth measured in the same
# run. Runs on the device from the lead's checkout, over a pack made here by
#   NO_LLAMA=1 tools/bench/gpu_session.sh pack /ABS/PATH/.devpack-dense     (+ cp this script into that folder)
# there:
#   CARRY=.devpack-dense .devpack-dense/dense_gpu_session.sh profile|ab
# (ab: with AB_ENV, CONF_FILTER and MEMCHECK_FILTER as below; the lead's final run: docs/perf-notes/gpu-llm.md,
# "16-bit rows".)
#
# profile: per model, tg128 (rbee bench, limits measured), the per-op profile (RBEE_OP_PROFILE=1: every op
#          synchronized, graphs off) and Nsight Compute's kernel durations of replayed decode steps (graphs on:
#          kernel time against step time = the step's gaps); then batched S_TG at 16 and 128 streams and the
#          per-op profile of the 128-stream step.
# ab:      conformance of the touched ops on cuda (CONF_FILTER), compute-sanitizer memcheck (MEMCHECK_FILTER), then
#          every row with the change and with its switch off (AB_ENV, e.g. RBEE_F16_ACT=0) back to back.
# Everything is logged under $OUT (or /tmp/rbee-session/out); summary.txt has one line per part.
set -u
phase=${1:?usage: dense_gpu_session.sh profile|ab}
carry=${CARRY:-.devpack-dense}
work=/tmp/rbee-dense   # not gpu_session.sh's /tmp/rbee-session: a warm machine may hold another helper's pack there
pack=$work/pack
out=${OUT:-$work/out}
models=/dev/shm/rbee-dense
[ "$(df --output=avail -k /dev/shm 2>/dev/null | tail -1)" -gt 25000000 ] 2>/dev/null || models=/tmp/rbee-dense
mkdir -p "$out" "$models"
t0=$(date +%s)
note() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }

# ---- pack, plug-in (compiled here from the carried tree unless the pack has one), models in the background ----
# Unpacked again unless this very pack was (a second call on the warm machine).
stamp_now=$(md5sum "$carry/pack.tgz" "$carry/tree.tgz" | md5sum | cut -c1-16)
if [ "$(cat "$work/stamp" 2>/dev/null)" != "$stamp_now" ]; then
  rm -rf "$work/pack" "$work/tree" && mkdir -p "$work/tree"
  tar -C "$work" -xzf "$carry/pack.tgz" && tar -C "$work/tree" -xzf "$carry/tree.tgz" && echo "$stamp_now" > "$work/stamp"
fi
export LD_LIBRARY_PATH=$pack:$pack/lib RBEE_BACKEND_PATH=$pack
rbee=$pack/rbee
note "card: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null), $(date -u +%FT%TZ)"
write() {  # preset type
  [ -f "$models/$1-$2.done" ] && return
  nice -n 5 "$rbee" random-model --preset "$1" --type "$2" -o "$models/$1-$2.gguf" >/dev/null 2>&1
  touch "$models/$1-$2.done"
}
( write llama3.2-1b f16; write llama2-7b f16; [ "$phase" = profile ] && write llama2-7b q4_0 ) &
if [ ! -f "$pack/librbee_backend_cuda.so" ]; then
  ROOT=$work/tree JOBS=16 "$pack/build_cuda_plugin.sh" > "$work/cuda_plugin.log" 2>&1   # $OUT takes 8 files
  note "CUDA plug-in: exit $?, $(tail -c 600 "$work/cuda_plugin.log")"
  [ -f "$pack/librbee_backend_cuda.so" ] || { note "no CUDA plug-in: stop"; exit 1; }
fi
wait_model() { while [ ! -f "$models/$1-$2.done" ]; do sleep 1; done; echo "$models/$1-$2.gguf"; }
row() {  # label, log name, env..., -- rbee bench args
  local label=$1 log=$2
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 120 "$rbee" bench --backend cuda -q "$@" > "$out/$log.tmp" 2>&1
  local rc=$?
  { echo "--- $label (exit $rc): ${envs[*]} rbee bench $*"; cat "$out/$log.tmp"; } >> "$out/$log.log"
  note "$label: exit $rc | $(grep -E ' (tg|pp)[0-9]+ |^\| +[0-9]+ +\| +[0-9]+ +\||limits measured|decode graphs' "$out/$log.tmp" | tr -s ' -' | tail -5 | tr '\n' ';')"
  rm -f "$out/$log.tmp"
}
ab_env=${AB_ENV:-}

case "$phase" in
profile)
  m1=$(wait_model llama3.2-1b f16)
  row "1B F16 tg128" tg -- -m "$m1" -p 0 -n 128 -r 3
  row "1B F16 op profile" profile RBEE_OP_PROFILE=1 -- -m "$m1" -p 0 -n 32 -r 1 --no-limits
  if command -v ncu >/dev/null; then
    # Kernel durations of replayed 1B decode steps (graphs on): the steps after the first few, ~2 steps' kernels.
    timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 400 --launch-count 300 \
      --csv "$rbee" bench --backend cuda -q -m "$m1" -p 0 -n 8 -r 1 --no-limits > "$out/ncu_1b.csv" 2>&1
    note "ncu 1B F16 kernel durations: exit $?"
  fi
  m7=$(wait_model llama2-7b f16)
  row "7B F16 tg128" tg -- -m "$m7" -p 0 -n 128 -r 2
  row "7B F16 op profile" profile RBEE_OP_PROFILE=1 -- -m "$m7" -p 0 -n 16 -r 1 --no-limits
  row "7B F16 batched" batched -- -m "$m7" -p 128 -n 128 -r 1 --batch 16,128 --no-limits
  row "7B F16 batched 128 op profile" profile RBEE_OP_PROFILE=1 -- -m "$m7" -p 128 -n 32 -r 1 --batch 128 --no-limits
  timeout 60 "$pack/rbee_bench_gpu_llm" --backend cuda --only matvec --types f16 --reps 5 > "$out/kernels.txt" 2>&1
  note "kernel rows: exit $?"
  m4=$(wait_model llama2-7b q4_0)
  row "7B Q4_0 batched 128 op profile" profile RBEE_OP_PROFILE=1 -- -m "$m4" -p 128 -n 32 -r 1 --batch 128 --no-limits
  ;;
ab)
  # AB_ENV: the switches that give main's behaviour for every change of the branch, e.g.
  # "RBEE_ATTN_SPLIT_MIN_CTX=0 RBEE_REDUCE_SPLIT=0"; each switch also alone on the 1B row.
  if [ -n "${CONF_FILTER:-}" ]; then
    timeout 150 "$pack/tests/rbee_conformance" --gtest_brief=1 --gtest_filter="$CONF_FILTER" > "$out/conformance.log" 2>&1
    note "conformance (exit $?): $(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$out/conformance.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]' "$out/conformance.log" | head -20 | tee -a "$out/summary.txt"
  fi
  if [ -n "${MEMCHECK_FILTER:-}" ] && command -v compute-sanitizer >/dev/null; then
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$pack/tests/rbee_conformance" --gtest_brief=1 \
      --gtest_filter="$MEMCHECK_FILTER" > "$out/memcheck.log" 2>&1
    note "memcheck (exit $?): $(grep -E '^\[  (PASSED|FAILED)  \]|ERROR SUMMARY' "$out/memcheck.log" | tr '\n' ' ')"
  fi
  m1=$(wait_model llama3.2-1b f16)
  row "1B F16 tg128 new" tg -- -m "$m1" -p 0 -n 128 -r 3
  row "1B F16 tg128 base ($ab_env)" tg $ab_env -- -m "$m1" -p 0 -n 128 -r 3
  for sw in $ab_env; do row "1B F16 tg128 new but $sw" tg "$sw" -- -m "$m1" -p 0 -n 128 -r 3 --no-limits; done
  row "1B F16 tg128 new + RBEE_PDL=1" tg RBEE_PDL=1 -- -m "$m1" -p 0 -n 128 -r 3 --no-limits
  m7=$(wait_model llama2-7b f16)
  row "7B F16 tg128 new" tg -- -m "$m7" -p 0 -n 128 -r 2
  row "7B F16 tg128 base ($ab_env)" tg $ab_env -- -m "$m7" -p 0 -n 128 -r 2
  row "7B F16 batched new" batched -- -m "$m7" -p 128 -n 128 -r 1 --batch 16,64,128 --no-limits
  row "7B F16 batched base ($ab_env)" batched $ab_env -- -m "$m7" -p 128 -n 128 -r 1 --batch 16,64,128 --no-limits
  row "7B F16 batched 128 op profile" profile RBEE_OP_PROFILE=1 -- -m "$m7" -p 128 -n 32 -r 1 --batch 128 --no-limits
  timeout 60 "$pack/rbee_bench_gpu_llm" --backend cuda --only matvec --types f16 --reps 5 > "$out/kernels.txt" 2>&1
  note "kernel rows: exit $?"
  if command -v ncu >/dev/null; then
    timeout 60 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 400 --launch-count 300 \
      --csv "$rbee" bench --backend cuda -q -m "$m1" -p 0 -n 8 -r 1 --no-limits > "$out/ncu_1b.csv" 2>&1
    note "ncu 1B F16 kernel durations: exit $?"
  fi
  row "1B F16 op profile new" profile RBEE_OP_PROFILE=1 -- -m "$m1" -p 0 -n 32 -r 1 --no-limits
  ;;
*) echo "dense_gpu_session.sh: unknown phase $phase" >&2; exit 2 ;;
esac
note end
