# The two commands of the README: `make run` and `make test`. Both set themselves up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Never put the working directory (the repo root, whose operator/ would shadow the stdlib) on sys.path.
export PYTHONSAFEPATH := 1
export HF_HUB_OFFLINE := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: setup run test lint cluster-tools llamacpp

setup: $(VENV)/.installed

# pip's cache serves torch (a CUDA build of several GB from PyPI) on repeat runs.
$(VENV)/.installed: pyproject.toml setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[engine,test,plot]"
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

test: lint cluster-tools llamacpp
	$(BIN)/pytest
