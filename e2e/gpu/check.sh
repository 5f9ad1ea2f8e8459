#!/usr/bin/env bash
# The one-call GPU check (issue #17): parity with transformers, decode and prefill speed against their bounds and
# transformers' batching, KV blocks. Needs python3 with torch and transformers only; nothing is installed or
# downloaded. `--cpu`: the same path on tiny shapes, in seconds (make test runs it). `--help` lists the options.
# The engine is imported from this checkout through a throwaway folder that maps floodway.engine and
# floodway.operator onto engine/ and operator/, as setup.py does, never with the repo root on the import path
# (its operator/ would shadow the standard library's). PYTHON picks the interpreter (default python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
shim="$(mktemp -d)"
trap 'rm -rf "$shim"' EXIT
mkdir "$shim/floodway"
ln -s "$root/engine" "$shim/floodway/engine"
ln -s "$root/operator" "$shim/floodway/operator"
# Progress bars and load warnings off: the output is the report.
export TQDM_DISABLE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TRANSFORMERS_VERBOSITY=error
PYTHONPATH="$shim${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -P -m floodway.engine.bench.gpu_check "$@"
