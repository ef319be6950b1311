#!/usr/bin/env bash
# Issue 18's cuDNN session in one device call: sd_ab_call.sh's stages in the order that matters most if time runs
# out, every cuDNN switch against today's paths in the same call. Made here and run there like sd_ab_call.sh:
#   PACK_XZ=1 NO_LLAMA=1 tools/bench/gpu_session.sh pack MAIN/.devpack-NAME &&
#     cp tools/bench/sd_ab_call.sh tools/bench/sd_cudnn_call.sh MAIN/.devpack-NAME/
#   there: C=.devpack-NAME bash .devpack-NAME/sd_cudnn_call.sh         (summary.txt and logs.tgz in $OUT)
# Switches (docs/perf-notes/sd-speed.md, session 8): RBEE_CONV_CUDNN=0 (today's paths) / 1 (cuDNN on every shape it
# takes), RBEE_CONV_CUDNN_TUNE=1 (cuDNN's graph engines timed per shape). SKIP_SDXL=1 leaves SDXL out; SDXL also stays
# out when fewer than SDXL_NEEDS seconds (default 55) of LIMIT (default 225) are left. (Session 8's first call ran
# this script at 0ce853e: every API and layout per shape; this is its second.)
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
ab STAGES=conformance CONFORMANCE_FILTER='*Conv2dFused*/cuda*' CONFORMANCE_ENVS="default:;all:$all"
ab STAGES=memcheck MEMCHECK_ENV="$all" MEMCHECK_FILTER='*Conv2dFused*/cuda*_f16' MEMCHECK_TIMEOUT=60
ab STAGES=tiny
ab STAGES=convbench CONVBENCH_ARGS='--min-seconds 0.03' \
  CONV_PATHS="default:RBEE_LOG_LEVEL=debug;tuned:$all RBEE_CONV_CUDNN_TUNE=1 RBEE_LOG_LEVEL=debug"
ab STAGES=convbench CONVBENCH_ARGS='--min-seconds 0.03 --filter sdxl' CONV_PATHS="xl_im2col:$off;xl_cudnn:$all"
ab STAGES=convbench CONVBENCH_ARGS='--min-seconds 0.03 --filter sdxl --image-bias --no-gemm' \
  CONV_PATHS="xl_ib_im2col:$off;xl_ib_cudnn:$all RBEE_LOG_LEVEL=debug"
ab STAGES=bench RUNS=2 CONFIGS="off:$off;default:"
if [ "${SKIP_SDXL:-0}" != 1 ] && [ $((${LIMIT:-225} - SECONDS)) -ge "${SDXL_NEEDS:-55}" ]; then
  ab STAGES=sdxl SDXL_RUNS=2 SDXL_CONFIGS="off:$off;default:"
else
  echo "== [$SECONDS s] sdxl skipped" | tee -a "$logs/summary.txt" "$out/summary.txt"
fi
