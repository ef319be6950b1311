#!/usr/bin/env bash
# The sanitizer run CI does on every commit (.ci/run): the `dev` preset (AddressSanitizer + UndefinedBehaviorSanitizer,
# with LeakSanitizer on, Debug at -O1) builds only the targets its tests need and runs the ctest label `sanitize`:
# every unit, server, SD and API test (the workers through real clients included) except the whole-model and
# reference-table cases that tests/sanitize_selection.cmake leaves to the optimized build (a few of them stay as
# representatives). The op conformance suite, the golden and the CLI tests run in the optimized build
# (scripts/test.sh); under ASan they would double CI's time.
#   scripts/test_sanitized.sh [ctest args...]      RBEE_JOBS (default: every CPU)
#   RBEE_SANITIZE_STEP=build   only the dev build (CI starts it early, in the background at low priority)
#   RBEE_SANITIZE_STEP=test    only the tests (the build is then a no-op check)
# Suppressions (tools/sanitizers/*.supp) name third-party code only, each entry with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${RBEE_JOBS:-$(nproc)}
supp="$PWD/tools/sanitizers"
# halt_on_error: the first report fails the test; detect_leaks: LeakSanitizer at every process exit (test binaries
# and each worker the API tests start and stop).
# allocator_may_return_null: an impossible request (CachingAllocator.OutOfMemoryIsAnErrorNotACrash asks for 2^62
# bytes) returns null as in the optimized build, so the engine's out-of-memory error path is what gets tested.
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:allocator_may_return_null=1:abort_on_error=0:strict_string_checks=1:check_initialization_order=1:detect_invalid_pointer_pairs=0"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp"
step=${RBEE_SANITIZE_STEP:-all}
t0=$(date +%s)
cmake --preset dev >/dev/null
cmake --build build/dev -j "$jobs" --target rbee_unit_tests rbee_server_tests rbee_sd_tests llm-worker-rbee sd-worker-rbee
t1=$(date +%s)
if [ "$step" = build ]; then
  echo "test_sanitized.sh: dev build $(( t1 - t0 )) s (build step only)"
  exit 0
fi
count=$(cd build/dev && ctest -N -L '^sanitize$' "$@" | sed -n 's/^Total Tests: //p')
echo "test_sanitized.sh: dev build $(( t1 - t0 )) s; ASan + UBSan + LSan, ctest label sanitize: $count tests"
rc=0
# A test that fails is run once more (--repeat until-pass:2): the sanitizer build is several times slower, so the
# latency-bound API tests can miss a bound on a loaded machine; the failed attempt stays in the log, and a sanitizer
# report on a code path fails it again.
(cd build/dev && ctest -j "$jobs" --output-on-failure --timeout 1800 --repeat until-pass:2 -L '^sanitize$' "$@") || rc=$?
echo "test_sanitized.sh: $count tests in $(( $(date +%s) - t1 )) s, exit $rc (build $(( t1 - t0 )) s)"
exit "$rc"
