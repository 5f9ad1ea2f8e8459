"""Speculative decoding in the engine (tiny model): greedy output equal to the engine's without speculation in
mixed batches (requests that do not speculate, n > 1, penalties, logit bias, logprobs, stop strings, structured
output, chunked prefill, preemption, prefix-cache hits on blocks filled by accepted drafts); sampled output
distributed as the target's (chi-square against transformers' logits, shown first to fail for a verifier that
accepts every draft); KV blocks and prefix-cache hashes consistent after every step; no leaks."""

import json
import math

import pytest
import torch
from floodway.engine.block_pool import chain_hash
from floodway.engine.sampling_params import SamplingParams
from floodway.engine.structured import StructuredSpec

from tests.unit.engine.conftest import assert_no_leak, verify_every_draft

SPEC = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}'
PATTERN = [11, 12, 13, 14, 15, 16, 17, 18]
PROMPTS = [PATTERN * 3 + [11, 12], list(range(40, 60)) + list(range(40, 50)), [7, 8, 9, 7, 8, 9, 7], [5] * 3]
GREEDY = dict(temperature=0.0, ignore_eos=True)


def make_engine(model: str, spec: str | None, **overrides):
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    cfg = dict(model=model, max_model_len=256, num_kv_blocks=64, max_num_batched_tokens=64, max_num_seqs=16)
    eng = LLMEngine(EngineConfig(**{**cfg, **overrides}, speculative_config=spec))
    if spec:  # the tests cover the same paths whatever this machine's step times
        verify_every_draft(eng)
    return eng


def check_blocks(eng) -> None:
    """Each running sequence holds no block past its tokens, its cached hashes chain over its own (accepted)
    tokens, and every reference is a sequence's."""
    kv, bs = eng.kv, eng.kv.block_size
    refs = 0
    for req in eng.scheduler.running:
        table = kv.block_table(req)
        refs += len(table)
        assert len(table) <= kv.blocks_needed(req.num_tokens)
        hashes, parent = kv.req_hashes.get(req, []), None
        assert len(hashes) <= req.num_computed_tokens // bs
        for i, h in enumerate(hashes):
            parent = chain_hash(parent, tuple(req.all_token_ids[i * bs:(i + 1) * bs]))
            assert h == parent
    assert refs == sum(b.ref_cnt for b in kv.pool.blocks)


def run(eng, requests: dict) -> dict:
    """Adds (prompt, params) per request id, steps to the end checking blocks; -> finals per id by index."""
    for rid, (prompt, params) in requests.items():
        eng.add_request(rid, prompt, params)
    finals: dict = {}
    while eng.has_unfinished_requests():
        for out in eng.step():
            if out.finish_reason is not None:
                finals.setdefault(out.request_id, []).append(out)
        check_blocks(eng)
    assert_no_leak(eng)
    return {rid: sorted(outs, key=lambda o: o.index) for rid, outs in finals.items()}


def assert_same(spec_out: dict, plain_out: dict) -> None:
    assert spec_out.keys() == plain_out.keys()
    for rid, plain in plain_out.items():
        for a, b in zip(spec_out[rid], plain, strict=True):
            assert (a.output_token_ids, a.text, a.finish_reason, a.stop_reason) == \
                   (b.output_token_ids, b.text, b.finish_reason, b.stop_reason), rid
            if b.cumulative_logprob is not None:
                assert a.cumulative_logprob == pytest.approx(b.cumulative_logprob, abs=1e-3)


def assert_verified(eng, rejected: bool = True) -> None:
    """The run verified drafts, accepting some (and rejecting some)."""
    c = eng.speculator.counters
    assert c.num_drafts > 0 and 0 < c.num_accepted_tokens
    assert c.num_accepted_tokens < c.num_draft_tokens or not rejected
    assert sum(c.accepted_per_pos) == c.num_accepted_tokens
    assert c.accepted_per_pos == sorted(c.accepted_per_pos, reverse=True)  # a position needs the ones before it


