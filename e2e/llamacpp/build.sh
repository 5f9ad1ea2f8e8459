#!/usr/bin/env bash
# Builds llama.cpp's llama-server (the server users run for `runtime: llamacpp`) and llama-quantize (the format's
# own packer, which writes the K-quant files the tests load) from the llama.cpp sources vendored in the PyPI sdist
# of llama-cpp-python: a package registry is the only network this needs.
# Cached by version: a second run prints the cached paths at once. Last two lines: LLAMA_QUANTIZE=<path>,
# LLAMA_SERVER=<path>.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
CACHE="${FLOODWAY_LLAMACPP_CACHE:-$HOME/.cache/floodway/llamacpp}/$VERSION"
BIN="$CACHE/llama-server"
QUANTIZE="$CACHE/llama-quantize"
PIP="${PIP:-$(dirname "$0")/../../.venv/bin/pip}"

# Runs a step with its output in a log; on failure prints the log's tail (the work folder is removed).
step() {
  local log="$1"; shift
  if ! "$@" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    exit 1
  fi
}

if [ ! -x "$BIN" ] || [ ! -x "$QUANTIZE" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # The sdist only (its build tools may come as wheels: pip prepares its metadata).
  step "$work/pip.log" "$PIP" download --no-binary llama-cpp-python --no-deps --dest "$work" \
    "llama-cpp-python==$VERSION"
  tar -xzf "$work"/llama_cpp_python-"$VERSION".tar.gz -C "$work"
  src="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
  # CPU only; no curl (models are local GGUF files) and no web UI download; not tuned to this CPU, so the
  # binary runs on any x86-64 machine.
  step "$work/cmake.log" nice -n 10 cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF
  step "$work/build.log" nice -n 10 cmake --build "$work/build" --target llama-server llama-quantize -j "${JOBS:-$(nproc)}"
  mkdir -p "$CACHE"
  for bin in "$BIN" "$QUANTIZE"; do
    install -m 0755 "$work/build/bin/$(basename "$bin")" "$bin.tmp"
    mv "$bin.tmp" "$bin"
  done
fi
echo "LLAMA_QUANTIZE=$QUANTIZE"
echo "LLAMA_SERVER=$BIN"
