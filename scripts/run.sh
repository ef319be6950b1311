#!/usr/bin/env bash
# Builds rbee and runs the main job: lists the devices and runs the self-check on each.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset cpu >/dev/null
cmake --build build/cpu -j "$(nproc)" --target rbee
./build/cpu/rbee devices