def mixed_requests() -> dict:
    reqs = {f"greedy{i}": (p, SamplingParams(max_tokens=40, **GREEDY)) for i, p in enumerate(PROMPTS)}
    reqs["n3"] = (PROMPTS[0], SamplingParams(max_tokens=30, n=3, **GREEDY))
    reqs["seeded"] = (PROMPTS[1], SamplingParams(max_tokens=30, temperature=1.0, seed=3, ignore_eos=True))
    reqs["seeded-n2"] = (PROMPTS[2], SamplingParams(max_tokens=20, temperature=0.8, top_k=50, seed=5, n=2))
    reqs["penalties"] = (PROMPTS[0], SamplingParams(max_tokens=40, frequency_penalty=0.4, presence_penalty=0.3,
                                                    repetition_penalty=1.1, **GREEDY))
    reqs["bias"] = (PROMPTS[2], SamplingParams(max_tokens=30, logit_bias={7: 8.0, 9: 4.0, 300: -100.0}, **GREEDY))
    reqs["min-tokens"] = (PROMPTS[3], SamplingParams(max_tokens=30, min_tokens=20, temperature=0.0))
    reqs["logprobs"] = (PROMPTS[0], SamplingParams(max_tokens=30, logprobs=3, **GREEDY))
    return reqs


def test_greedy_mixed_batch_equals_non_speculative(tiny_model_path):
    plain = run(make_engine(tiny_model_path, None), mixed_requests())
    eng = make_engine(tiny_model_path, SPEC)
    spec = run(eng, mixed_requests())
    assert_same(spec, plain)
    assert_verified(eng)
    # Logprobs and their alternatives, row by row, as a plain decode step computes them.
    a, b = spec["logprobs"][0], plain["logprobs"][0]
    assert a.cumulative_logprob == pytest.approx(b.cumulative_logprob, abs=1e-3)


def test_priced_out_drafts_are_verified_only_on_probe_steps_ever_more_rarely(tiny_model_path):
    from floodway.engine.spec_decode.policy import PROBE_EVERY

    eng = make_engine(tiny_model_path, SPEC)
    cost = eng.speculator.cost  # a plain step of 10 ms, a draft of 1 s: no draft pays
    cost.observe(1, 0, 0.01)
    cost.observe(1, 4, 4.01)
    eng.speculator.observe_step = lambda *args: None
    out = run(eng, {"x": (PROMPTS[0], SamplingParams(max_tokens=8 * PROBE_EVERY, **GREEDY))})["x"][0]
    c = eng.speculator.counters
    # The pattern prompt proposes drafts at every step; only probe steps verify them, after 16, then 32, then 64
    # more decode steps (one every 16 would have made 7 or 8 of them).
    assert len(out.output_token_ids) == 8 * PROBE_EVERY
    assert 2 <= c.num_drafts <= 3
    assert c.num_accepted_tokens > 0


