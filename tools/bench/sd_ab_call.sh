#!/usr/bin/env bash
# One device call that checks and A/B-times the SD kernels of issue 18 by their switches, run from the repository
# root on the device machine with a carry folder C made here from the worktree to measure:
#   PACK_XZ=1 NO_LLAMA=1 tools/bench/gpu_session.sh pack MAIN/.devpack-NAME && cp tools/bench/sd_ab_call.sh MAIN/.devpack-NAME/
# There: C=.devpack-NAME [STAGES=...] bash .devpack-NAME/sd_ab_call.sh    (summary.txt and logs.tgz in $OUT;
# KEEP_LOGS=1 leaves the logs as separate files)
# The pack is unpacked to /tmp/rbee-session and the CUDA plug-in compiled there from the carried tree (nvcc on every
# core, ~80 s) unless the pack carries one; a second call on the same warm machine with the same tree reuses both.
# STAGES (comma list, default all): conformance (CONFORMANCE_FILTER on cuda), memcheck (compute-sanitizer memcheck
# over MEMCHECK_FILTER), attention (rbee_sd_bench --attention: the UNets' attention calls alone, once per entry of
# ATTN_PATHS, same form as CONFIGS, default "default:"; each shape's path logged beside its row; not in the default
# list), tiny (GPU-vs-CPU images of the tiny SD 1.5 pipeline), bench (rbee_sd_bench SD 1.5 512x512
# 20 steps f16, UNet step graphs, once per entry of CONFIGS), batch (the same with --batch $BATCH for the first and
# last entries of CONFIGS), profile (per-layer profile of one warm image, first and last entries of CONFIGS; the last
# only with PROFILE_LAST_ONLY=1).
# convbench (bench/rbee_bench_conv_gpu per SD conv shape, once per entry of CONV_PATHS; the Blas GEMM of the same
# sizes beside the first entry). linbench (bench/rbee_bench_linear_gpu: the UNets' linear shapes, layer norms and
# GEGLUs against the GEMM rate and copy bandwidth measured in the same run, once per entry of LIN_PATHS, default
# "heuristic:;tuned:RBEE_LINEAR_TUNE=1 RBEE_LOG_LEVEL=debug"; LINBENCH_ARGS). normbench (bench/rbee_bench_norm_gpu: the
# UNets' group norms, channels last and first, and layer norms against the copy bandwidth and same-size copies, once
# per entry of NORM_PATHS, default "old:RBEE_GROUP_NORM_NHWC_ONE_BLOCK=1;default:"; the
# channels-first rows only beside the first entry; NORMBENCH_ARGS). first (rbee_sd_bench with --no-prepare,
# the last entry of CONFIGS, one warm-up image: the first image making its own plans, against the bench stage's
# prepared load).
# SDXL stages (not in the default list): sdxl (rbee_sd_bench --random-sdxl 1024x1024 20 steps f16 guidance 5, UNet
# step graphs, once per entry of SDXL_CONFIGS, default the last entry of CONFIGS), sdxl_profile (per-layer profile of
# one warm SDXL image, last entry of SDXL_CONFIGS), diffusers / sdxl_diffusers (tools/bench/sd_bench_diffusers.py, the
# carried copy, SD 1.5 512x512 or SDXL 1024x1024, modes DIFFUSERS_MODES (default eager,compiled) on one loaded pipeline,
# in what is left of LIMIT seconds (default 400) counted from the script's start; the diffusers wheel from $C/whl).
# CONFIGS: entries separated by ';', each "name:ENV=V ENV=V" (env switches for that run; "name:" for none).
# CONFORMANCE_ENVS (same form, default "default:"): the conformance stage runs once per entry, under its switches;
# MEMCHECK_ENV: switches for the memcheck stage (e.g. RBEE_CONV_IMPLICIT=1).
# peers_bg (not in the default list; instead of diffusers / sdxl_diffusers): both compiled diffusers peers (SD 1.5 and
# SDXL, --modes compiled) start at the script's beginning and compile in the background while rbee's stages run; each
# stops after its compiling first image at a gate (sd_bench_diffusers.py --gate-file). At the end, once rbee is done
# and both peers wait at their gates, the gates open one at a time, so each peer's warm-up and timed runs have the
# GPU alone. rbee's own timed runs overlap the peers' compiles (CPU work, and at most their first images' GPU work):
# if anything that slows rbee, not the peer. Saves the compile time (~100 + ~150 s) of a device call. peers_start and
# peers_finish split the stage over two invocations on one machine (e.g. rbee's benches in the first, checks and the
# peers' timed runs in the second).
set -u
C=${C:?C=carry folder}
out=${OUT:-/tmp/out}
mkdir -p "$out"
STAGES=${STAGES:-conformance,memcheck,tiny,bench,batch,profile}
has() { [[ ",$STAGES," == *",$1,"* ]]; }
note() { echo "== [$SECONDS s] $*" | tee -a "$out/summary.txt"; }
work=/tmp/rbee-session
P=$work/pack
if [ -x "$P/rbee_sd_bench" ] && [ -f "$P/librbee_backend_cuda.so" ] && cmp -s "$C/tree.tgz" "$work/tree.tgz"; then
  note "pack and plug-in reused from the warm machine"
