#!/usr/bin/env bash
# Issue 18's fused-GEMM convolution session (branch sdsmall) in one device call: sd_ab_call.sh's stages with
# RBEE_CONV_FUSED_GEMM (kernels/conv_fused_gemm.cu: one cuBLASLt GEMM with bias and residual in its epilogue) against
# the paths before it, in the order that matters most if time runs out. Made here and run there like sd_ab_call.sh:
#   PACK_XZ=1 NO_LLAMA=1 tools/bench/gpu_session.sh pack MAIN/.devpack-NAME &&
#     cp tools/bench/sd_ab_call.sh tools/bench/sd_small_call.sh MAIN/.devpack-NAME/
#   there: C=.devpack-NAME LIMIT=SECONDS bash .devpack-NAME/sd_small_call.sh      (summary.txt and logs.tgz in $OUT)
# Stages after the SD 1.5 whole-image A/B run only while enough of LIMIT (default 240 s, counted from this script's
# start) is left: the UNet shapes with a [N, Cout] bias (IB_NEEDS, default 25 s), SDXL (SDXL_NEEDS, default 60 s).
set -u
export C=${C:?C=carry folder} KEEP_LOGS=1
out=${OUT:-/tmp/out}
logs=/tmp/sd-small-logs
rm -rf "$logs" && mkdir -p "$out" "$logs"
limit=${LIMIT:-240}
# Each stage logs into $logs; $out gets summary.txt and logs.tgz after every stage, so a call stopped by its time
# limit still brings both back.
ab() {
  env OUT="$logs" "$@" bash "$C/sd_ab_call.sh"
  cp "$logs/summary.txt" "$out/summary.txt"
  (cd "$logs" && tar czf "$out/logs.tgz" --exclude=summary.txt -- *)
}
left() { [ $((limit - SECONDS)) -ge "$1" ]; }
skip() { echo "== [$SECONDS s] $1 skipped (LIMIT)" | tee -a "$logs/summary.txt" "$out/summary.txt"; }
off="RBEE_CONV_FUSED_GEMM=0"
ab STAGES=conformance CONFORMANCE_FILTER='*Conv2dFused*/cuda*' \
  CONFORMANCE_ENVS="default:;off:$off;nodnn:RBEE_CONV_CUDNN=0"
ab STAGES=memcheck MEMCHECK_ENV="RBEE_CONV_CUDNN=0" MEMCHECK_TIMEOUT=50 \
  MEMCHECK_FILTER='*Conv2dFused*/cuda*gemm*_f16:*Conv2dFused*/cuda*k1*_f16:*Conv2dFused*/cuda*k3_split_k*_f16'
ab STAGES=tiny
ab STAGES=convbench CONVBENCH_ARGS='--min-seconds 0.03 --filter unet' \
  CONV_PATHS="old:$off;fused:RBEE_LOG_LEVEL=debug"
ab STAGES=bench RUNS=2 CONFIGS="off:$off;k1x1:RBEE_CONV_FUSED_GEMM=1x1;on:"
if left "${IB_NEEDS:-25}"; then
  ab STAGES=convbench CONVBENCH_ARGS='--min-seconds 0.03 --filter unet --image-bias --no-gemm' \
    CONV_PATHS="ib_old:$off;ib_fused:"
else
  skip "image-bias convbench"
fi
if left "${SDXL_NEEDS:-60}"; then
  ab STAGES=sdxl SDXL_RUNS=2 SDXL_CONFIGS="off:$off;on:"
else
  skip sdxl
fi