def test_logprobs_and_stop_strings_per_token(tiny_model_path):
    tok_eng = make_engine(tiny_model_path, None)
    text = run(tok_eng, {"x": (PROMPTS[0], SamplingParams(max_tokens=40, **GREEDY))})["x"][0].text
    stop = text[len(text) // 2:len(text) // 2 + 3]  # a string the output reaches mid-way, mid-run of drafts
    reqs = {"stop": (PROMPTS[0], SamplingParams(max_tokens=40, stop=[stop], **GREEDY)),
            "stop-id": (PROMPTS[0], SamplingParams(max_tokens=40, stop_token_ids=[
                run(tok_eng, {"y": (PROMPTS[0], SamplingParams(max_tokens=20, **GREEDY))})["y"][0]
                .output_token_ids[12]], **GREEDY)),
            "lp": (PROMPTS[0], SamplingParams(max_tokens=25, logprobs=2, **GREEDY))}

    def streamed(eng):
        for rid, (prompt, params) in reqs.items():
            eng.add_request(rid, prompt, params)
        outs: dict = {}
        while eng.has_unfinished_requests():
            for o in eng.step():
                outs.setdefault(o.request_id, []).append(o)
        assert_no_leak(eng)
        return outs

    plain, eng = streamed(tok_eng), make_engine(tiny_model_path, SPEC)
    spec = streamed(eng)
    assert_verified(eng, rejected=False)
    assert max(len(o.new_token_ids) for o in spec["lp"]) > 1  # steps that emitted several tokens at once
    for rid in reqs:
        a, b = spec[rid][-1], plain[rid][-1]
        assert (a.text, a.output_token_ids, a.finish_reason, a.stop_reason) == \
               (b.text, b.output_token_ids, b.finish_reason, b.stop_reason)
        assert "".join(o.new_text for o in spec[rid]) == a.text
    assert plain["stop"][-1].stop_reason == stop and plain["stop-id"][-1].finish_reason == "stop"
    lp_a = [x for o in spec["lp"] for x in o.new_logprobs]
    lp_b = [x for o in plain["lp"] for x in o.new_logprobs]
    assert lp_a == pytest.approx(lp_b, abs=1e-4)
    top_a = [x for o in spec["lp"] for x in o.new_top_logprobs]
    top_b = [x for o in plain["lp"] for x in o.new_top_logprobs]
    assert [sorted(t) for t in top_a] == [sorted(t) for t in top_b]


@pytest.mark.parametrize("caching", [True, False])
def test_chunked_prefill_and_preemption(tiny_model_path, caching):
    # 10 blocks of 16 and 16-token steps: prompts are prefilled in chunks and sequences preempted.
    cfg = dict(num_kv_blocks=10, max_num_batched_tokens=16, enable_prefix_caching=caching)
    reqs = {f"r{i}": (p, SamplingParams(max_tokens=40, **GREEDY)) for i, p in enumerate(PROMPTS)}
    reqs["n2"] = (PROMPTS[1], SamplingParams(max_tokens=30, n=2, **GREEDY))
    plain = run(make_engine(tiny_model_path, None, **cfg), reqs)
    eng = make_engine(tiny_model_path, SPEC, **cfg)
    assert_same(run(eng, reqs), plain)
    assert eng.scheduler.counters.num_preemptions > 0
    assert_verified(eng)


def test_prefix_cache_hits_on_blocks_filled_by_accepted_drafts(tiny_model_path):
    eng = make_engine(tiny_model_path, SPEC)
    first = run(eng, {"a": (PROMPTS[0], SamplingParams(max_tokens=60, **GREEDY))})["a"][0]
    assert_verified(eng, rejected=False)
    # The whole first sequence as a prompt: its blocks, filled partly by verified drafts, are served from the cache.
    prompt = PROMPTS[0] + first.output_token_ids
    hit = run(eng, {"b": (prompt, SamplingParams(max_tokens=20, **GREEDY))})["b"][0]
    assert hit.num_cached_tokens >= len(PROMPTS[0]) + 32
    fresh = run(make_engine(tiny_model_path, None, enable_prefix_caching=False),
                {"b": (prompt, SamplingParams(max_tokens=20, **GREEDY))})["b"][0]
    assert hit.output_token_ids == fresh.output_token_ids


def test_structured_output_masks_every_verified_position(tiny_model_path):
    schema = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
              "required": ["a", "b"]}
    reqs = {"json": (PROMPTS[0], SamplingParams(max_tokens=60, structured=StructuredSpec("json_schema", schema),
                                                temperature=0.0)),
            "regex": (PROMPTS[2], SamplingParams(max_tokens=40, temperature=0.0,
                                                 structured=StructuredSpec("regex", r"(ab|ba){3,12}c"))),
            "free": (PROMPTS[0], SamplingParams(max_tokens=40, **GREEDY))}
    plain = run(make_engine(tiny_model_path, None), reqs)
    eng = make_engine(tiny_model_path, SPEC)
    spec = run(eng, reqs)
    assert_same(spec, plain)
    assert eng.speculator.counters.num_accepted_tokens > 0
    out = spec["json"][0]
    if out.finish_reason == "stop":
        assert set(json.loads(out.text)) == {"a", "b"}