else
  rm -rf "$work" && mkdir -p "$work/tree"
  if [ -f "$C/pack.tar.xz" ]; then tar -C "$work" -xJf "$C/pack.tar.xz"; else tar -C "$work" -xzf "$C/pack.tgz"; fi
  tar -C "$work/tree" -xzf "$C/tree.tgz"
  if [ -f "$C/plugin.so.xz" ]; then
    xz -dc "$C/plugin.so.xz" > "$P/librbee_backend_cuda.so"
    note "plug-in: compiled before packing"
  else
    ROOT=$work/tree JOBS=$(nproc) "$P/build_cuda_plugin.sh" > "$out/cuda_plugin.log" 2>&1
    note "plug-in: $(tail -n 1 "$out/cuda_plugin.log")"
  fi
  [ -f "$P/librbee_backend_cuda.so" ] || { note "no CUDA plug-in"; tail -n 30 "$out/cuda_plugin.log"; exit 1; }
  cp "$C/tree.tgz" "$work/tree.tgz"
fi
export LD_LIBRARY_PATH=$P:$P/lib RBEE_BACKEND_PATH=$P
note "card: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader)"
tok=tests/data/tiny_sd/sd15/tokenizer
setup_peer() {  # the diffusers wheel from $C/whl on PYTHONPATH, the carried peer script in place
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$C"/whl/*.whl &&
    export PYTHONPATH=/tmp/site
  cp "$C/sd_bench_diffusers.py" tools/bench/sd_bench_diffusers.py  # the measured worktree's version
}
gates=/tmp/rbee-peer-gates
if has peers_bg || has peers_start; then
  setup_peer
  rm -rf "$gates" && mkdir -p "$gates"
  for which in diffusers sdxl_diffusers; do
    args="--steps 20 --width 512 --height 512 --runs ${DIFFUSERS_RUNS:-3}"
    [ $which = sdxl_diffusers ] && args="--sdxl --steps 20 --width 1024 --height 1024 --guidance 5 --runs ${DIFFUSERS_RUNS:-3}"
    PYTHONUNBUFFERED=1 timeout "${LIMIT:-400}" python3 tools/bench/sd_bench_diffusers.py $args --modes compiled \
      --compile-warmup 1 --gate-file "$gates/$which" > "$gates/bench_$which.txt" 2>&1 &
    echo $! > "$gates/$which.pid"
  done
  note "peers_bg: both compiled diffusers peers started (they wait at their gates after compiling)"
fi
if has conformance; then
  IFS=';' read -r -a cenvs <<< "${CONFORMANCE_ENVS:-default:}"
  for ce in "${cenvs[@]}"; do
    log="$out/conformance_${ce%%:*}.log"
    env ${ce#*:} timeout "${CONFORMANCE_TIMEOUT:-60}" "$P/tests/rbee_conformance" --gtest_brief=1 \
      --gtest_filter="${CONFORMANCE_FILTER:-*Geglu*/cuda*:*GroupNorm*/cuda*:*LayerNorm*/cuda*:Ops/AttentionConformance.*/cuda*:*Conv2dFused*/cuda*}" \
      > "$log" 2>&1
    note "conformance [${ce#*:}] exit $?: $(grep -E '^\[  (PASSED|FAILED) |tests from.*ran' "$log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \]' "$log" | head -20 | tee -a "$out/summary.txt"
  done
fi
if has memcheck && command -v compute-sanitizer >/dev/null; then
  env ${MEMCHECK_ENV:-} timeout "${MEMCHECK_TIMEOUT:-60}" compute-sanitizer --tool memcheck --error-exitcode 9 "$P/tests/rbee_conformance" \
    --gtest_brief=1 --gtest_filter="${MEMCHECK_FILTER:-*GroupNorm*/cuda_f16_contiguous:*LayerNorm*/cuda_f16_contiguous:*Conv2dFused*/cuda*split_k*:Ops/AttentionConformance.*/cuda_f16_contiguous}" \
    > "$out/memcheck.log" 2>&1
  note "memcheck [${MEMCHECK_ENV:-}] exit $?: $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$out/memcheck.log" | tr '\n' ' ')"
