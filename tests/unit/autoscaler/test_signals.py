"""Signal extraction from Prometheus text: gauges, histogram deltas, SLO attainment, counter resets."""

import pytest
from floodway.operator.autoscaler.signals import (
    GW_HELD,
    GW_NEEDED,
    GW_OVERFLOW,
    GW_REQUESTS,
    ClassCounts,
    GatewaySample,
    Scrape,
    observe,
    parse_engine,
    parse_gateway,
    share_within,
    signals_between,
)
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFT_BUCKETS = [0.1, 0.25, 0.5, 0.75, 1.0, 2.5]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1]


class FakeEngine:
    """A real prometheus_client registry with vLLM's metric names, as an engine's /metrics renders them."""

    def __init__(self):
        self.reg = CollectorRegistry()
        lab = {"labelnames": ["model_name"], "registry": self.reg}
        self.running = Gauge("vllm:num_requests_running", "r", **lab)
        self.waiting = Gauge("vllm:num_requests_waiting", "w", **lab)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "kv", **lab)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "t", buckets=TTFT_BUCKETS, **lab)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "i", buckets=ITL_BUCKETS, **lab)
        self.done = Counter("vllm:request_success", "s", labelnames=["model_name", "finished_reason"],
                            registry=self.reg)

    def finish(self, ttft, itls):
        self.ttft.labels("m").observe(ttft)
        for x in itls:
            self.itl.labels("m").observe(x)
        self.done.labels("m", "stop").inc()

    def text(self):
        return generate_latest(self.reg).decode()


def gateway_text(requests, overflow, held):
    reg = CollectorRegistry()
    req = Counter(GW_REQUESTS.removesuffix("_total"), "r", ["backend", "outcome"], registry=reg)
    req.labels("http://a", "ok").inc(requests - overflow)
    req.labels("overflow", "ok").inc(overflow)
    req.labels("http://a", "retried").inc(7)  # re-sent elsewhere: not a new arrival
    Counter(GW_OVERFLOW.removesuffix("_total"), "o", ["reason"], registry=reg).labels("queue_depth").inc(overflow)
    Gauge(GW_HELD, "h", registry=reg).set(held)
    return generate_latest(reg).decode()


def test_parse_engine_gauges_and_histograms():
    e = FakeEngine()
    e.running.labels("m").set(7)
    e.waiting.labels("m").set(3)
    e.kv.labels("m").set(0.42)
    e.finish(0.2, [0.02, 0.03])
    s = parse_engine(e.text())
    assert (s.running, s.waiting, s.kv_usage, s.finished_total) == (7, 3, 0.42, 1)
    assert s.ttft[0.25] == 1 and s.ttft[0.1] == 0 and s.ttft[float("inf")] == 1
    assert not s.tpot_per_request and s.tpot[0.025] == 1


def test_attainment_and_goodput_from_bucket_deltas():
    e = FakeEngine()
    e.finish(5.0, [0.01])  # before the window: must not count
    old = Scrape(100.0, {"a": parse_engine(e.text())})
    for _ in range(8):
        e.finish(0.2, [0.02, 0.02])
    e.finish(0.9, [0.02])  # misses TTFT
    e.finish(0.3, [0.09, 0.09])  # misses TPOT on its tokens
    new = Scrape(110.0, {"a": parse_engine(e.text())}, starting=2)
    s = signals_between(old, new, ttft_slo_s=0.5, tpot_slo_s=0.05)
    assert s.finished_rate == pytest.approx(1.0)
    # TTFT: 9 of 10 within 0.5 s; tokens: 17 of 19 gaps within 0.05 s; both: at least 0.9 + 17/19 - 1.
    assert s.attainment == pytest.approx(0.9 + 17 / 19 - 1)
    assert s.goodput == pytest.approx(s.attainment * 1.0)
    assert (s.ready, s.starting, s.window_s) == (1, 2, 10.0)


def test_slo_between_bucket_bounds_is_never_overstated():
    # Observations in the 0.5..0.75 bucket might be above an SLO of 0.6: they do not count as met.
    delta = {0.5: 6.0, 0.75: 10.0, float("inf"): 10.0}
    assert share_within(delta, 0.6) == (6.0, 10.0)
    assert share_within(delta, 0.75) == (10.0, 10.0)