def _oracle_joint(model_path: str, prompt: list[int], vocab: list[int], bias: float, depth: int) -> torch.Tensor:
    """transformers' probabilities of each depth-token continuation over `vocab` with the logit bias on it."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    joint = torch.ones(1)
    prefixes = [[]]
    with torch.inference_mode():
        for _ in range(depth):
            ids = torch.tensor([prompt + p for p in prefixes])
            logits = hf(ids).logits[:, -1].float()
            logits[:, vocab] += bias
            step = torch.softmax(logits, dim=-1)[:, vocab]  # the rest of the vocabulary holds ~e^-90 of the mass
            joint = (joint[:, None] * step).reshape(-1)
            prefixes = [p + [t] for p in prefixes for t in vocab]
    return joint


def test_sampled_output_follows_the_targets_distribution(tiny_model_path, monkeypatch):
    from floodway.engine import llm_engine
    from floodway.engine.spec_decode.verify import verify

    vocab = [300, 301, 302, 303]  # a tiny vocabulary: a +100 logit bias on these four tokens
    prompt = [300, 301, 302, 303, 301, 300, 303, 302, 300]
    depth, n = 3, 800
    p = _oracle_joint(tiny_model_path, prompt, vocab, 100.0, depth)
    params = SamplingParams(max_tokens=depth + 1, temperature=1.0, logit_bias={t: 100.0 for t in vocab},
                            ignore_eos=True)
    cells = p * n >= 5  # the chi-square approximation needs >= 5 expected per cell; the rest is pooled
    pooled = float(p[~cells].sum() * n)
    assert pooled >= 5 or pooled < 1e-6
    expected = torch.cat([p[cells] * n, torch.tensor([pooled] if pooled >= 5 else [])])
    df = len(expected) - 1
    crit = df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3  # upper 0.1% point (Wilson-Hilferty)

    def statistic(eng) -> float:
        outs = run(eng, {f"s{i}": (prompt, params) for i in range(n)})
        index = {t: i for i, t in enumerate(vocab)}
        counts = torch.zeros(len(p))
        for (o,) in outs.values():
            cell = 0
            for t in o.output_token_ids[:depth]:
                cell = cell * len(vocab) + index[t]
            counts[cell] += 1
        if pooled < 5 and counts[~cells].any():
            return math.inf  # drawn where the target puts (almost) no mass
        observed = torch.cat([counts[cells], counts[~cells].sum()[None]])[:len(expected)]
        return float(((observed - expected) ** 2 / expected).sum())

    def accept_all(x, drafts, greedy, generators, default_generator):  # broken: keeps every draft
        last = torch.tensor([sum(len(d) + 1 for d in drafts[:i + 1]) - 1 for i in range(len(drafts))])
        tails = verify(x[last], [[] for _ in drafts], greedy, generators, default_generator)
        return [d + t for d, t in zip(drafts, tails, strict=True)]

    big = dict(max_num_seqs=256, max_num_batched_tokens=4096, num_kv_blocks=600)
    ok = make_engine(tiny_model_path, SPEC, **big)
    stat = statistic(ok)
    print(f"chi2 {stat:.1f} on {df} degrees of freedom (0.1% critical {crit:.1f})")
    assert stat < crit
    assert ok.speculator.counters.num_draft_tokens > n  # most sequences verified drafts
    monkeypatch.setattr(llm_engine, "verify", accept_all)
    broken = statistic(make_engine(tiny_model_path, SPEC, **big))
    print(f"chi2 of a verifier that accepts every draft: {broken:.1f}")
    assert broken > crit


def test_metrics_carry_vllms_spec_decode_counters(tiny_model_path):
    from floodway.engine.server.metrics import ServerMetrics

    plain = make_engine(tiny_model_path, None)
    assert "spec_decode" not in ServerMetrics("m", plain.stats).render().decode()  # off: no series
    eng = make_engine(tiny_model_path, SPEC)
    run(eng, {"a": (PROMPTS[0], SamplingParams(max_tokens=30, **GREEDY))})
    c, text = eng.speculator.counters, ServerMetrics("m", eng.stats).render().decode()
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("vllm:spec_decode"))
    assert float(lines['vllm:spec_decode_num_drafts_total{model_name="m"}']) == c.num_drafts > 0
    assert float(lines['vllm:spec_decode_num_draft_tokens_total{model_name="m"}']) == c.num_draft_tokens
    assert float(lines['vllm:spec_decode_num_accepted_tokens_total{model_name="m"}']) == c.num_accepted_tokens > 0
    per_pos = [float(lines[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="m",position="{j}"}}'])
               for j in range(4)]
    assert per_pos == c.accepted_per_pos and sum(per_pos) == c.num_accepted_tokens


@pytest.mark.parametrize("cfg", [{}, dict(num_kv_blocks=10, max_num_batched_tokens=16)])
def test_draft_model_greedy_equals_non_speculative(tiny_model_path, cfg):
    # The target as its own draft: its proposals are the target's raw greedy tokens, accepted where no penalty,
    # bias or min_tokens changes the target's choice.
    draft = json.dumps({"method": "draft_model", "num_speculative_tokens": 3, "model": tiny_model_path})
    reqs = {k: v for k, v in mixed_requests().items() if k != "bias"}
    plain = run(make_engine(tiny_model_path, None, **cfg), reqs)
    eng = make_engine(tiny_model_path, draft, **cfg)
    assert_same(run(eng, reqs), plain)
    c = eng.speculator.counters
    assert c.num_draft_tokens > 50 and c.num_accepted_tokens > 0.6 * c.num_draft_tokens
    if cfg:
        assert eng.scheduler.counters.num_preemptions > 0
