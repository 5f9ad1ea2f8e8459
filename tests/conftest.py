"""Shared fixtures. Nothing here downloads: the Hub is switched off for the whole run."""

import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

@pytest.fixture(scope="session")
def floodway_cmd() -> list[str]:
    """argv prefix that runs the CLI in a child process with the repo root kept off sys.path."""
    from floodway.operator.procs import FLOODWAY_ARGV

    return list(FLOODWAY_ARGV)


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    """The built-in model's folder (materialised once per machine)."""
    from floodway.engine.models.builtin import resolve_model

    return resolve_model("floodway/tiny-llama")
