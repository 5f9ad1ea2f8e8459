"""Shared fixtures. Nothing here downloads: the Hub is switched off for the whole run."""

import contextlib
import functools
import importlib.util
import os
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

TESTS = Path(__file__).resolve().parent
# A test's tier is the folder it lives in, and nothing else: `-m unit` (and the others) select exactly one folder,
# and no file can claim a second tier. pyproject.toml declares the markers.
TIERS = ("unit", "integration", "cluster", "node", "e2e")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        folder = parts[0] if len(parts) > 1 else None
        if folder not in TIERS:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in one of tests/{{{','.join(TIERS)}}}/")
        claimed = {m.name for m in item.iter_markers() if m.name in TIERS} - {folder}
        if claimed:
            raise pytest.UsageError(f"{item.nodeid}: marked {sorted(claimed)}; its folder makes it {folder}")
        item.add_marker(folder)


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
def validate_reply():
    """validate_reply(url, status, text) or validate_reply(httpx_response): a whole answer, streamed or not, error or
    not, against the official spec (openai_schema.py); returns the body or the stream's chunks."""
    return _openai_schema().validate_reply


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
