"""The simulated gateway's counters by SLO class feed the autoscaler the signals the real gateway's do: each answer's
TTFT and TPOT (mean time per output token after the first, answers of two tokens or more) against its class's SLOs,
counted when the answer ends. Overflowed answers, whose latencies are SimConfig's fixed ones: no timing decides."""

import pytest
from floodway.operator.autoscaler.classes import short_class
from floodway.operator.autoscaler.signals import ClassCounts, Scrape, signals_between
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.gateway import SimGateway
from floodway.operator.simulator.replica import SimRequest
from floodway.operator.spec.models import SLOClassSpec

# The overflow API answers with a 0.4 s TTFT and 30 ms per token: within both classes' TTFT SLO (the service's
# 0.5 s), within "standard"'s TPOT SLO (the service's 50 ms), not within "strict"'s 20 ms.
CFG = SimConfig(overflow=OverflowPolicy(enabled=True), external_ttft_s=0.4, external_tpot_s=0.03,
                classes={"strict": SLOClassSpec(name="strict", tpotMs=20), "standard": SLOClassSpec(name="standard")})


def _overflowed(gateway: SimGateway, klass: str, output: int, t: float = 0.0) -> SimRequest:
    r = SimRequest(t, 100, output, klass=klass)
    gateway.arrive([], r, t)  # no replica ready: to the overflow API
    assert r.where == "overflow"
    return r


def test_each_class_s_ttft_and_tpot_count_when_its_answers_end():
    gateway = SimGateway(CFG)
    before = gateway.sample(0.0)
    for klass, output in (("strict", 11), ("strict", 1), ("standard", 11), ("standard", 11)):
        _overflowed(gateway, klass, output)
    assert gateway.sample(0.2).class_slo == {}  # none ended yet
    after = gateway.sample(10.0)
    # The one-token answer has a TTFT but no TPOT.
    assert after.class_slo == {"strict": ClassCounts((2, 2), (0, 1)), "standard": ClassCounts((2, 2), (2, 2))}
    assert after.class_in_flight == {"strict": 0, "standard": 0}
    # Through the autoscaler's own functions: strict, every first token in time, is short on its TPOT misses.
    s = signals_between(Scrape(0.0, {}, before), Scrape(10.0, {}, after), 0.5, 0.05)
    assert s.class_slo["strict"].attainment == 0.0 and s.class_slo["standard"].attainment == 1.0
    assert short_class(s.class_slo, {}, 1, 0.9, 0.0) == ("strict", 0.0)


def test_a_class_s_tpot_slo_defaults_to_the_service_s():
    gateway = SimGateway(CFG)
    _overflowed(gateway, "standard", 2)
    slower = SimGateway(SimConfig(overflow=CFG.overflow, external_ttft_s=0.4, external_tpot_s=0.06,
                                  classes=CFG.classes))
    _overflowed(slower, "standard", 2)
    assert gateway.sample(10.0).class_slo["standard"].tpot == (1, 1)
    assert slower.sample(10.0).class_slo["standard"].tpot == pytest.approx((0, 1))
