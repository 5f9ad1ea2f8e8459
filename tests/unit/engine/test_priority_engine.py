"""The priority scheduling policy (vLLM's --scheduling-policy priority) in the step engine on the tiny model: steps
are counted, never timed; the fcfs engine of conftest.py is the oracle of the tokens."""

import pytest
from floodway.engine.config import EngineConfig
from floodway.engine.sampling_params import SamplingParams

from tests.unit.engine.conftest import assert_no_leak

GREEDY = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
BATCH, INTERACTIVE = list(range(10, 170)), list(range(300, 310))  # 160 prompt tokens: 10 steps of 16


@pytest.fixture(scope="module")
def priority_engine(tiny_model_path):
    from floodway.engine.llm_engine import LLMEngine

    return LLMEngine(EngineConfig(model=tiny_model_path, max_model_len=256, num_kv_blocks=64,
                                  max_num_batched_tokens=16, max_num_seqs=8, scheduling_policy="priority"))


def test_a_batch_prefill_delays_an_interactive_first_token_by_at_most_one_step(priority_engine, clean_engine,
                                                                               run_to_end):
    eng = priority_engine
    eng.add_request("batch", BATCH, GREEDY, priority=10)
    for _ in range(2):
        assert eng.step() == []  # chunks of the batch prompt
    eng.add_request("interactive", INTERACTIVE, GREEDY, priority=-1)
    steps, seen = 0, {}
    while "interactive" not in seen:
        steps += 1
        for out in eng.step():
            seen.setdefault(out.request_id, []).append(out)
    assert steps <= 2  # within the step after next: one step's prefill budget at most
    assert not seen.get("batch")  # its prompt still yields
    for rid, outs in run_to_end(eng).items():
        seen.setdefault(rid, []).extend(outs)
    assert_no_leak(eng)
    # Yielding changes when a prompt's chunks run, not what they compute: the same tokens as fcfs, one by one.
    for rid, prompt in [("batch", BATCH), ("interactive", INTERACTIVE)]:
        clean_engine.add_request(rid, prompt, GREEDY)
        assert seen[rid][-1].output_token_ids == run_to_end(clean_engine)[rid][-1].output_token_ids


def test_fcfs_refuses_a_priority_and_the_policy_names_are_checked(clean_engine, priority_engine):
    with pytest.raises(ValueError, match="^priority 3 needs --scheduling-policy priority"):
        clean_engine.add_request("p", [5, 6, 7], GREEDY, priority=3)
    clean_engine.add_request("zero", [5, 6, 7], GREEDY, priority=0)
    clean_engine.abort_request("zero")
    clean_engine.step()
    with pytest.raises(ValueError, match="^priority must be an integer"):
        priority_engine.add_request("p", [5, 6, 7], GREEDY, priority=1.5)
    with pytest.raises(ValueError, match="^scheduling_policy must be one of fcfs, priority"):
        EngineConfig(scheduling_policy="lifo").validate()


def test_a_full_batch_of_long_batch_answers_gives_an_interactive_request_its_seat_at_once(tiny_model_path,
                                                                                        clean_engine, run_to_end):
    """Both seats (max_num_seqs 2) hold batch requests with long answers: the interactive one preempts the newer
    and has its first token from the next step, where it would otherwise wait for a whole answer. The preempted one
    is recomputed and its tokens are fcfs's, one by one."""
    from floodway.engine.llm_engine import LLMEngine

    eng = LLMEngine(EngineConfig(model=tiny_model_path, max_model_len=256, num_kv_blocks=64,
                                 max_num_batched_tokens=64, max_num_seqs=2, scheduling_policy="priority"))
    long = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    prompts = {"b1": BATCH[:20], "b2": BATCH[20:40], "interactive": INTERACTIVE}
    for rid in ("b1", "b2"):
        eng.add_request(rid, prompts[rid], long, priority=10)
    seen = {}
    for _ in range(3):
        for out in eng.step():
            seen.setdefault(out.request_id, []).append(out)
    eng.add_request("interactive", INTERACTIVE, GREEDY, priority=0)
    assert [o.request_id for o in eng.step()] == ["b1", "interactive"]  # b2 gave its seat up
    for rid, outs in run_to_end(eng).items():
        seen.setdefault(rid, []).extend(outs)
    assert_no_leak(eng)
    assert eng.scheduler.counters.num_preemptions == 1
    for rid, prompt in prompts.items():
        clean_engine.add_request(rid, prompt, long if rid != "interactive" else GREEDY)
        assert seen[rid][-1].output_token_ids == run_to_end(clean_engine)[rid][-1].output_token_ids
