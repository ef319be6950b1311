#!/usr/bin/env bash
# The main job: builds rbee for the best backend this machine has, lists the devices, then generates text with
# the default model (SmolLM2-135M-Instruct Q4_1, installed by scripts/setup.sh) on the best backend present.
#   scripts/run.sh ["PROMPT"]
# RBEE_PRESET overrides the build preset (cpu, cuda, cuda-sm90, rocm); RBEE_BACKEND the backend (auto, cpu, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
prompt=${1:-"The three primary colors are"}
preset=${RBEE_PRESET:-}
if [ -z "$preset" ]; then
  preset=cpu
  # A CUDA build only pays where a GPU and its compiler are both present.
  if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then preset=cuda; fi
fi
cmake --preset "$preset" >/dev/null
cmake --build "build/$preset" -j "$(nproc)" --target rbee
./build/"$preset"/rbee devices
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -e "$model" ]; then
  echo "run.sh: $model is missing; run scripts/setup.sh first" >&2
  exit 1
fi
./build/"$preset"/rbee run -m "$model" --backend "${RBEE_BACKEND:-auto}" -n 48 --temp 0 -p "$prompt"
