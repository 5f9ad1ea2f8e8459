"""n > 1 and best_of: the prompt is prefilled once and its blocks are shared by reference count; the shared
partial block is copied on first write; preemption, prefix caching and aborts stay correct (tiny model)."""

import pytest
import torch
from floodway.engine.kv_manager import cdiv
from floodway.engine.sampling_params import SamplingParams

from tests.unit.engine.conftest import assert_no_leak

PROMPT = list(range(20, 60))  # 40 tokens: two full blocks and a partial third one
SAMPLED = dict(temperature=1.0, seed=7, ignore_eos=True)


def _used(engine) -> int:
    """Blocks held by sequences (freed blocks, cached or not, count as free)."""
    return engine.kv.pool.num_total - engine.kv.pool.num_free


def _peak_blocks(engine, requests: dict[str, SamplingParams]) -> tuple[int, dict]:
    for rid, params in requests.items():
        engine.add_request(rid, PROMPT, params)
    peak, finals = 0, {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finish_reason is not None:
                finals.setdefault(out.request_id, []).append(out)
        peak = max(peak, _used(engine))
    return peak, finals


def test_prompt_blocks_are_shared_and_the_partial_block_copied_on_first_write(clean_engine):
    bs = clean_engine.kv.block_size
    clean_engine.add_request("n8", PROMPT, SamplingParams(max_tokens=4, n=8, **SAMPLED))
    outs = clean_engine.step()  # the prompt's prefill: once, then eight first tokens from its logits
    assert sorted(o.index for o in outs) == list(range(8)) and all(len(o.output_token_ids) == 1 for o in outs)
    assert _used(clean_engine) == cdiv(len(PROMPT), bs)  # one set of prompt blocks, eight references each
    assert all(b.ref_cnt in (0, 8) for b in clean_engine.kv.pool.blocks)
    clean_engine.step()  # each sequence writes its first token into the partial block: seven copy it
    tables = [clean_engine.kv.block_table(r) for r in clean_engine.requests["n8"]]
    assert len({tuple(t[:2]) for t in tables}) == 1  # full prompt blocks still shared
    assert len({t[2] for t in tables}) == 8  # the partial one now private to each
    assert _used(clean_engine) == len(PROMPT) // bs + 8
    # Each private block holds the prompt's K/V copied from the shared one, then its own token's.
    prompt_tail = len(PROMPT) % bs
    for cache in (clean_engine.runner.k_caches[0], clean_engine.runner.v_caches[-1]):
        tails = [cache[t[2]] for t in tables]
        assert all(torch.equal(tail[:prompt_tail], tails[0][:prompt_tail]) for tail in tails)
        assert tails[0][:prompt_tail].abs().sum() > 0
        firsts = {seq.output_token_ids[0] for seq in clean_engine.requests["n8"]}
        assert len({tuple(tail[prompt_tail].flatten().tolist()) for tail in tails}) == len(firsts)
    while clean_engine.has_unfinished_requests():
        clean_engine.step()


def test_n8_uses_fewer_blocks_than_eight_separate_requests(tiny_model_path):
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    # Without prefix caching (which would share the separate requests' full prompt blocks too) and with room to
    # admit all eight at once: the n=8 request holds its prompt once.
    eng = LLMEngine(EngineConfig(model=tiny_model_path, max_model_len=256, num_kv_blocks=64,
                                 max_num_batched_tokens=512, max_num_seqs=8, enable_prefix_caching=False))
    separate, _ = _peak_blocks(eng, {f"s{i}": SamplingParams(max_tokens=8, **SAMPLED) for i in range(8)})
    assert_no_leak(eng)
    shared, finals = _peak_blocks(eng, {"n8": SamplingParams(max_tokens=8, n=8, **SAMPLED)})
    assert_no_leak(eng)
    bs = eng.kv.block_size
    assert separate == 8 * cdiv(len(PROMPT) + 8, bs)  # 24
    assert shared == len(PROMPT) // bs + 8 * (cdiv(len(PROMPT) + 8, bs) - len(PROMPT) // bs)  # 2 + 8 x 1
    assert shared < separate
    assert sorted(o.index for o in finals["n8"]) == list(range(8))


def test_seeded_choices_are_reproducible_and_differ(run_to_end, clean_engine):
    def choices(rid):
        clean_engine.add_request(rid, PROMPT, SamplingParams(max_tokens=12, n=4, **SAMPLED))
        finals = [o for o in run_to_end(clean_engine)[rid] if o.finish_reason is not None]
        return [o.output_token_ids for o in sorted(finals, key=lambda o: o.index)]

    first = choices("a")
    assert first == choices("b")
    assert len({tuple(c) for c in first}) == 4
    # Choice i draws from seed + i, the same stream a single request with that seed gets; equal outputs also
    # show each choice attended over its own tokens in the partial block they shared (copy-on-write).
    for i in range(4):
        clean_engine.add_request(f"one-{i}", PROMPT, SamplingParams(max_tokens=12, **{**SAMPLED, "seed": 7 + i}))
        assert run_to_end(clean_engine)[f"one-{i}"][-1].output_token_ids == first[i]


def test_greedy_choices_are_identical_to_n1(run_to_end, clean_engine):
    clean_engine.add_request("one", PROMPT, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
    one = run_to_end(clean_engine)["one"][-1]
    clean_engine.add_request("n3", PROMPT, SamplingParams(max_tokens=12, n=3, temperature=0.0, ignore_eos=True))
    outs = run_to_end(clean_engine)["n3"]
    finals = [o for o in outs if o.finish_reason is not None]
    assert [o.output_token_ids for o in finals] == [one.output_token_ids] * 3
    assert [o.finished for o in outs].count(True) == 1 and outs[-1].finished  # the request ends once
    for i in range(3):
        mine = [o for o in outs if o.index == i]
        assert "".join(o.new_text for o in mine) == one.text


@pytest.mark.parametrize("steps", [0, 1, 2, 5])
def test_abort_frees_every_shared_block(clean_engine, steps):
    clean_engine.add_request("x", PROMPT, SamplingParams(max_tokens=30, n=5, **SAMPLED))
    clean_engine.add_request("y", PROMPT, SamplingParams(max_tokens=30, n=3, **SAMPLED))
    for _ in range(steps):
        clean_engine.step()
    clean_engine.abort_request("x")
    clean_engine.abort_request("y")
    outs = clean_engine.step()
    assert sorted((o.request_id, o.index) for o in outs if o.finish_reason == "abort") == \
        [("x", i) for i in range(5)] + [("y", i) for i in range(3)]
    assert [o.request_id for o in outs if o.finished] == ["x", "y"]


@pytest.mark.parametrize("caching", [True, False])
def test_preemption_with_shared_blocks_keeps_greedy_output(tiny_model_path, run_to_end, caching):
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    # 12 blocks: 4 sequences of 40 + 40 tokens need 2 shared + 4 x 3 private blocks, so some are preempted.
    eng = LLMEngine(EngineConfig(model=tiny_model_path, max_model_len=256, num_kv_blocks=12,
                                 max_num_batched_tokens=64, max_num_seqs=8, enable_prefix_caching=caching))
    greedy = dict(max_tokens=40, temperature=0.0, ignore_eos=True)
    eng.add_request("one", PROMPT, SamplingParams(**greedy))
    one = run_to_end(eng)["one"][-1].output_token_ids
    eng.add_request("n4", PROMPT, SamplingParams(n=4, **greedy))
    finals = [o for o in run_to_end(eng)["n4"] if o.finish_reason is not None]
    assert eng.scheduler.counters.num_preemptions > 0
    assert [o.output_token_ids for o in finals] == [one] * 4
    assert_no_leak(eng)


def test_best_of_returns_the_n_most_likely_of_the_generated(tiny_model_path, run_to_end, clean_engine):
    from floodway.engine.outputs import final_choices

    clean_engine.add_request("all", PROMPT, SamplingParams(max_tokens=8, n=4, logprobs=0, **SAMPLED))
    every = [o for o in run_to_end(clean_engine)["all"] if o.finish_reason is not None]
    clean_engine.add_request("best", PROMPT, SamplingParams(max_tokens=8, n=2, best_of=4, **SAMPLED))
    best = final_choices([o for o in run_to_end(clean_engine)["best"] if o.finish_reason is not None], 2)
    ranked = sorted(every, key=lambda o: o.cumulative_logprob, reverse=True)
    assert [o.output_token_ids for o in best] == [o.output_token_ids for o in ranked[:2]]
    assert [o.index for o in best] == [0, 1]
    assert best[0].cumulative_logprob >= best[1].cumulative_logprob


def test_too_many_sequences_refused(clean_engine):
    with pytest.raises(ValueError, match="^n "):
        clean_engine.add_request("big", PROMPT, SamplingParams(n=9))
    with pytest.raises(ValueError, match="^best_of "):
        clean_engine.add_request("big", PROMPT, SamplingParams(n=2, best_of=1))
    assert_no_leak(clean_engine)
