import pytest
from floodway.engine.outputs import EngineStats, RequestMetrics, RequestOutput
from floodway.engine.server.metrics import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS, ServerMetrics

MODEL = "m"


def _stats(**kw) -> EngineStats:
    base = dict(num_running=2, num_waiting=5, num_free_blocks=30, num_total_blocks=40, kv_cache_usage=0.25,
                prompt_tokens_total=100, generation_tokens_total=50, num_preemptions_total=1,
                prefix_cache_queries_total=100, prefix_cache_hits_total=32)
    return EngineStats(**{**base, **kw})


def _out(rid, new, finished=False, reason=None, t0=100.0) -> RequestOutput:
    m = RequestMetrics(arrival_time=t0, first_scheduled_time=t0 + 0.5, first_token_time=t0 + 0.7,
                       finished_time=t0 + 3.0 if finished else None)
    return RequestOutput(rid, [1, 2], new, new, "", "", finished, reason, None, None, 0, m)


def _sample(text: str, name: str, **labels) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name + "{"):
            got = ",".join(sorted(line[len(name) + 1:line.index("}")].split(",")))
            if got == want:
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{want}}} not in output")


def test_gauges_and_counters_come_from_the_latest_stats_snapshot():
    snapshot = {"s": None}
    m = ServerMetrics(MODEL, lambda: snapshot["s"])
    assert "vllm:num_requests_running" not in m.render().decode()  # nothing before the model loads
    snapshot["s"] = _stats()
    text = m.render().decode()
    assert _sample(text, "vllm:num_requests_running", model_name=MODEL) == 2
    assert _sample(text, "vllm:num_requests_waiting", model_name=MODEL) == 5
    assert _sample(text, "vllm:kv_cache_usage_perc", model_name=MODEL) == 0.25
    assert _sample(text, "floodway_kv_free_blocks", model_name=MODEL) == 30
    assert _sample(text, "floodway_prefill_tokens_per_second", model_name=MODEL) == 0.0  # none timed
    assert _sample(text, "vllm:prompt_tokens_total", model_name=MODEL) == 100
    assert _sample(text, "vllm:prefix_cache_hits_total", model_name=MODEL) == 32
    snapshot["s"] = _stats(generation_tokens_total=75, prefill_tokens_per_s=12_000.0)
    assert _sample(m.render().decode(), "vllm:generation_tokens_total", model_name=MODEL) == 75
    assert _sample(m.render().decode(), "floodway_prefill_tokens_per_second", model_name=MODEL) == 12_000.0


def test_histograms_use_vllm_buckets_and_observe_request_timings():
    m = ServerMetrics(MODEL, lambda: None)
    m.observe(_out("a", [7]), now=100.7)
    m.observe(_out("a", [8]), now=100.9)
    m.observe(_out("a", [9], finished=True, reason="length"), now=101.0)
    text = m.render().decode()
    assert _sample(text, "vllm:time_to_first_token_seconds_count", model_name=MODEL) == 1
    assert _sample(text, "vllm:time_to_first_token_seconds_sum", model_name=MODEL) == pytest.approx(0.7)
    assert _sample(text, "vllm:time_to_first_token_seconds_bucket", model_name=MODEL, le="0.5") == 0
    assert _sample(text, "vllm:time_to_first_token_seconds_bucket", model_name=MODEL, le="0.75") == 1
    assert _sample(text, "vllm:inter_token_latency_seconds_count", model_name=MODEL) == 2
    assert _sample(text, "vllm:inter_token_latency_seconds_sum", model_name=MODEL) == pytest.approx(0.3)
    assert _sample(text, "vllm:request_queue_time_seconds_sum", model_name=MODEL) == pytest.approx(0.5)
    assert _sample(text, "vllm:e2e_request_latency_seconds_sum", model_name=MODEL) == pytest.approx(3.0)
    assert _sample(text, "vllm:request_success_total", model_name=MODEL, finished_reason="length") == 1
    assert _sample(text, "vllm:request_success_total", model_name=MODEL, finished_reason="abort") == 0
    assert "_created" not in text
    for name, buckets in [("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
                          ("vllm:inter_token_latency_seconds", ITL_BUCKETS),
                          ("vllm:e2e_request_latency_seconds", REQUEST_LATENCY_BUCKETS)]:
        les = [line.split('le="')[1].split('"')[0] for line in text.splitlines() if line.startswith(name + "_bucket")]
        assert [float(x) for x in les[:-1]] == buckets and les[-1] == "+Inf"


def test_vllm_bucket_boundaries_are_exact():
    assert TTFT_BUCKETS[0] == 0.001 and TTFT_BUCKETS[-1] == 2560.0 and len(TTFT_BUCKETS) == 22
    assert ITL_BUCKETS[0] == 0.01 and ITL_BUCKETS[-1] == 80.0 and len(ITL_BUCKETS) == 19
    assert REQUEST_LATENCY_BUCKETS[0] == 0.3 and REQUEST_LATENCY_BUCKETS[-1] == 7680.0


def test_aborted_request_counts_as_abort_and_rejections_are_counted():
    m = ServerMetrics(MODEL, lambda: None)
    m.observe(_out("b", [], finished=True, reason="abort"), now=101.0)
    m.reject()
    m.reject()
    text = m.render().decode()
    assert _sample(text, "vllm:request_success_total", model_name=MODEL, finished_reason="abort") == 1
    assert _sample(text, "floodway_admission_rejected_total", model_name=MODEL) == 2
    assert _sample(text, "vllm:time_to_first_token_seconds_count", model_name=MODEL) == 0
