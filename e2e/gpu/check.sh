#!/usr/bin/env bash
# The one-call GPU check (issue #17): parity with transformers, decode and prefill speed against their bounds and
# transformers' batching, KV blocks; then the engine's features at concurrency 1/8/32 (quantized weights,
# speculative decoding, LoRA: issues 35-37; `--features none` leaves them out). Needs python3 with torch and
# transformers only (the GGUF Q4_1 row also the gguf package, else it says so); nothing is installed or downloaded.
# `--cpu`: the same path on tiny shapes, in seconds (make test runs it). `--help` lists the options.
# The engine is imported from this checkout through a throwaway folder that maps floodway.engine and
# floodway.operator onto engine/ and operator/, as setup.py does, and holds the launcher, so that the import root is
# that folder on any Python 3, never the repo root or the working directory (a folder named operator/ there would
# shadow the standard library's). PYTHON picks the interpreter (default python3); TMPDIR holds the models written.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
shim="$(mktemp -d)"
trap 'rm -rf "$shim"' EXIT
mkdir "$shim/floodway"
ln -s "$root/engine" "$shim/floodway/engine"
ln -s "$root/operator" "$shim/floodway/operator"
printf 'from floodway.engine.bench.gpu_check import main\n\nraise SystemExit(main())\n' > "$shim/gpu_check_main.py"
# Progress bars and load warnings off: the output is the report.
export TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error
"${PYTHON:-python3}" "$shim/gpu_check_main.py" "$@"
