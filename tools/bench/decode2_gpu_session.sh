#!/usr/bin/env bash
# Issue 10's single-stream decode rows (1B / 7B F16 tg128 first, and every other tg row for PDL's default): one GPU
# call each, against the copy bandwidth measured in the same process. Runs on the device from the lead's checkout,
# over a pack made here (the CUDA plug-in compiled here by scripts/build_cuda_plugin.sh, so nothing compiles there):
#   NO_LLAMA=1 tools/bench/gpu_session.sh pack /ABS/MAIN/.devpack-decode2 && cp this script into that folder
# there:
#   CARRY=.devpack-decode2 .devpack-decode2/decode2_gpu_session.sh base|ab
# or, after tools/bench/gpu_session.sh prepare on the same machine (its pack and models, nothing unpacked or written):
#   PACK=/tmp/rbee-session/pack MODELS=/tmp/rbee-models AB_ENV=... tools/bench/decode2_gpu_session.sh ab
#
# base: every tg row (1B F16 / Q4_0, 7B F16 / Q4_0 / Q4_K / Q8_0) with the default and with PDL flipped (RBEE_PDL),
#       back to back; the per-op profile of 1B F16 decode; the F16 matvec kernel rows; the batched rows of 7B F16 and
#       Q4_0 (16 / 64 / 128 streams) with PDL flipped, while the time limit (BUDGET_S, default 170) allows.
# ab:   conformance of the touched ops (CONF_FILTER) and compute-sanitizer memcheck (MEMCHECK_FILTER), then every tg
#       row new vs AB_ENV (the switches back to main's behaviour) back to back, each switch alone on the F16 rows,
#       the per-op profile of 1B F16 again, then the batched rows new vs AB_ENV while time allows.
# Everything is logged under $OUT; summary.txt has one line per part.
set -u
phase=${1:?usage: decode2_gpu_session.sh base|ab}
carry=${CARRY:-.devpack-decode2}
work=/tmp/rbee-decode2
pack=$work/pack
out=${OUT:-$work/out}
# Models: MODELS, else gpu_session.sh prepare's folder when it is there (the lead's final run: same files, nothing to
# write), else /dev/shm (or /tmp) written here in the background.
models=${MODELS:-/dev/shm/rbee-decode2}
[ -z "${MODELS:-}" ] && [ -d /tmp/rbee-models ] && models=/tmp/rbee-models
[ "$models" != /dev/shm/rbee-decode2 ] || [ "$(df --output=avail -k /dev/shm 2>/dev/null | tail -1)" -gt 40000000 ] 2>/dev/null ||
  models=/tmp/rbee-decode2-models
mkdir -p "$out" "$models"
t0=$(date +%s)
budget=${BUDGET_S:-170}
note() { echo "[$(($(date +%s) - t0)) s] $*" | tee -a "$out/summary.txt"; }
left() { echo $((budget - ($(date +%s) - t0))); }

if [ -n "${PACK:-}" ]; then  # a pack already unpacked, e.g. gpu_session.sh prepare's /tmp/rbee-session/pack
  pack=$PACK
else
  stamp_now=$(md5sum "$carry/pack.tgz" | cut -c1-16)
  if [ "$(cat "$work/stamp" 2>/dev/null)" != "$stamp_now" ]; then
    rm -rf "$work/pack" && mkdir -p "$work"
    tar -C "$work" -xzf "$carry/pack.tgz" && echo "$stamp_now" > "$work/stamp"
  fi
fi
export LD_LIBRARY_PATH=$pack:$pack/lib RBEE_BACKEND_PATH=$pack
rbee=$pack/rbee
note "card: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null), $(date -u +%FT%TZ)"
[ -f "$pack/librbee_backend_cuda.so" ] || { note "no CUDA plug-in in the pack: stop"; exit 1; }
write() {  # preset type (a file already there, e.g. from gpu_session.sh prepare, is taken as it is)
  [ -f "$models/$1-$2.done" ] && return
  [ -f "$models/$1-$2.gguf" ] && { touch "$models/$1-$2.done"; return; }
  nice -n 10 "$rbee" random-model --preset "$1" --type "$2" -o "$models/$1-$2.gguf" >/dev/null 2>&1
  touch "$models/$1-$2.done"
}
# Q4_K last: its quantizer is the slowest (the first call waited minutes for it).
( write llama3.2-1b f16; write llama2-7b f16; write llama3.2-1b q4_0; write llama2-7b q4_0; write llama2-7b q8_0
  write llama2-7b q4_k ) &
