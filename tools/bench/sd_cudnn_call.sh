#!/usr/bin/env bash
# Issue 18's cuDNN session in one device call: sd_ab_call.sh's stages in the order that matters most if time runs
# out, every cuDNN switch against today's paths in the same call. Made here and run there like sd_ab_call.sh:
#   PACK_XZ=1 NO_LLAMA=1 tools/bench/gpu_session.sh pack MAIN/.devpack-NAME &&
#     cp tools/bench/sd_ab_call.sh tools/bench/sd_cudnn_call.sh MAIN/.devpack-NAME/
#   there: C=.devpack-NAME bash .devpack-NAME/sd_cudnn_call.sh         (summary.txt and logs.tgz in $OUT)
# Switches (docs/perf-notes/sd-speed.md, session 8): RBEE_CONV_CUDNN=0 (today's paths) / 1 (cuDNN on every shape it
# takes), RBEE_CONV_CUDNN_API=graph|legacy, RBEE_CONV_CUDNN_LAYOUT=nhwc. SKIP_SDXL=1 leaves SDXL out; SDXL also
# stays out when fewer than SDXL_NEEDS seconds (default 70) of LIMIT (default 440) are left.
set -u
export C=${C:?C=carry folder} KEEP_LOGS=1
out=${OUT:-/tmp/out}
logs=/tmp/sd-cudnn-logs
rm -rf "$logs" && mkdir -p "$out" "$logs"
# Each stage logs into $logs; $out gets summary.txt and logs.tgz after every stage, so a call stopped by its time
# limit still brings both back (the device tool returns few files).
ab() {
  env OUT="$logs" "$@" bash "$C/sd_ab_call.sh"
  cp "$logs/summary.txt" "$out/summary.txt"
  (cd "$logs" && tar czf "$out/logs.tgz" --exclude=summary.txt -- *)
}
off="RBEE_CONV_CUDNN=0"
all="RBEE_CONV_CUDNN=1"
ab STAGES=conformance CONFORMANCE_FILTER='*Conv2dFused*/cuda*' \
  CONFORMANCE_ENVS="default:;legacy:$all RBEE_CONV_CUDNN_API=legacy;nhwc:$all RBEE_CONV_CUDNN_LAYOUT=nhwc;off:$off"
ab STAGES=convbench CONVBENCH_ARGS='--min-seconds 0.03' \
  CONV_PATHS="im2col:$off RBEE_CONV_IMPLICIT=0;implicit:$off RBEE_CONV_IMPLICIT=1;graph:$all RBEE_CONV_CUDNN_API=graph RBEE_LOG_LEVEL=debug;legacy:$all RBEE_CONV_CUDNN_API=legacy;graph_nhwc:$all RBEE_CONV_CUDNN_API=graph RBEE_CONV_CUDNN_LAYOUT=nhwc;legacy_nhwc:$all RBEE_CONV_CUDNN_API=legacy RBEE_CONV_CUDNN_LAYOUT=nhwc"
ab STAGES=convbench CONVBENCH_ARGS='--min-seconds 0.03 --image-bias --no-gemm --filter unet' \
  CONV_PATHS="ib_im2col:$off RBEE_CONV_IMPLICIT=0;ib_graph:$all RBEE_CONV_CUDNN_API=graph;ib_legacy:$all RBEE_CONV_CUDNN_API=legacy"
ab STAGES=bench RUNS=2 \
  CONFIGS="off:$off;graph:$all RBEE_CONV_CUDNN_API=graph;legacy:$all RBEE_CONV_CUDNN_API=legacy;graph_nhwc:$all RBEE_CONV_CUDNN_API=graph RBEE_CONV_CUDNN_LAYOUT=nhwc;default:"
ab STAGES=memcheck MEMCHECK_FILTER='*Conv2dFused*/cuda*_f16' MEMCHECK_TIMEOUT=60
ab STAGES=tiny
if [ "${SKIP_SDXL:-0}" != 1 ] && [ $((${LIMIT:-440} - SECONDS)) -ge "${SDXL_NEEDS:-70}" ]; then
  ab STAGES=sdxl SDXL_RUNS=2 SDXL_CONFIGS="off:$off;default:"
else
  echo "== [$SECONDS s] sdxl skipped" | tee -a "$logs/summary.txt" "$out/summary.txt"
fi
