#!/usr/bin/env bash
# The lead's record run of issue 10 on merged main: two device calls on one warm machine (its /tmp stays ~30 s
# between calls). Here: `LLAMA_SRC=<llama.cpp cut> tools/bench/gpu_session.sh pack .devpack-final` (with the CUDA
# plug-in compiled here by scripts/build_cuda_plugin.sh, so the device compiles nothing). There, from the root:
#
#   tools/bench/record_gpu_session.sh prepare .devpack-final
#       gpu_session.sh prepare: llama.cpp (built there, its bin/ saved back through $OUT) and the models in the
#       background while the whole GPU conformance suite, the GPU-vs-CPU model checks and compute-sanitizer memcheck
#       over the session's new cases (MEMCHECK_FILTER below) run
#   tools/bench/record_gpu_session.sh table .devpack-final
#       gpu_session.sh compare (every row of issue 10's table, rbee and llama.cpp alternating on the same files),
#       then each session change against its switch back to the previous behaviour, back to back (AB rows)
#
# $OUT gets at most 8 files: logs in one tarball (logs-<phase>.tgz), the llama.cpp pieces, the table as markdown.
set -uo pipefail
cd "$(dirname "$0")/../.."
phase=${1:?usage: record_gpu_session.sh prepare|table CARRY}
carry=${2:?usage: record_gpu_session.sh prepare|table CARRY}
result=${OUT:-/tmp/rbee-record}
mkdir -p "$result"
export OUT=/tmp/rbee-record-$phase
rm -rf "$OUT" && mkdir -p "$OUT"
# The programs' compiled-in test paths (RBEE_SOURCE_DIR, the default model) name the lead's checkout.
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }

# Session 5's new GPU cases: fused float gemv (norm / swiglu prologue), attention rows of no sequence, the aligned
# Q4_K / Q5_K MMQ loads, SD's dense flash attention.
MEMCHECK_FILTER=${MEMCHECK_FILTER:-'Fused/NormQMatmulConformance.*/cuda_f16_m1_residual:Fused/NormQMatmulConformance.*/cuda_bf16_m1_wide_residual:Fused/SwigluQMatmulConformance.*/cuda_f32_m1_wide_residual:Fused/SwigluQMatmulConformance.*/cuda_f16_m1_residual:Ops/PagedAttentionConformance.RowsOfNoSequenceAreZero/cuda_mha128_f16:Ops/PagedAttentionConformance.DecodeBatchMatchesDenseReference/cuda_gqa4_128_bf16:*QMatmulConformance*cuda_q4_k_m16:*QMatmulConformance*cuda_q4_k_m64:*QMatmulConformance*cuda_q4_k_m520_n70_k2048:*QMatmulConformance*cuda_q5_k_m100_n300_k4096:*AttentionConformance*cuda_f16_permuted_sd_*:*AttentionConformance*cuda_bf16_contiguous_sd_*:*AttentionConformance*cuda_f16_contiguous_pad_dim24*'}

case "$phase" in
prepare)
  SANITIZE_TOOLS=memcheck SANITIZE_TIMEOUT=${SANITIZE_TIMEOUT:-150} SANITIZE_FILTER="$MEMCHECK_FILTER" \
    CONFORMANCE_TIMEOUT=${CONFORMANCE_TIMEOUT:-300} LLAMA_SAVE=${LLAMA_SAVE:-1} \
    tools/bench/gpu_session.sh prepare "$carry" 2>&1 | tee "$OUT/prepare_main.log"
  mv "$OUT"/llama-bin.tar.xz.* "$result/" 2>/dev/null
  ;;
table)
  REPS=${REPS:-2} tools/bench/gpu_session.sh compare "$carry" 2>&1 | tee "$OUT/compare_main.log"
  cp "$OUT/gpu_vs_llamacpp.md" "$result/" 2>/dev/null
  P=/tmp/rbee-session/pack
  M=/tmp/rbee-models
  export LD_LIBRARY_PATH=$P:$P/lib RBEE_BACKEND_PATH=$P
  # label, env..., --, rbee bench arguments: one A/B row (t/s and the limit line of the same process).
  ab() {
    local label=$1; shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    echo "--- $label: ${envs[*]} rbee bench $*"
    env "${envs[@]}" timeout "${AB_TIMEOUT:-90}" "$P/rbee" bench --backend cuda "$@" 2>&1 | grep -E "t/s|limit|GB/s|TFLOP|tg|pp" | head -8
  }
  {
    off="RBEE_PDL=0 RBEE_ATTN_ZERO_FILL=1 RBEE_GEMV_FUSED=0 RBEE_GEMV_PIPELINE=0"
    for m in llama3.2-1b-f16 llama2-7b-f16; do
      ab "$m tg128 default" X=1 -- -m "$M/$m.gguf" -p 0 -n 128 -r 2
      # shellcheck disable=SC2086
      ab "$m tg128 decode2 switches off" $off -- -m "$M/$m.gguf" -p 0 -n 128 -r 2
    done
    ab "llama2-7b-q4_0 tg128 RBEE_PDL=0" RBEE_PDL=0 -- -m "$M/llama2-7b-q4_0.gguf" -p 0 -n 128 -r 2
    ab "llama2-7b-q4_0 tg128 default" X=1 -- -m "$M/llama2-7b-q4_0.gguf" -p 0 -n 128 -r 2
    ab "llama2-7b-q4_k pp512 RBEE_MMQ_PATH=1 (session 4's loads)" RBEE_MMQ_PATH=1 -- -m "$M/llama2-7b-q4_k.gguf" -p 512 -n 0 -r 2
    ab "llama2-7b-q4_k pp512 default (aligned loads)" X=1 -- -m "$M/llama2-7b-q4_k.gguf" -p 512 -n 0 -r 2
  } 2>&1 | tee "$OUT/ab_rows.log"
  ;;
*) echo "record_gpu_session.sh: unknown phase $phase" >&2; exit 2 ;;
esac
tar -czf "$result/logs-$phase.tgz" -C "$OUT" .
ls -la "$result"