def test_counter_reset_counts_everything_since_the_restart():
    e = FakeEngine()
    for _ in range(5):
        e.finish(0.1, [0.01])
    old = Scrape(0.0, {"a": parse_engine(e.text())})
    fresh = FakeEngine()  # the engine restarted: counters begin at zero again
    fresh.finish(0.1, [0.01])
    fresh.finish(2.0, [0.01])
    s = signals_between(old, Scrape(10.0, {"a": parse_engine(fresh.text())}), 0.5, 0.05)
    assert s.finished_rate == pytest.approx(0.2)
    assert s.attainment == pytest.approx(0.5)


def test_no_finished_requests_means_unknown_attainment():
    e = FakeEngine()
    old = Scrape(0.0, {"a": parse_engine(e.text())})
    s = signals_between(old, Scrape(5.0, {"a": parse_engine(e.text())}), 0.5, 0.05)
    assert s.attainment is None and s.goodput == 0


def test_gateway_rates_and_several_replicas():
    e1, e2 = FakeEngine(), FakeEngine()
    e1.waiting.labels("m").set(4)
    e2.running.labels("m").set(9)
    old = Scrape(0.0, {}, parse_gateway(gateway_text(100, 10, 0)))
    new = Scrape(20.0, {"a": parse_engine(e1.text()), "b": parse_engine(e2.text())},
                 parse_gateway(gateway_text(160, 30, 3)))
    s = signals_between(old, new, 0.5, 0.05)
    assert s.arrival_rate == pytest.approx(3.0) and s.overflow_rate == pytest.approx(1.0)
    assert s.held == 3 and s.ready == 2
    assert (s.total_waiting, s.total_running) == (4, 9)


def test_request_level_tpot_is_preferred_when_exported():
    reg = CollectorRegistry()
    h = Histogram("vllm:request_time_per_output_token_seconds", "t", buckets=[0.05, 0.1], registry=reg)
    h.observe(0.04)
    s = parse_engine(generate_latest(reg).decode())
    assert s.tpot_per_request and s.tpot[0.05] == 1


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="Prometheus"):
        parse_engine("vllm:num_requests_running{model_name=\"m\" 3\n")
    with pytest.raises(ValueError, match="time order"):
        signals_between(Scrape(5.0, {}), Scrape(5.0, {}), 0.5, 0.05)


def test_prompt_token_rate_counts_the_overflowed_share_too():
    text = "# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{model_name=\"m\"} %d\n"
    old = Scrape(0.0, {"a": parse_engine(text % 1000)}, parse_gateway(gateway_text(100, 10, 0)))
    new = Scrape(10.0, {"a": parse_engine(text % 31_000)}, parse_gateway(gateway_text(140, 20, 0)))
    s = signals_between(old, new, 0.5, 0.05)
    # 30k tokens in 10 s reached the engine from 30 local requests; 10 more overflowed: 4/3 of 3k tokens/s.
    assert s.prompt_token_rate == pytest.approx(4000.0)


def test_the_gateway_replicas_needed_histogram_arrives_as_the_window_s_bucket_deltas():
    # The gateway's own histogram (metrics.py's bounds), rendered and parsed: what each window's requests needed.
    from floodway.operator.gateway.metrics import GatewayMetrics
    m = GatewayMetrics()
    for need in (0.4, 1.5, 2.5):
        m.replicas_needed.observe(need)
    old = Scrape(0.0, {}, parse_gateway(m.render().decode()))
    for need in (0.2, 0.9, 1.1, 3.5):
        m.replicas_needed.observe(need)
    new = Scrape(5.0, {}, parse_gateway(m.render().decode()))
    got = signals_between(old, new, 0.5, 0.05).replicas_needed
    assert (got[1.0], got[2.0], got[3.0], got[4.0], got[float("inf")]) == (2, 3, 3, 4, 4)
    assert GW_NEEDED in m.render().decode()
    # A gateway restart (its counts went down) counts everything since, as for the other counters.
    fresh = GatewayMetrics()
    fresh.replicas_needed.observe(5.0)
    again = signals_between(new, Scrape(10.0, {}, parse_gateway(fresh.render().decode())), 0.5, 0.05)
    assert (again.replicas_needed[4.0], again.replicas_needed[5.0], again.replicas_needed[float("inf")]) == (0, 1, 1)
    assert signals_between(Scrape(0.0, {}), Scrape(5.0, {}), 0.5, 0.05).replicas_needed == {}  # no gateway read


def test_observe_counts_a_value_in_every_bucket_at_or_above_it():
    hist = dict.fromkeys((1.0, 2.0, float("inf")), 0)
    for value in (0.5, 1.0, 1.5, 7.0):
        observe(hist, value)
    assert hist == {1.0: 2, 2.0: 3, float("inf"): 4}