# The model's path once written; empty (the caller skips its rows) if it is not there within the time left.
wait_model() {
  while [ ! -f "$models/$1-$2.done" ]; do [ "$(left)" -gt 15 ] || return 0; sleep 0.5; done
  echo "$models/$1-$2.gguf"
}
row() {  # label, log name, env..., -- rbee bench args
  local label=$1 log=$2
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 120 "$rbee" bench --backend cuda -q "$@" > "$out/$log.tmp" 2>&1
  local rc=$?
  { echo "--- $label (exit $rc): ${envs[*]} rbee bench $*"; cat "$out/$log.tmp"; } >> "$out/$log.log"
  note "$label: exit $rc | $(grep -E ' (tg|pp)[0-9]+ |^\| +[0-9]+ +\| +[0-9]+ +\||limits measured' "$out/$log.tmp" | tr -s ' -' | tail -5 | tr '\n' ';')"
  rm -f "$out/$log.tmp"
}
# tg128 of one model: A then B then A again (-r 2 each), so drift shows.
tg_ab() {  # label preset type envA envB [limits]
  local label=$1 m envA=$4 envB=$5
  m=$(wait_model "$2" "$3")
  [ -n "$m" ] || { note "$label: model not written in time, skipped"; return; }
  local lim=--no-limits; [ "${6:-}" = limits ] && lim=
  row "$label tg128 [$envA]" tg $envA -- -m "$m" -p 0 -n 128 -r 2 $lim
  row "$label tg128 [$envB]" tg $envB -- -m "$m" -p 0 -n 128 -r 2 --no-limits
  [ "${7:-}" = once ] || row "$label tg128 [$envA] again" tg $envA -- -m "$m" -p 0 -n 128 -r 2 --no-limits
}

case "$phase" in
base)
  # envA/envB: main's default (PDL off) vs RBEE_PDL=1. `env` needs one argument: RBEE_NONE=0 is a no-op variable.
  tg_ab "1B F16" llama3.2-1b f16 RBEE_NONE=0 RBEE_PDL=1 limits
  tg_ab "7B F16" llama2-7b f16 RBEE_NONE=0 RBEE_PDL=1 limits
  m1=$(wait_model llama3.2-1b f16)
  row "1B F16 op profile" profile RBEE_OP_PROFILE=1 -- -m "$m1" -p 0 -n 32 -r 1 --no-limits
  tg_ab "1B Q4_0" llama3.2-1b q4_0 RBEE_NONE=0 RBEE_PDL=1 "" once
  tg_ab "7B Q4_0" llama2-7b q4_0 RBEE_NONE=0 RBEE_PDL=1 "" once
  tg_ab "7B Q4_K" llama2-7b q4_k RBEE_NONE=0 RBEE_PDL=1 "" once
  tg_ab "7B Q8_0" llama2-7b q8_0 RBEE_NONE=0 RBEE_PDL=1 "" once
  if [ "$(left)" -gt 45 ]; then
    timeout 40 "$pack/rbee_bench_gpu_llm" --backend cuda --only matvec --types f16 --reps 5 > "$out/kernels.txt" 2>&1
    note "kernel rows: exit $?"
  fi
  m7=$(wait_model llama2-7b f16)
  m4=$(wait_model llama2-7b q4_0)
  for e in RBEE_NONE=0 RBEE_PDL=1; do
    [ "$(left)" -gt 25 ] || { note "time: batched 7B F16 [$e] skipped"; continue; }
    row "7B F16 batched [$e]" batched $e -- -m "$m7" -p 128 -n 128 -r 1 --batch 16,64,128 --no-limits
  done
  for e in RBEE_NONE=0 RBEE_PDL=1; do
    [ "$(left)" -gt 20 ] || { note "time: batched 7B Q4_0 [$e] skipped"; continue; }
    row "7B Q4_0 batched [$e]" batched $e -- -m "$m4" -p 128 -n 128 -r 1 --batch 16,64,128 --no-limits
  done
  ;;
