#!/usr/bin/env bash
# One GPU session for the SD speed work, on a machine where scripts/pack_build.sh's folder was unpacked:
#   conformance (cuda cases of the op families SD uses), the GPU image against the CPU's on the tiny pipelines,
#   a per-layer profile, then rbee_sd_bench and the diffusers peer in the same session (same card).
#
#   RBEE_OUT=out tools/bench/sd_gpu_session.sh [PACK_DIR]     (default PACK_DIR .devpack)
#
# Needs torch there; diffusers from wheels in $SD_WHL (default .whl/) when it is not installed (docs/SD.md). Logs go to
# $RBEE_OUT. SD_MEMCHECK=1: compute-sanitizer memcheck over the conv2d_fused / group_norm_silu / attention cuda cases.
# SD_DIFFUSERS_MODES (default eager,compiled): the peer's modes (sd_bench_diffusers.py --modes), one loaded pipeline;
# SD_DIFFUSERS_TIMEOUT (default 400 s) bounds it (torch.compile's first compile takes minutes).
set -u
pack=${1:-.devpack}
out=${RBEE_OUT:-sd_gpu_out}
mkdir -p "$out"
steps=${SD_STEPS:-20}
status=0
note() { echo "== $*" | tee -a "$out/summary.txt"; }

note "card: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
if [ "${SD_SKIP_CONFORMANCE:-0}" != 1 ]; then
  "$pack/tests/rbee_conformance" --gtest_brief=1 \
    --gtest_filter='*Attention*/cuda*:*Conv*/cuda*:*Norm*/cuda*:*Matmul*/cuda*:*Binary*/cuda*:*Unary*/cuda*:*Copy*/cuda*:*Cast*/cuda*:*Where*/cuda*:*Fill*/cuda*:*Affine*/cuda*:*Upsample*/cuda*:*Im2col*/cuda*' \
    > "$out/conformance.log" 2>&1 || status=1
  note "conformance: $(grep -E '^\[  (PASSED|FAILED) ' "$out/conformance.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$out/conformance.log" | head -20 | tee -a "$out/summary.txt"
fi
if [ "${SD_MEMCHECK:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  timeout "${SD_MEMCHECK_TIMEOUT:-120}" compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$pack/tests/rbee_conformance" --gtest_brief=1 \
    --gtest_filter='*Conv2dFused*/cuda*:*GroupNormSilu*/cuda*:*AttentionConformance*/cuda*' > "$out/memcheck.log" 2>&1
  note "memcheck exit $? ($(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$out/memcheck.log" | tr '\n' ' '))"
fi
for size in 128 256; do
  "$pack/rbee_sd_bench" --model tests/data/tiny_sd/sd15 --backend cuda --f16 --compare-cpu --steps 4 \
    --width $size --height $size 2>&1 | grep compare-cpu | tee -a "$out/summary.txt" || status=1
  "$pack/rbee_sd_bench" --model tests/data/tiny_sd/sd15 --backend cuda --compare-cpu --steps 4 --tol-mean 1e-3 \
    --tol-max 1e-2 --width $size --height $size 2>&1 | grep compare-cpu | tee -a "$out/summary.txt" || status=1
done
RBEE_OP_PROFILE=1 "$pack/rbee_sd_bench" --random-sd15 --tokenizer tests/data/tiny_sd/sd15/tokenizer --backend cuda --f16 --steps "$steps" --runs 1 --warmup 1 \
  > "$out/profile_f16.txt" 2>&1 || status=1
head -30 "$out/profile_f16.txt" | grep -E "kind|profile:|result" | tee -a "$out/summary.txt"
"$pack/rbee_sd_bench" --random-sd15 --tokenizer tests/data/tiny_sd/sd15/tokenizer --backend cuda --f16 --steps "$steps" --runs 3 --warmup 1 > "$out/bench_rbee.txt" 2>&1 ||
  status=1
grep -E "device|run|result" "$out/bench_rbee.txt" | tee -a "$out/summary.txt"
if [ "${SD_NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
  # Per-kernel GPU time of one 1-step image (text encoder, UNet with CFG, VAE decode), kernels serialized.
  timeout "${SD_NCU_TIMEOUT:-150}" ncu --metrics gpu__time_duration.sum --print-summary per-kernel \
    "$pack/rbee_sd_bench" --random-sd15 --tokenizer tests/data/tiny_sd/sd15/tokenizer --backend cuda --f16 \
    --steps 1 --runs 0 --warmup 1 > "$out/ncu.txt" 2>&1
  note "ncu exit $?"
fi
whl=${SD_WHL:-.whl}
if [ -d "$whl" ] && ! python3 -c "import diffusers" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$whl"/*.whl &&
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
timeout "${SD_DIFFUSERS_TIMEOUT:-400}" python3 tools/bench/sd_bench_diffusers.py --steps "$steps" --width 512 \
  --height 512 --runs 3 --modes "${SD_DIFFUSERS_MODES:-eager,compiled}" > "$out/bench_diffusers.txt" 2>&1 || status=1
grep -E "load|result|compile|run" "$out/bench_diffusers.txt" | tee -a "$out/summary.txt"
exit $status
