"""The step-level API the server drives, on the built-in tiny model."""

import pytest
from floodway.engine.sampling_params import SamplingParams

GREEDY = dict(temperature=0.0)




@pytest.mark.parametrize("prompt, params, match", [
    ([], SamplingParams(), "prompt is empty"),
    ("", SamplingParams(), "prompt is empty"),
    (list(range(10, 250)), SamplingParams(max_tokens=20), "max_model_len"),
    ([5, 6], SamplingParams(max_tokens=-1), "max_tokens"),
    ([5, 6], SamplingParams(logit_bias={99999: 1.0}), "logit_bias"),
    ([5, 6], SamplingParams(top_p=0), "top_p"),
    ([5, 6], SamplingParams(temperature=-1), "temperature"),
    ([5, 6], SamplingParams(stop=[3]), "stop"),
    ([5, 99999], SamplingParams(), "token ids"),
    (42, SamplingParams(), "prompt must be"),
])
def test_bad_requests_are_refused_and_nothing_changes(clean_engine, prompt, params, match):
    before = clean_engine.stats()
    with pytest.raises(ValueError, match=match):
        clean_engine.add_request("bad", prompt, params)
    assert clean_engine.stats() == before


def test_request_larger_than_the_whole_pool_is_refused(tiny_model_path):
    from floodway.engine.config import EngineConfig
    from floodway.engine.llm_engine import LLMEngine

    eng = LLMEngine(EngineConfig(model=tiny_model_path, max_model_len=256, num_kv_blocks=4))
    with pytest.raises(ValueError, match="whole pool"):
        eng.validate_request(list(range(10, 70)), SamplingParams(max_tokens=10))
    eng.validate_request(list(range(10, 60)), SamplingParams(max_tokens=10))  # 60 tokens: 4 blocks fit


def test_duplicate_id_refused(run_to_end, clean_engine):
    clean_engine.add_request("dup", [5, 6, 7], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="duplicate"):
        clean_engine.add_request("dup", [5, 6, 7], SamplingParams(max_tokens=2))
    run_to_end(clean_engine)


def test_streamed_pieces_add_up_and_metrics_are_ordered(run_to_end, clean_engine):
    clean_engine.add_request("s", "Once upon a time", SamplingParams(max_tokens=12, ignore_eos=True, logprobs=0,
                                                                     **GREEDY))
    outs = run_to_end(clean_engine)["s"]
    final = outs[-1]
    assert final.finished and final.finish_reason == "length" and len(final.output_token_ids) == 12
    assert "".join(o.new_text for o in outs) == final.text
    assert sum((o.new_token_ids for o in outs), []) == final.output_token_ids
    assert all(len(o.new_logprobs) == len(o.new_token_ids) and all(lp <= 0 for lp in o.new_logprobs) for o in outs)
    m = final.metrics
    assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finished_time
    assert final.text == clean_engine.tokenizer.decode(final.output_token_ids, skip_special_tokens=True)


