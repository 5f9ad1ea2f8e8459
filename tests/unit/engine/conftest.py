"""Fixtures for the engine's unit tests: one tiny engine per module, checked for leaks after each test."""

import os

import pytest


def assert_no_leak(engine) -> None:
    """Every block is back in the free queue and no ref count is negative."""
    pool = engine.kv.pool
    assert not engine.has_unfinished_requests()
    assert pool.num_free == pool.num_total
    assert all(b.ref_cnt == 0 for b in pool.blocks)
    assert not engine.kv.req_blocks


def _run_to_end(engine, max_steps: int = 10_000) -> dict:
    """Steps until idle; returns every output per request id, in order."""
    seen: dict = {}
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            return seen
        for out in engine.step():
            seen.setdefault(out.request_id, []).append(out)
    raise AssertionError("engine did not finish")


@pytest.fixture(autouse=True, scope="package")
def one_torch_thread(torch_threads):
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    return LLMEngine(EngineConfig(model=tiny_model_path, max_model_len=256, num_kv_blocks=64,
                                  max_num_batched_tokens=64, max_num_seqs=8))


@pytest.fixture()
def clean_engine(engine):
    yield engine
    assert_no_leak(engine)


@pytest.fixture(scope="session")
def run_to_end():
    return _run_to_end


def verify_every_draft(eng) -> None:
    """The engine's speculation policy verifies every proposal, whatever this machine's step times: a plain step
    timed and no verify step yet (so drafts are unpriced), and no step timed after."""
    eng.speculator.cost.observe(1, 0, 1.0)
    eng.speculator.observe_step = lambda *args: None


@pytest.fixture
def cuda_lora_layout(monkeypatch):
    """In Triton's interpreter (TRITON_INTERPRET=1) the CUDA path runs on CPU tensors: the LoRA layers keep B as the
    Triton kernels read it, not packed for our CPU kernel, and an eager CPU forward multiplies in torch."""
    from floodway.engine.lora import batch

    if os.environ.get("TRITON_INTERPRET") == "1":
        monkeypatch.setattr(batch, "CPU_KERNEL", False)
