#!/usr/bin/env bash
# The lead's closing SD call on merged main, in one device call: every GPU check the SD issue asks for, then the SD
# A/B rows and the compiled diffusers peer on the same card. Made from the repository root here:
#   PACK_XZ=1 NO_LLAMA=1 tools/bench/gpu_session.sh pack MAIN/.devpack-final
#   cp tools/bench/{sd_ab_call.sh,sd_final_call.sh,sd_bench_diffusers.py} MAIN/.devpack-final/
#   pip download diffusers==0.42.1 --no-deps -d MAIN/.devpack-final/whl
# There (carry [".devpack-final"]):  C=.devpack-final bash .devpack-final/sd_final_call.sh
# Steps (results in $OUT/checks, $OUT/bench: summary.txt + logs.tgz each):
#   1. sd_ab_call.sh STAGES=tiny: unpack, compile the CUDA plug-in, tiny SD 1.5 GPU vs CPU image;
#   2. the whole GPU conformance suite ('*cuda*:-*rocm*') in SHARDS gtest shards side by side, then EXTRA_FILTER
#      again under EXTRA_ENV (e.g. a kernel switch not on by default), then compute-sanitizer memcheck over
#      MEMCHECK_FILTER;
#   3. sd_ab_call.sh with BENCH_STAGES (default bench,batch,sdxl,diffusers) and the caller's CONFIGS / SDXL_CONFIGS /
#      DIFFUSERS_MODES, LIMIT counted from step 3's start.
set -u
C=${C:?C=carry folder}
out=${OUT:-/tmp/out}
here=$(dirname "$0")
t0=$SECONDS
mkdir -p "$out/checks" "$out/bench"
OUT=$out/checks STAGES=tiny KEEP_LOGS=1 bash "$here/sd_ab_call.sh"
P=/tmp/rbee-session/pack
export LD_LIBRARY_PATH=$P:$P/lib RBEE_BACKEND_PATH=$P
sum=$out/checks/summary.txt
shards=${SHARDS:-8}
for i in $(seq 0 $((shards - 1))); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "${CONFORMANCE_TIMEOUT:-180}" "$P/tests/rbee_conformance" \
    --gtest_brief=1 --gtest_filter='*cuda*:-*rocm*' > "$out/checks/conformance_shard$i.log" 2>&1 &
done
wait
cat "$out"/checks/conformance_shard*.log | awk '
  /tests from .* ran/ { ran += $2 }
  /^\[  PASSED  \]/ { passed += $4 }
  /^\[  SKIPPED \] [0-9]+ test/ { skipped += $4 }
  /^\[  FAILED  \] [0-9]+ test/ { failed += $4 }
  END { printf "conformance (whole cuda suite, %s): %d ran, %d passed, %d skipped, %d failed\n", "'"$shards"' shards", ran, passed, skipped, failed }' |
  tee -a "$sum"
grep -h '^\[  FAILED  \] [A-Z]' "$out"/checks/conformance_shard*.log | sort -u | head -20 | tee -a "$sum"
if [ -n "${EXTRA_FILTER:-}" ]; then
  env ${EXTRA_ENV:-} timeout 120 "$P/tests/rbee_conformance" --gtest_brief=1 --gtest_filter="$EXTRA_FILTER" \
    > "$out/checks/conformance_extra.log" 2>&1
  echo "conformance [${EXTRA_ENV:-}] $EXTRA_FILTER: exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$out/checks/conformance_extra.log" | tr '\n' ' ')" |
    tee -a "$sum"
fi
if [ -n "${MEMCHECK_FILTER:-}" ] && command -v compute-sanitizer > /dev/null; then
  env ${MEMCHECK_ENV:-} timeout "${MEMCHECK_TIMEOUT:-120}" compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$P/tests/rbee_conformance" --gtest_brief=1 --gtest_filter="$MEMCHECK_FILTER" > "$out/checks/memcheck.log" 2>&1
  echo "memcheck [${MEMCHECK_ENV:-}] $MEMCHECK_FILTER: exit $? $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$out/checks/memcheck.log" | tr '\n' ' ')" |
    tee -a "$sum"
fi
echo "== checks took $((SECONDS - t0)) s" | tee -a "$sum"
(cd "$out/checks" && tar czf logs.tgz --exclude=summary.txt --exclude=logs.tgz -- * &&
  find . -type f ! -name summary.txt ! -name logs.tgz -delete)
OUT=$out/bench STAGES=${BENCH_STAGES:-bench,batch,sdxl,diffusers} bash "$here/sd_ab_call.sh"