def test_stop_string_and_stop_token(run_to_end, clean_engine):
    clean_engine.add_request("free", [11, 12, 13], SamplingParams(max_tokens=20, ignore_eos=True, **GREEDY))
    free = run_to_end(clean_engine)["free"][-1]
    third = free.output_token_ids[2]
    clean_engine.add_request("tok", [11, 12, 13], SamplingParams(max_tokens=20, ignore_eos=True,
                                                                 stop_token_ids=[third], **GREEDY))
    tok = run_to_end(clean_engine)["tok"][-1]
    assert tok.finish_reason == "stop" and tok.stop_reason == third
    assert tok.output_token_ids == free.output_token_ids[:3]
    stop_str = free.text[len(free.text) // 2:len(free.text) // 2 + 3]
    clean_engine.add_request("str", [11, 12, 13], SamplingParams(max_tokens=20, ignore_eos=True, stop=[stop_str],
                                                                 **GREEDY))
    outs = run_to_end(clean_engine)["str"]
    assert outs[-1].finish_reason == "stop" and outs[-1].stop_reason == stop_str
    assert outs[-1].text == free.text[:free.text.find(stop_str)]
    assert "".join(o.new_text for o in outs) == outs[-1].text


def test_abort_at_any_point_returns_all_blocks(clean_engine):
    for when in range(4):
        clean_engine.add_request("long", list(range(20, 120)), SamplingParams(max_tokens=50, ignore_eos=True))
        clean_engine.add_request("other", list(range(20, 40)), SamplingParams(max_tokens=50, ignore_eos=True))
        for _ in range(when):
            clean_engine.step()
        clean_engine.abort_request("long")
        clean_engine.abort_request("long")  # idempotent
        outs = clean_engine.step()
        final = [o for o in outs if o.request_id == "long"]
        assert len(final) == 1 and final[0].finish_reason == "abort" and final[0].finished
        clean_engine.abort_request("other")
        clean_engine.step()
    clean_engine.abort_request("never-existed")


def test_seeded_sampling_repeats_across_batches(run_to_end, clean_engine):
    params = SamplingParams(max_tokens=8, temperature=1.0, top_p=0.9, seed=123, ignore_eos=True)
    clean_engine.add_request("alone", [30, 31, 32], params)
    alone = run_to_end(clean_engine)["alone"][-1].output_token_ids
    clean_engine.add_request("busy", [30, 31, 32], params)
    clean_engine.add_request("noise", [40, 41], SamplingParams(max_tokens=8, temperature=1.0, ignore_eos=True))
    busy = run_to_end(clean_engine)["busy"][-1].output_token_ids
    assert alone == busy


def test_stats_count_prompt_generation_and_prefix_hits(run_to_end, clean_engine):
    before = clean_engine.stats()
    prompt = list(range(200, 240))  # 40 tokens: 2 full blocks can be cached (not the last token's)
    for rid in ("p1", "p2"):
        clean_engine.add_request(rid, prompt, SamplingParams(max_tokens=3, ignore_eos=True))
        outs = run_to_end(clean_engine)
    after = clean_engine.stats()
    assert after.prompt_tokens_total - before.prompt_tokens_total == 80
    assert after.generation_tokens_total - before.generation_tokens_total == 6
    assert after.prefix_cache_queries_total - before.prefix_cache_queries_total == 80
    assert after.prefix_cache_hits_total - before.prefix_cache_hits_total == 32
    assert outs["p2"][-1].num_cached_tokens == 32
    assert after.num_running == after.num_waiting == 0 and after.kv_cache_usage == 0.0


def test_the_exported_prefill_rate_counts_the_step_delay_the_serving_loop_sleeps(run_to_end, clean_engine):
    """--step-delay-ms (slept by the serving loop after each step) makes every step slower as clients see it, so
    the prefill rate the engine exports, from which the gateway predicts TTFT, counts it: with >= 1 s a step
    and at most 64 tokens a step (max_num_batched_tokens), under 64 tokens/s, whatever the CPU."""
    from floodway.engine.prefill_budget import StepTimes

    times, delay = clean_engine.step_times, clean_engine.config.step_delay_ms
    clean_engine.step_times, clean_engine.config.step_delay_ms = StepTimes(), 1000
    try:
        assert clean_engine.stats().prefill_tokens_per_s == 0.0  # no prefill timed yet
        clean_engine.add_request("slow", list(range(300, 340)), SamplingParams(max_tokens=3, ignore_eos=True))
        run_to_end(clean_engine)
        # A prefill is timed once a decode-only step has measured a step's fixed part: here the second one.
        assert clean_engine.step_times.decode_s >= 1.0 and clean_engine.stats().prefill_tokens_per_s == 0.0
        clean_engine.add_request("slower", list(range(400, 440)), SamplingParams(max_tokens=3, ignore_eos=True))
        run_to_end(clean_engine)
        assert 0 < clean_engine.stats().prefill_tokens_per_s < 64
    finally:
        clean_engine.step_times, clean_engine.config.step_delay_ms = times, delay


def test_llm_generate_keeps_input_order(tiny_model_path):
    from floodway.engine.llm import LLM

    llm = LLM(tiny_model_path, max_model_len=128, num_kv_blocks=32)
    prompts = [list(range(10, 10 + n)) for n in (40, 3, 17)]
    outs = llm.generate(prompts, SamplingParams(max_tokens=4, ignore_eos=True, **GREEDY))
    assert [o.prompt_token_ids for o in outs] == prompts
    assert all(len(o.output_token_ids) == 4 for o in outs)
    with pytest.raises(ValueError, match="SamplingParams"):
        llm.generate(prompts, [SamplingParams()])