fi
if has attention; then  # the UNets' attention calls alone, once per entry of ATTN_PATHS (the path of each shape logged)
  IFS=';' read -r -a apaths <<< "${ATTN_PATHS:-default:}"
  for ap in "${apaths[@]}"; do
    env ${ap#*:} "$P/rbee_sd_bench" --attention --backend cuda > "$out/attention_${ap%%:*}.txt" 2>&1
    grep -E "^attention|attention \[|takes no attention|refused attention" "$out/attention_${ap%%:*}.txt" |
      sed -e "s/^\[[^]]*\] //" -e "s/^/${ap%%:*}: /" | tee -a "$out/summary.txt"
  done
  note "attention bench done"
fi
if has tiny; then
  for size in ${TINY_SIZES:-128}; do
    "$P/rbee_sd_bench" --model tests/data/tiny_sd/sd15 --backend cuda --f16 --compare-cpu --steps 4 --width "$size" \
      --height "$size" 2>&1 | grep compare-cpu | tee -a "$out/summary.txt"
  done
  note "tiny checks done"
fi
if has convbench; then
  IFS=';' read -r -a cpaths <<< "${CONV_PATHS:-im2col:RBEE_CONV_IMPLICIT=0;igemm:RBEE_CONV_IMPLICIT=0 RBEE_CONV_IGEMM=1;implicit:RBEE_CONV_IMPLICIT=1;default:}"
  gemm=""
  for cp in "${cpaths[@]}"; do
    env ${cp#*:} "$P/bench/rbee_bench_conv_gpu" --label "${cp%%:*}" $gemm ${CONVBENCH_ARGS:-} \
      > "$out/convbench_${cp%%:*}.txt" 2>&1
    grep -E "^total|^error" "$out/convbench_${cp%%:*}.txt" | tee -a "$out/summary.txt"
    gemm=--no-gemm
  done
  note "convbench done"
fi
if has linbench; then
  IFS=';' read -r -a lpaths <<< "${LIN_PATHS:-heuristic:;tuned:RBEE_LINEAR_TUNE=1 RBEE_LOG_LEVEL=debug}"
  for lp in "${lpaths[@]}"; do
    env ${lp#*:} "$P/bench/rbee_bench_linear_gpu" --label "${lp%%:*}" ${LINBENCH_ARGS:-} > "$out/linbench_${lp%%:*}.txt" 2>&1
    grep -E "^limit|^total|^error" "$out/linbench_${lp%%:*}.txt" | tee -a "$out/summary.txt"
  done
  note "linbench done"
fi
if has normbench; then
  IFS=';' read -r -a npaths <<< "${NORM_PATHS:-old:RBEE_GROUP_NORM_NHWC_ONE_BLOCK=1;default:}"
  nchw=""
  for np in "${npaths[@]}"; do
    env ${np#*:} "$P/bench/rbee_bench_norm_gpu" --label "${np%%:*}" $nchw ${NORMBENCH_ARGS:-} \
      > "$out/normbench_${np%%:*}.txt" 2>&1
    grep -E "^limit|^total|^error" "$out/normbench_${np%%:*}.txt" | tee -a "$out/summary.txt"
    nchw=--no-nchw
  done
  note "normbench done"
fi
bench() {  # bench NAME "ENV..." ARGS...
  local name=$1 envs=$2
  shift 2
  env $envs "$P/rbee_sd_bench" --random-sd15 --tokenizer $tok --backend cuda --f16 --steps 20 --width 512 \
    --height 512 "$@" > "$out/bench_${name}.txt" 2>&1
  grep -E "^load|^prepare|^warmup|^run|result|first|^GEMM rate|^UNet step" "$out/bench_${name}.txt" |
    sed "s/^/$name [$envs]: /" | tee -a "$out/summary.txt"
}
CONFIGS=${CONFIGS:-"all_off:RBEE_SD_GEGLU_FUSED=0 RBEE_GROUP_NORM_ONE_LAUNCH=0 RBEE_LAYER_NORM_WARP=0 RBEE_ATTN_FAST_TILES=0 RBEE_CONV_SPLIT_K=0;all_on:"}
IFS=';' read -r -a configs <<< "$CONFIGS"
first=${configs[0]}
last=${configs[${#configs[@]}-1]}
if has bench; then
  for c in "${configs[@]}"; do bench "${c%%:*}" "${c#*:}" --runs "${RUNS:-3}" --warmup 1; done
  note "bench done"
fi
if has first; then
  bench "${last%%:*}_noprepare" "${last#*:}" --runs 1 --warmup 1 --no-prepare
  note "first done"
fi
if has batch; then
  for c in "$first" "$last"; do bench "${c%%:*}_batch${BATCH:-4}" "${c#*:}" --runs 2 --warmup 1 --batch "${BATCH:-4}"; done
  note "batch done"
fi
if has profile; then
  pcs=("$first" "$last")
  [ "${PROFILE_LAST_ONLY:-0}" = 1 ] && pcs=("$last")
  for c in "${pcs[@]}"; do
    name=${c%%:*}
    env ${c#*:} RBEE_OP_PROFILE=1 "$P/rbee_sd_bench" --random-sd15 --tokenizer $tok --backend cuda --f16 --steps 20 \
      --width 512 --height 512 --runs 1 --warmup 1 > "$out/profile_${name}.txt" 2>&1
    grep -E "kind|profile:" "$out/profile_${name}.txt" | head -16 | sed "s/^/profile $name: /" | tee -a "$out/summary.txt"
  done
  note "profile done"
fi
xl() {  # xl NAME "ENV..." ARGS...: rbee SDXL base, random weights, 1024x1024, 20 steps
  local name=$1 envs=$2
  shift 2
  env $envs "$P/rbee_sd_bench" --random-sdxl --tokenizer $tok --tokenizer-2 tests/data/tiny_sd/sdxl/tokenizer_2 \
    --backend cuda --f16 --steps 20 --width 1024 --height 1024 --guidance 5 "$@" > "$out/sdxl_${name}.txt" 2>&1
  grep -E "^load|^prepare|^run|^warmup|result|graphs|^GEMM rate|^UNet step" "$out/sdxl_${name}.txt" |
    sed "s/^/sdxl $name [$envs]: /" | tee -a "$out/summary.txt"
}
IFS=';' read -r -a xl_configs <<< "${SDXL_CONFIGS:-$last}"
if has sdxl; then
  for c in "${xl_configs[@]}"; do xl "${c%%:*}" "${c#*:}" --runs "${SDXL_RUNS:-2}" --warmup 1; done
  note "sdxl done"
fi
if has sdxl_profile; then
  c=${xl_configs[${#xl_configs[@]}-1]}
  xl "profile_${c%%:*}" "${c#*:} RBEE_OP_PROFILE=1" --runs 1 --warmup 1
  grep -E "kind|profile:" "$out/sdxl_profile_${c%%:*}.txt" | head -16 | sed "s/^/sdxl profile: /" | tee -a "$out/summary.txt"
  note "sdxl profile done"
fi
if has diffusers || has sdxl_diffusers; then
  setup_peer
  for which in diffusers sdxl_diffusers; do
    has $which || continue
    left=$((${LIMIT:-400} - SECONDS - 3))
    args="--steps 20 --width 512 --height 512 --runs ${DIFFUSERS_RUNS:-3}"
    [ $which = sdxl_diffusers ] && args="--sdxl --steps 20 --width 1024 --height 1024 --guidance 5 --runs ${DIFFUSERS_RUNS:-2}"
    note "$which with $left s left"
    PYTHONUNBUFFERED=1 timeout "$left" python3 tools/bench/sd_bench_diffusers.py $args --modes "${DIFFUSERS_MODES:-eager,compiled}" \
      --compile-warmup 1 > "$out/bench_$which.txt" 2>&1
    note "$which exit $?"
    grep -vi "warn" "$out/bench_$which.txt" | tail -12 | sed "s/^/$which: /" | tee -a "$out/summary.txt"
  done
fi
if has peers_bg || has peers_finish; then
  for which in diffusers sdxl_diffusers; do  # wait until both have compiled, so no compile runs beside a timed run
    while [ ! -f "$gates/$which.ready" ] && kill -0 "$(cat "$gates/$which.pid")" 2>/dev/null; do sleep 0.5; done
  done
  note "peers_bg: both peers compiled (or gave up)"
  for which in diffusers sdxl_diffusers; do
    touch "$gates/$which"
    while [ ! -f "$gates/$which.done" ] && kill -0 "$(cat "$gates/$which.pid")" 2>/dev/null; do sleep 0.5; done
    cp "$gates/bench_$which.txt" "$out/"  # the log lives beside the gates: peers_start's $OUT may be packed already
    note "peers_bg: $which finished"
    grep -vi "warn" "$out/bench_$which.txt" | tail -8 | sed "s/^/$which: /" | tee -a "$out/summary.txt"
  done
fi
note "done"
# The device tool brings back a limited number of files: every log but the summary travels as one logs.tgz.
if [ "${KEEP_LOGS:-0}" != 1 ]; then
  (cd "$out" && tar czf logs.tgz --exclude=summary.txt --exclude=logs.tgz -- * &&
    find . -type f ! -name summary.txt ! -name logs.tgz -delete)
fi
