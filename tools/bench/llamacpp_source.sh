#!/usr/bin/env bash
# Writes the llama.cpp source that the GPU comparison builds (tools/bench/gpu_vs_llamacpp.py) into DEST: the
# vendor/llama.cpp tree of the llama-cpp-python sdist pinned in tools/requirements-goldens.txt, cut to what
# llama-bench and llama-batched-bench need with the CPU and CUDA backends (~22 MB, so it can travel to a GPU
# machine that has no network). Needs pip (PyPI) here.
#
#   tools/bench/llamacpp_source.sh DEST        e.g. tools/bench/llamacpp_source.sh .devpack-llama/llama.cpp
set -euo pipefail
dest=${1:?usage: llamacpp_source.sh DEST}
root=$(cd "$(dirname "$0")/../.." && pwd)
version=$(sed -n 's/^llama-cpp-python==\([0-9.]*\).*/\1/p' "$root/tools/requirements-goldens.txt")
[ -n "$version" ] || { echo "llamacpp_source: no llama-cpp-python pin in tools/requirements-goldens.txt" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$work"
tar xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
rm -rf "$dest"
mkdir -p "$dest/ggml/src" "$dest/tools"
cp -r "$src"/{CMakeLists.txt,LICENSE,cmake,include,src,common,vendor} "$dest/"
cp -r "$src"/ggml/{CMakeLists.txt,cmake,include} "$dest/ggml/"
# ggml's own sources (the files at the top of ggml/src) and the two backends the comparison uses.
find "$src/ggml/src" -maxdepth 1 -type f -exec cp {} "$dest/ggml/src/" \;
cp -r "$src"/ggml/src/{ggml-cpu,ggml-cuda} "$dest/ggml/src/"
cp -r "$src"/tools/{llama-bench,batched-bench} "$dest/tools/"
# Only the two benchmark tools (the original list adds every tool of the tree).
cat > "$dest/tools/CMakeLists.txt" <<'CMAKE'
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(batched-bench)
add_subdirectory(llama-bench)
CMAKE
echo "$version" > "$dest/LLAMA_CPP_PYTHON_VERSION"
du -sh "$dest"
