"""The control loop's step (controller/loop.py), which the operator's timer and `floodway up` both call, fed with
recorded scrapes: the /metrics pages of a real `floodway up` run (floodway/tiny-llama on CPU, engine.maxNumSeqs 2,
--step-delay-ms 50, replicas 1-2, targetConcurrency 1) before a burst of 8 streamed chat requests (a), 3.4 s
into it (6 waiting), and once they had finished (the second replica, b, had started by then)."""

import pathlib

import pytest
from floodway.operator.autoscaler.signals import Scrape, parse_engine, parse_gateway
from floodway.operator.controller.loop import first_state, step, tick_status
from floodway.operator.controller.status import Observation
from floodway.operator.runtimes import RUNTIMES
from floodway.operator.spec import InferenceServiceSpec

PAGES = pathlib.Path(__file__).with_name("data") / "scrapes"
TIMES = (1796080200.284, 1796080203.656, 1796080341.435)  # when each page was read (time.time())
CLOCK = ("2026-11-30T23:10:00Z", "2026-11-30T23:10:04Z", "2026-11-30T23:12:21Z")
SPEC = InferenceServiceSpec.model_validate({
    "model": "floodway/tiny-llama", "resources": {"gpus": 0}, "replicas": {"min": 1, "max": 2},
    "autoscaling": {"intervalSeconds": 2, "targetConcurrency": 1}, "slo": {"ttftMs": 300, "tpotMs": 100}})


def recorded(i: int) -> Scrape:
    names = RUNTIMES["floodway"].metrics
    engines = {e: parse_engine((PAGES / f"engine-{e}-{i}.prom").read_text(), names)
               for e in ("a", "b") if (PAGES / f"engine-{e}-{i}.prom").exists()}
    return Scrape(time=TIMES[i], engines=engines, gateway=parse_gateway((PAGES / f"gateway-{i}.prom").read_text()))


def conds(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


def run(ticks):
    """Steps the loop through (scrape index, what the shell saw) pairs as a shell does; the statuses."""
    state, status, out = first_state(None, SPEC), {}, []
    for i, seen in ticks:
        s = step(SPEC, state, recorded(i), TIMES[i])
        state = s.state
        status = tick_status(SPEC, s, seen, status, CLOCK[i], 3, "sel", "http://gw/v1")
        out.append((s, status))
    return out


def test_a_recorded_burst_scales_up_and_the_next_tick_measures_it():
    (idle, st0), (burst, st1), (after, st2) = run([
        (0, Observation(replicas=1, ready_replicas=1, gateway_ready=True)),
        (1, Observation(replicas=2, ready_replicas=1, gateway_ready=True)),
        (2, Observation(replicas=2, ready_replicas=2, gateway_ready=True))])
    # first tick: gauges only (no earlier scrape to take rates against), an idle replica: hold
    assert not idle.moved and idle.signals.window_s == 0 and idle.signals.waiting == (0.0,)
    assert st0["desiredReplicas"] == 1 and "lastScaleTime" not in st0 and conds(st0)["Ready"]["status"] == "True"
    # 2 running + 6 waiting on one replica at a target of 1: up to max at once
    assert burst.signals.running == (2.0,) and burst.signals.waiting == (6.0,)
    assert burst.moved and (burst.before, burst.decision.replicas) == (1, 2)
    assert st1["lastScaleReason"] == burst.decision.reason and st1["lastScaleTime"] == CLOCK[1]
    assert conds(st1)["Scaling"]["reason"] == "ScalingUp" and st1["observed"]["waiting"] == 6
    assert st1["observedGeneration"] == 3 and st1["selector"] == "sel" and st1["url"] == "http://gw/v1"
    # rates between the two last scrapes: the state carried the previous one
    window = TIMES[2] - TIMES[1]
    assert after.signals.window_s == pytest.approx(window) and after.signals.ready == 2
    assert after.signals.arrival_rate == pytest.approx(8 / window)  # the gateway's counter went 1 -> 9
    assert after.signals.finished_rate == pytest.approx(8 / window) and after.signals.attainment is not None
    # held (a scale-down waits for its stabilization window); the last scale's reason and time stay
    assert not after.moved and after.decision.replicas == 2
    assert (st2["lastScaleReason"], st2["lastScaleTime"]) == (st1["lastScaleReason"], CLOCK[1])
    assert conds(st2)["Scaling"]["reason"] == "Stable" and st2["readyReplicas"] == 2


def test_the_shell_facts_reach_the_status():
    (_, st), = run([(1, Observation(replicas=1, ready_replicas=0, gateway_ready=False,
                                    pod_problems=(), claim_problems=None, conflicts=()))])
    assert conds(st)["Ready"]["reason"] == "GatewayNotReady" and conds(st)["PodsHealthy"]["status"] == "True"
    assert conds(st)["OwnershipConflict"]["status"] == "False" and "StorageAvailable" not in conds(st)


def test_a_restarted_loop_starts_from_the_replicas_that_exist():
    assert first_state(5, SPEC).scaler.replicas == 2 and first_state(None, SPEC).previous is None
