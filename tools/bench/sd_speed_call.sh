#!/usr/bin/env bash
# One budget-aware GPU call for the SD speed work (issue 18), run from the repository root on the device machine with
# the pack in $P (a folder of the lead's checkout, carried). Make the pack here, in the worktree to measure:
#   P=MAIN/.devpack-NAME; scripts/pack_build.sh build/ci $P && scripts/pack_cuda_kit.sh build/ci $P &&
#   tar -czf $P/tree.tgz src include cmake && cp tools/bench/sd_bench_diffusers.py tools/bench/sd_speed_call.sh $P/ &&
#   mkdir -p $P/whl && cp diffusers-0.42.1-py3-none-any.whl $P/whl/      # (python3 -m pip download --no-deps)
# There: P=.devpack-NAME LIMIT=400 bash .devpack-NAME/sd_speed_call.sh   (logs and summary.txt in $OUT)
# Steps: the CUDA plug-in compiled there from the pack's tree, new-op conformance on cuda, compute-sanitizer memcheck
# on the conv/norm cases, the GPU-vs-CPU tiny-pipeline image check, a per-layer profile, rbee_sd_bench SD 1.5 512x512 20 steps, then diffusers eager + torch.compile in what is
# left of $LIMIT seconds (the compile's first call may not finish: then it says so).
set -u
P=${P:-.devpack-sd-speed}
LIMIT=${LIMIT:-420}
out=${OUT:-/tmp/out}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/$P:$PWD/$P/lib RBEE_BACKEND_PATH=$PWD/$P
note() { echo "== [$SECONDS s] $*" | tee -a "$out/summary.txt"; }
# The CUDA plug-in of the sd-speed tree, compiled here (nvcc on every core), against the pack's engine.
mkdir -p /tmp/sdspeed-tree && tar -C /tmp/sdspeed-tree -xzf "$P/tree.tgz"
ROOT=/tmp/sdspeed-tree JOBS=$(nproc) "$P/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1
note "plug-in: $(tail -n 1 "$out/cuda_plugin.log")"
[ -f "$P/librbee_backend_cuda.so" ] || exit 1
note "card: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader)"
timeout 40 "$P/tests/rbee_conformance" --gtest_brief=1 \
  --gtest_filter='*Conv2dFused*/cuda*:*GroupNorm*/cuda*:*Conv2dConformance*/cuda*:*Conv1d*/cuda*' > "$out/conformance.log" 2>&1
note "conformance exit $?: $(grep -E '^\[  (PASSED|FAILED) |tests from' "$out/conformance.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$out/conformance.log" | head -20 | tee -a "$out/summary.txt"
if command -v compute-sanitizer >/dev/null; then
  timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 "$P/tests/rbee_conformance" --gtest_brief=1 \
    --gtest_filter='*Conv2dFused*/cuda*k3*:*Conv2dFused*/cuda*k1*:*GroupNormSilu*/cuda_f16*' > "$out/memcheck.log" 2>&1
  note "memcheck exit $?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$out/memcheck.log" | tr '\n' ' ')"
else
  note "no compute-sanitizer"
fi
for size in 128 256; do
  "$P/rbee_sd_bench" --model tests/data/tiny_sd/sd15 --backend cuda --f16 --compare-cpu --steps 4 --width $size \
    --height $size 2>&1 | grep compare-cpu | tee -a "$out/summary.txt"
done
"$P/rbee_sd_bench" --model tests/data/tiny_sd/sd15 --backend cuda --compare-cpu --steps 4 --tol-mean 1e-3 \
  --tol-max 1e-2 --width 128 --height 128 2>&1 | grep compare-cpu | tee -a "$out/summary.txt"
note "tiny checks done"
tok=tests/data/tiny_sd/sd15/tokenizer
"$P/rbee_sd_bench" --random-sd15 --tokenizer $tok --backend cuda --f16 --steps 20 --width 512 --height 512 --runs 3 \
  --warmup 1 > "$out/bench_rbee.txt" 2>&1
grep -E "device|run|result|load|first" "$out/bench_rbee.txt" | tee -a "$out/summary.txt"
RBEE_OP_PROFILE=1 "$P/rbee_sd_bench" --random-sd15 --tokenizer $tok --backend cuda --f16 --steps 20 --runs 1 \
  --warmup 0 > "$out/profile_f16.txt" 2>&1
grep -E "kind|profile:" "$out/profile_f16.txt" | head -12 | tee -a "$out/summary.txt"
note "rbee done"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$P"/whl/*.whl &&
  export PYTHONPATH=/tmp/site
left=$((LIMIT - SECONDS - 3))
note "diffusers with ${left} s left"
cp "$P/sd_bench_diffusers.py" tools/bench/sd_bench_diffusers.py  # this branch's version (--modes)
timeout "$left" python3 tools/bench/sd_bench_diffusers.py --steps 20 --width 512 --height 512 --runs 3 \
  --modes eager,compiled --compile-warmup 1 > "$out/bench_diffusers.txt" 2>&1
note "diffusers exit $?"
cat "$out/bench_diffusers.txt" | grep -vi "warn" | tail -15 | tee -a "$out/summary.txt"
