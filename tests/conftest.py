"""Shared fixtures. Nothing here downloads: the Hub is switched off for the whole run."""

import contextlib
import functools
import importlib.util
import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@functools.cache
def _openai_schema():
    """tests/openai_schema.py by path: pytest's importlib mode puts no test folder on sys.path."""
    path = Path(__file__).with_name("openai_schema.py")
    spec = importlib.util.spec_from_file_location("floodway_tests_openai_schema", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def validate_openai():
    """validate_openai(body, component): asserts body is valid against the official spec's component schema."""
    return _openai_schema().validate_openai


@pytest.fixture(scope="session")
def validate_stream():
    """validate_stream(chunks, component, error_ends=False): each chunk and the whole stream (openai_schema.py)."""
    return _openai_schema().validate_stream


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


@contextlib.contextmanager
def _torch_threads(n: int):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def torch_threads():
    """Context manager setting torch's intra-op threads. In-process engine tests use one: tiny models gain nothing
    from a second thread, and on a shared 2-core machine OpenMP threads waiting for each other make every op many
    times slower."""
    return _torch_threads
