#!/usr/bin/env bash
# One budget-aware GPU call for the SD speed work (issue 18), run from the repository root on the device machine with
# the pack in $P (a folder of the lead's checkout, carried). Make the pack here, in the worktree to measure:
#   P=MAIN/.devpack-NAME; scripts/pack_build.sh build/ci $P && scripts/pack_cuda_kit.sh build/ci $P &&
#   tar -czf $P/tree.tgz src include cmake && cp tools/bench/sd_bench_diffusers.py tools/bench/sd_speed_call.sh $P/ &&
#   mkdir -p $P/whl && cp diffusers-0.42.1-py3-none-any.whl $P/whl/      # (python3 -m pip download --no-deps)
# There: P=.devpack-NAME LIMIT=400 STAGES=... bash .devpack-NAME/sd_speed_call.sh   (logs and summary.txt in $OUT)
# The CUDA plug-in is compiled there first, from the pack's tree (PREBUILT_PLUGIN=1: the pack's own, built here with
# scripts/build_cuda_plugin.sh; a second call on the same warm machine reuses /tmp/sdspeed-plugin). STAGES (comma
# list, default all but sdxl): conformance (the SD ops' cases on cuda + compute-sanitizer memcheck), tiny (GPU-vs-CPU
# images of the tiny SD 1.5 pipeline, UNet step graphs on), bench (rbee_sd_bench SD 1.5 512x512 20 steps, UNet step
# graphs off then on), profile (per-layer profile of one warm image), sdxl (rbee SDXL 1024x1024 20 steps, then the
# diffusers SDXL peer eager + compiled if time is left), diffusers (SD 1.5 eager + torch.compile in what is left of
# $LIMIT seconds; the compile's first call may not finish: then it says so).
set -u
P=${P:-.devpack-sd-speed}
LIMIT=${LIMIT:-420}
STAGES=${STAGES:-conformance,tiny,bench,profile,diffusers}
out=${OUT:-/tmp/out}
mkdir -p "$out"
has() { [[ ",$STAGES," == *",$1,"* ]]; }
export LD_LIBRARY_PATH=$PWD/$P:$PWD/$P/lib RBEE_BACKEND_PATH=$PWD/$P
note() { echo "== [$SECONDS s] $*" | tee -a "$out/summary.txt"; }
# The CUDA plug-in of the pack's tree, compiled here (nvcc on every core), against the pack's engine; kept in /tmp for
# a second call on the same warm machine.
if [ "${PREBUILT_PLUGIN:-0}" = 1 ] && [ -f "$P/librbee_backend_cuda.so" ]; then
  note "plug-in: the pack's own (compiled with scripts/build_cuda_plugin.sh before packing)"
elif [ -f /tmp/sdspeed-plugin/librbee_backend_cuda.so ] && [ /tmp/sdspeed-plugin/librbee_backend_cuda.so -nt "$P/tree.tgz" ] &&
   cmp -s /tmp/sdspeed-plugin/tree.tgz "$P/tree.tgz"; then
  cp /tmp/sdspeed-plugin/librbee_backend_cuda.so "$P/"
  note "plug-in: reused from the warm machine"
else
  rm -rf /tmp/sdspeed-tree && mkdir -p /tmp/sdspeed-tree && tar -C /tmp/sdspeed-tree -xzf "$P/tree.tgz"
  ROOT=/tmp/sdspeed-tree JOBS=$(nproc) "$P/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1
  note "plug-in: $(tail -n 1 "$out/cuda_plugin.log")"
  [ -f "$P/librbee_backend_cuda.so" ] || exit 1
  mkdir -p /tmp/sdspeed-plugin && cp "$P/librbee_backend_cuda.so" "$P/tree.tgz" /tmp/sdspeed-plugin/
fi
note "card: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader)"
tok=tests/data/tiny_sd/sd15/tokenizer
bench() { "$P/rbee_sd_bench" --random-sd15 --tokenizer $tok --backend cuda --f16 --steps 20 --width 512 --height 512 "$@"; }
if has conformance; then
  timeout 60 "$P/tests/rbee_conformance" --gtest_brief=1 --gtest_filter="${CONFORMANCE_FILTER:-*Conv2dFused*/cuda*:*GroupNorm*/cuda*:*Conv2dConformance*/cuda*:*Attention*/cuda*:*Matmul*/cuda*:*Linear*/cuda*}" \
    > "$out/conformance.log" 2>&1
  note "conformance exit $?: $(grep -E '^\[  (PASSED|FAILED) |tests from' "$out/conformance.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$out/conformance.log" | head -20 | tee -a "$out/summary.txt"
  if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$P/tests/rbee_conformance" --gtest_brief=1 \
      --gtest_filter="${MEMCHECK_FILTER:-*Conv2dFused*/cuda*k3*:*Conv2dFused*/cuda*k1*:*GroupNormSilu*/cuda_f16*}" > "$out/memcheck.log" 2>&1
    note "memcheck exit $?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$out/memcheck.log" | tr '\n' ' ')"
  fi
fi
if has tiny; then
  for size in ${TINY_SIZES:-128 256}; do
    "$P/rbee_sd_bench" --model tests/data/tiny_sd/sd15 --backend cuda --f16 --compare-cpu --steps 4 --width $size \
      --height $size 2>&1 | grep compare-cpu | tee -a "$out/summary.txt"
  done
  "$P/rbee_sd_bench" --model tests/data/tiny_sd/sd15 --backend cuda --compare-cpu --steps 4 --tol-mean 1e-3 \
    --tol-max 1e-2 --width 128 --height 128 2>&1 | grep compare-cpu | tee -a "$out/summary.txt"
  note "tiny checks done"
