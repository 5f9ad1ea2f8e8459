"""Speculative decoding on the built-in SmolLM2 (float32): greedy output identical to the engine's without it, in
one batch with a request that does not speculate (seeded sampling), n > 1, prefix-cache hits, chunked prefill
and preemption; no block leaks."""

from floodway.engine.sampling_params import SamplingParams

from tests.unit.engine.conftest import assert_no_leak, verify_every_draft

TEXT = ("The river runs past the old mill and under the stone bridge. In spring the water rises and the meadow "
        "floods, so the farmers move their sheep to the hill.")
ASKS = ["Repeat this text exactly:\n\n" + TEXT, "Repeat this text exactly, twice:\n\n" + TEXT,
        "Write this text in capital letters:\n\n" + TEXT]
SPEC = '{"method": "ngram", "num_speculative_tokens": 4}'


def _run(path: str, spec: str | None) -> tuple[dict, object]:
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    # 14 blocks of 16 for five sequences of ~100 tokens: preemption; 32-token steps: prompts in chunks.
    eng = LLMEngine(EngineConfig(model=path, dtype="float32", max_model_len=256, num_kv_blocks=14,
                                 max_num_batched_tokens=32, max_num_seqs=8, speculative_config=spec))
    if spec:
        verify_every_draft(eng)
    ids = [list(eng.tokenizer.apply_chat_template([{"role": "user", "content": a}], add_generation_prompt=True,
                                                  tokenize=True, return_dict=True)["input_ids"]) for a in ASKS]
    greedy = dict(max_tokens=32, temperature=0.0, ignore_eos=True)
    eng.add_request("first", ids[0], SamplingParams(**greedy))  # alone first: the others hit its prefix blocks
    finals: dict = {}
    while eng.has_unfinished_requests():
        for out in eng.step():
            if out.finish_reason is not None:
                finals.setdefault(out.request_id, []).append(out.output_token_ids)
    eng.add_request("again", ids[0], SamplingParams(**greedy))
    eng.add_request("n2", ids[1], SamplingParams(n=2, **greedy))
    eng.add_request("other", ids[2], SamplingParams(**greedy))
    eng.add_request("seeded", ids[2], SamplingParams(max_tokens=30, temperature=0.8, seed=1))
    while eng.has_unfinished_requests():
        for out in eng.step():
            if out.finish_reason is not None:
                finals.setdefault(out.request_id, []).append(out.output_token_ids)
    assert_no_leak(eng)
    return finals, eng


def test_greedy_output_equals_non_speculative(smollm2_path):
    plain, plain_eng = _run(smollm2_path, None)
    spec, eng = _run(smollm2_path, SPEC)
    assert spec == plain
    assert plain["again"] == plain["first"]
    c = eng.speculator.counters
    assert c.num_accepted_tokens > 20 and c.num_accepted_tokens < c.num_draft_tokens
    assert eng.scheduler.counters.num_preemptions > 0 and eng.scheduler.counters.prefix_hits > 0