def test_the_gateway_s_token_and_declined_counters_arrive_as_rates():
    # The gateway's own counters (metrics.py), rendered and parsed: the overflow budget's token share and the
    # requests its share kept local.
    from floodway.operator.gateway.metrics import GatewayMetrics
    m = GatewayMetrics()
    old = Scrape(0.0, {}, parse_gateway(m.render().decode()))
    m.request_tokens.inc(50_000)
    m.overflow_tokens.inc(20_000)
    m.overflow_declined.inc(3)
    s = signals_between(old, Scrape(10.0, {}, parse_gateway(m.render().decode())), 0.5, 0.05)
    assert (s.request_token_rate, s.overflow_token_rate, s.declined_rate) == (5000.0, 2000.0, 0.3)


def test_the_gateway_s_class_gauge_and_slo_counters_arrive_by_class():
    # The gateway's own metrics (metrics.py), rendered and parsed: each class's requests in flight now, and its
    # streamed answers within its TTFT and its TPOT SLO over the window, summed over the gateway's replicas.
    from floodway.operator.controller.scrape import _summed
    from floodway.operator.gateway.metrics import GatewayMetrics
    m = GatewayMetrics()
    m.class_ttft_measured.labels("batch").inc(4)
    m.class_ttft_met.labels("batch").inc(4)
    m.class_tpot_measured.labels("batch").inc(3)
    m.class_tpot_met.labels("batch").inc(1)
    old = Scrape(0.0, {}, parse_gateway(m.render().decode()))
    m.class_in_flight.labels("batch").inc(30)
    m.class_in_flight.labels("interactive").inc(2)
    m.class_ttft_measured.labels("interactive").inc(10)
    m.class_ttft_met.labels("interactive").inc(9)
    m.class_tpot_measured.labels("interactive").inc(8)
    m.class_tpot_met.labels("interactive").inc(6)
    m.class_ttft_measured.labels("batch").inc(6)
    m.class_tpot_measured.labels("batch").inc(2)
    new = parse_gateway(m.render().decode())
    assert new.class_slo == {"batch": ClassCounts((4, 10), (1, 5)), "interactive": ClassCounts((9, 10), (6, 8))}
    s = signals_between(old, Scrape(5.0, {}, new), 0.5, 0.05)
    assert s.class_in_flight == {"batch": 30, "interactive": 2}
    # The window's: batch's counts before are out.
    assert s.class_slo == {"batch": ClassCounts((0, 6), (0, 2)), "interactive": ClassCounts((9, 10), (6, 8))}
    assert s.class_slo["interactive"].attainment == pytest.approx(0.9 + 0.75 - 1)
    both = _summed([new, new])
    assert both.class_in_flight == {"batch": 60, "interactive": 4}
    assert both.class_slo == {"batch": ClassCounts((8, 20), (2, 10)), "interactive": ClassCounts((18, 20), (12, 16))}
    # A gateway restart (its counts went down) counts everything since, TTFT and TPOT alike.
    fresh = GatewayMetrics()
    fresh.class_ttft_measured.labels("batch").inc(1)
    fresh.class_tpot_measured.labels("batch").inc(1)
    fresh.class_tpot_met.labels("batch").inc(1)
    again = signals_between(Scrape(5.0, {}, new), Scrape(10.0, {}, parse_gateway(fresh.render().decode())), 0.5, 0.05)
    assert again.class_slo == {"batch": ClassCounts((0, 1), (1, 1))}


def test_a_class_s_tpot_counters_alone_arrive_and_reset_on_their_own():
    # A class whose answers only ended in the window (their first tokens came before it): TPOT counts, no TTFT.
    old = Scrape(0.0, {}, GatewaySample(class_slo={"c": ClassCounts((5, 5), (2, 4))}))
    new = Scrape(5.0, {}, GatewaySample(class_slo={"c": ClassCounts((5, 5), (3, 6))}))
    assert signals_between(old, new, 0.5, 0.05).class_slo == {"c": ClassCounts((0, 0), (1, 2))}
    # One replica of two restarted since: the summed TPOT count went down and counts whole; TTFT's rose.
    later = Scrape(10.0, {}, GatewaySample(class_slo={"c": ClassCounts((7, 8), (1, 3))}))
    assert signals_between(new, later, 0.5, 0.05).class_slo == {"c": ClassCounts((2, 3), (1, 3))}
    # A class new to this scrape: all of its counts are the window's.
    assert signals_between(old, Scrape(5.0, {}, GatewaySample(class_slo={"d": ClassCounts((1, 1), (1, 1))})), 0.5,
                           0.05).class_slo == {"d": ClassCounts((1, 1), (1, 1))}