ab)
  ab_env=${AB_ENV:?AB_ENV: the switches back to the behaviour of main}
  if [ -n "${CONF_FILTER:-}" ]; then
    timeout 100 "$pack/tests/rbee_conformance" --gtest_brief=1 --gtest_filter="$CONF_FILTER" > "$out/conformance.log" 2>&1
    note "conformance (exit $?): $(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$out/conformance.log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]' "$out/conformance.log" | head -20 | tee -a "$out/summary.txt"
  fi
  if [ -n "${MEMCHECK_FILTER:-}" ] && command -v compute-sanitizer >/dev/null; then
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$pack/tests/rbee_conformance" --gtest_brief=1 \
      --gtest_filter="$MEMCHECK_FILTER" > "$out/memcheck.log" 2>&1
    note "memcheck (exit $?): $(grep -E '^\[  (PASSED|FAILED)  \]|ERROR SUMMARY' "$out/memcheck.log" | tr '\n' ' ')"
  fi
  tg_ab "1B F16" llama3.2-1b f16 RBEE_NONE=0 "$ab_env" limits
  tg_ab "7B F16" llama2-7b f16 RBEE_NONE=0 "$ab_env" limits
  m1=$(wait_model llama3.2-1b f16)
  for sw in $ab_env; do row "1B F16 tg128 new but $sw" tg "$sw" -- -m "$m1" -p 0 -n 128 -r 2 --no-limits; done
  row "1B F16 op profile new" profile RBEE_OP_PROFILE=1 -- -m "$m1" -p 0 -n 32 -r 1 --no-limits
  m7=$(wait_model llama2-7b f16)
  for sw in $ab_env; do row "7B F16 tg128 new but $sw" tg "$sw" -- -m "$m7" -p 0 -n 128 -r 2 --no-limits; done
  for t in "1B Q4_0:llama3.2-1b:q4_0" "7B Q4_0:llama2-7b:q4_0" "7B Q8_0:llama2-7b:q8_0" "7B Q4_K:llama2-7b:q4_k"; do
    IFS=: read -r label preset type <<< "$t"
    [ "$(left)" -gt 20 ] || { note "time: $label skipped"; continue; }
    m=$(wait_model "$preset" "$type")
    [ -n "$m" ] || { note "$label: model not written in time, skipped"; continue; }
    row "$label tg128 new" tg -- -m "$m" -p 0 -n 128 -r 2 --no-limits
    row "$label tg128 base" tg $ab_env -- -m "$m" -p 0 -n 128 -r 2 --no-limits
  done
  m7=$(wait_model llama2-7b f16)
  for e in RBEE_NONE=0 "$ab_env"; do
    [ "$(left)" -gt 25 ] || { note "time: batched 7B F16 [$e] skipped"; continue; }
    row "7B F16 batched [$e]" batched $e -- -m "$m7" -p 128 -n 128 -r 1 --batch 16,64,128 --no-limits
  done
  m4=$(wait_model llama2-7b q4_0)
  for e in RBEE_NONE=0 "$ab_env"; do
    [ -n "$m4" ] && [ "$(left)" -gt 20 ] || { note "time: batched 7B Q4_0 [$e] skipped"; continue; }
    row "7B Q4_0 batched [$e]" batched $e -- -m "$m4" -p 128 -n 128 -r 1 --batch 16,64,128 --no-limits
  done
  ;;
*) echo "decode2_gpu_session.sh: unknown phase $phase" >&2; exit 2 ;;
esac
note end