fi
if has bench; then
  # BASE_ENV (e.g. "RBEE_ATTN_FLASH=0"): the baseline's switches, run first with the same arguments (A/B in one call);
  # SKIP_MAIN=1 skips the run of the session-3 code by its switches (implicit-GEMM convolutions, matmul + adds).
  if [ -n "${BASE_ENV:-}" ]; then
    env $BASE_ENV "$P/rbee_sd_bench" --random-sd15 --tokenizer $tok --backend cuda --f16 --steps 20 --width 512 \
      --height 512 --runs 3 --warmup 1 > "$out/bench_rbee_base.txt" 2>&1
    grep -E "^run|result|first|graphs" "$out/bench_rbee_base.txt" | sed "s/^/base ($BASE_ENV): /" | tee -a "$out/summary.txt"
  fi
  if [ "${SKIP_MAIN:-0}" != 1 ]; then
    RBEE_CONV_IGEMM=1 RBEE_SD_LINEAR_FUSED=0 bench --runs 3 --warmup 1 --no-unet-graph > "$out/bench_rbee_main.txt" 2>&1
    grep -E "^(run|result)" "$out/bench_rbee_main.txt" | sed 's/^/as main (igemm, unfused linear, eager): /' | tee -a "$out/summary.txt"
  fi
  if [ "${SKIP_EAGER:-0}" != 1 ]; then
    bench --runs 3 --warmup 1 --no-unet-graph > "$out/bench_rbee_eager.txt" 2>&1
    grep -E "^(run|result)" "$out/bench_rbee_eager.txt" | sed 's/^/eager steps: /' | tee -a "$out/summary.txt"
  fi
  bench --runs 3 --warmup 1 > "$out/bench_rbee.txt" 2>&1
  grep -E "device|^run|result|load|first|graphs" "$out/bench_rbee.txt" | tee -a "$out/summary.txt"
  for b in ${BATCH:-}; do
    if [ -n "${BASE_ENV:-}" ] && [ "${BASE_BATCH:-1}" = 1 ]; then
      env $BASE_ENV "$P/rbee_sd_bench" --random-sd15 --tokenizer $tok --backend cuda --f16 --steps 20 --width 512 \
        --height 512 --runs 2 --warmup 1 --batch "$b" > "$out/bench_rbee_base_batch$b.txt" 2>&1
      grep -E "^run|result" "$out/bench_rbee_base_batch$b.txt" | sed "s/^/base batch $b: /" | tee -a "$out/summary.txt"
    fi
    bench --runs 2 --warmup 1 --batch "$b" > "$out/bench_rbee_batch$b.txt" 2>&1
    grep -E "^run|result|graphs" "$out/bench_rbee_batch$b.txt" | sed "s/^/batch $b: /" | tee -a "$out/summary.txt"
  done
  note "rbee bench done"
fi
if has profile; then
  RBEE_OP_PROFILE=1 bench --runs 1 --warmup 1 > "$out/profile_f16.txt" 2>&1
  grep -E "kind|profile:" "$out/profile_f16.txt" | head -14 | tee -a "$out/summary.txt"
  if [ -n "${BASE_ENV:-}" ] && [ "${PROFILE_BASE:-0}" = 1 ]; then
    env $BASE_ENV RBEE_OP_PROFILE=1 "$P/rbee_sd_bench" --random-sd15 --tokenizer $tok --backend cuda --f16 --steps 20 \
      --width 512 --height 512 --runs 1 --warmup 1 > "$out/profile_f16_base.txt" 2>&1
    grep -E "kind|profile:" "$out/profile_f16_base.txt" | head -14 | sed 's/^/base: /' | tee -a "$out/summary.txt"
  fi
  note "profile done"
fi
if has sdxl; then
  "$P/rbee_sd_bench" --random-sdxl --tokenizer $tok --tokenizer-2 tests/data/tiny_sd/sdxl/tokenizer_2 --backend cuda \
    --f16 --steps 20 --width 1024 --height 1024 --guidance 5 --runs 2 --warmup 1 > "$out/bench_rbee_sdxl.txt" 2>&1
  grep -E "^run|result|load|graphs" "$out/bench_rbee_sdxl.txt" | sed 's/^/sdxl: /' | tee -a "$out/summary.txt"
  note "rbee sdxl done"
fi
if has diffusers || has sdxl_diffusers; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$P"/whl/*.whl &&
    export PYTHONPATH=/tmp/site
  cp "$P/sd_bench_diffusers.py" tools/bench/sd_bench_diffusers.py  # this branch's version (--modes)
fi
if has diffusers; then
  left=$((LIMIT - SECONDS - 3))
  [ -n "${DIFFUSERS_S:-}" ] && has sdxl_diffusers && left=$DIFFUSERS_S
  note "diffusers with ${left} s left"
  PYTHONUNBUFFERED=1 timeout "$left" python3 tools/bench/sd_bench_diffusers.py --steps 20 --width 512 --height 512 \
    --runs "${DIFFUSERS_RUNS:-3}" --modes eager,compiled --compile-warmup 1 > "$out/bench_diffusers.txt" 2>&1
  note "diffusers exit $?"
  grep -vi "warn" "$out/bench_diffusers.txt" | tail -15 | tee -a "$out/summary.txt"
fi
if has sdxl_diffusers; then
  left=$((LIMIT - SECONDS - 3))
  note "diffusers sdxl with ${left} s left"
  timeout "$left" python3 tools/bench/sd_bench_diffusers.py --sdxl --steps 20 --width 1024 --height 1024 --guidance 5 \
    --runs 2 --modes eager,compiled --compile-warmup 1 > "$out/bench_diffusers_sdxl.txt" 2>&1
  note "diffusers sdxl exit $?"
  grep -vi "warn" "$out/bench_diffusers_sdxl.txt" | tail -15 | tee -a "$out/summary.txt"
fi
note "done"
