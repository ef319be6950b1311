#!/usr/bin/env bash
# Kernel by kernel device time of one GPU's decode steps, by Nsight Compute (nsys is not on the lent machines):
#   ncu_step_profile.sh RBEE MODEL OUTDIR [bench args...]      (default bench args: --batch 64 -p 8 -n 4 -r 1)
# Every kernel of `rbee bench` is profiled (graph nodes one by one: --graph-profiling node) for its duration alone
# (gpu__time_duration.sum; clocks and caches left as they are: --clock-control none --cache-control none), then
# ncu_kernel_table.py sums the last decode steps per kernel and shape. Kernels run one at a time under ncu, so a
# tensor split (whose all-reduce kernels wait for each other) cannot be profiled this way: one GPU only.
# Output: OUTDIR/ncu.csv (raw), OUTDIR/ncu_table.md. NCU_TIMEOUT (default 300 s), NCU_STEPS (2), NCU_MARKER (a kernel run once a step: sample_kernel, the batch's device sampling).
set -uo pipefail
rbee=${1:?usage: ncu_step_profile.sh RBEE MODEL OUTDIR [bench args]}
model=${2:?}
outdir=${3:?}
shift 3
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--batch 64 -p 8 -n 4 -r 1 --no-limits)
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "ncu_step_profile.sh: ncu not found"; exit 1; }
mkdir -p "$outdir"
here=$(cd "$(dirname "$0")" && pwd)
timeout "${NCU_TIMEOUT:-300}" "$ncu" --graph-profiling node --clock-control none --cache-control none \
  --metrics gpu__time_duration.sum --csv --print-units base "$rbee" bench -m "$model" --backend cuda "${args[@]}" \
  > "$outdir/ncu.csv" 2> "$outdir/ncu.err"
echo "ncu exit $? ($(grep -c gpu__time_duration "$outdir/ncu.csv") kernels)"
python3 "$here/ncu_kernel_table.py" "$outdir/ncu.csv" --steps "${NCU_STEPS:-2}" --marker "${NCU_MARKER:-sample_kernel}" | tee "$outdir/ncu_table.md"
