"""Shared fixtures. Nothing here downloads: the Hub is switched off for the whole run."""

import os
import sys

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

# Child processes run the installed console entry point; -P keeps the working directory (the repo root,
# whose operator/ folder would shadow the standard library) off sys.path.
FLOODWAY = [sys.executable, "-P", "-m", "floodway.operator.cli"]


@pytest.fixture(scope="session")
def floodway_cmd() -> list[str]:
    return list(FLOODWAY)


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    """The built-in model's folder (materialised once per machine)."""
    from floodway.engine.models.builtin import resolve_model

    return resolve_model("floodway/tiny-llama")
