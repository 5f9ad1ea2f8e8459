"""Tenants and SLO classes in the simulator (issue 40): the population's tagging, the gateway's class rule and
tenant admission through the gateway's own functions, and the table per class and tenant."""

from collections import Counter
from dataclasses import replace

import pytest
from floodway.operator.autoscaler.baselines import StaticPolicy, decide_static
from floodway.operator.gateway.config import Tenants
from floodway.operator.gateway.overflow import OverflowPolicy
from floodway.operator.simulator import compare
from floodway.operator.simulator.config import SimConfig
from floodway.operator.simulator.des import Scaler, simulate
from floodway.operator.simulator.gateway import SimGateway
from floodway.operator.simulator.population import class_shares, class_specs, fair_tenant_rpm, tag_population
from floodway.operator.simulator.replica import Replica, ReplicaProfile, SimRequest
from floodway.operator.simulator.report import met, population, population_table
from floodway.operator.simulator.run import Options, prepare
from floodway.operator.simulator.slot import ReplicaSlot
from floodway.operator.simulator.traces import TraceRequest, idle_then_burst
from floodway.operator.spec.models import SLOClassSpec, TenantLimitsSpec

SMALL = ReplicaProfile(max_num_seqs=16)
MIX = {"interactive": 0.3, "standard": 0.5, "batch": 0.2}


def test_tagging_is_seeded_even_and_the_abusive_tenant_adds_to_the_same_requests():
    trace = [TraceRequest(float(i), 100, 10) for i in range(5000)]
    fair = tag_population(trace, MIX, 5, abuse=1, seed=3)
    assert fair == tag_population(trace, MIX, 5, abuse=1, seed=3) != tag_population(trace, MIX, 5, abuse=1, seed=4)
    tenants, classes = Counter(r.tenant for r in fair), Counter(r.klass for r in fair)
    assert set(tenants) == {"t1", "t2", "t3", "t4", "t5"} and max(abs(n / 5000 - 0.2) for n in tenants.values()) < 0.03
    assert all(abs(classes[k] / 5000 - s) < 0.03 for k, s in MIX.items())
    abusive = tag_population(trace, MIX, 5, abuse=10, seed=3)
    assert [r for r in abusive if r.arrival_s == int(r.arrival_s)] == fair  # copies arrive within the second after
    assert abs(Counter(r.tenant for r in abusive)["t5"] / tenants["t5"] - 10) < 1.0
    assert {r.klass for r in abusive if r.tenant == "t5"} == set(MIX)


def test_bad_population_options_are_clear_errors():
    with pytest.raises(ValueError, match="unknown"):
        class_shares("gold=0.5")
    with pytest.raises(ValueError, match="classes"):
        class_shares("interactive=0.7,batch=0.5")
    with pytest.raises(ValueError, match="abuse"):
        tag_population([TraceRequest(0.0, 1, 1)], {}, 2, abuse=0.5)
    with pytest.raises(ValueError, match="need --tenants"):
        prepare(Options(trace="steps:rates=2,step_s=100", tenant_rpm=10))


def _gateway(cfg: SimConfig) -> tuple[SimGateway, list[ReplicaSlot]]:
    return SimGateway(cfg), [ReplicaSlot(0.0, name="0", replica=Replica(SMALL, 0.0, lambda r: None))]


def test_the_simulated_gateway_refuses_a_tenant_over_its_limit_and_counts_it():
    tenants = Tenants(default=TenantLimitsSpec(max_requests_per_minute=2))
    gateway, slots = _gateway(SimConfig(profile=SMALL, tenants=tenants))
    reqs = [SimRequest(0.1 * i, 100, 4, tenant="a" if i < 3 else "b") for i in range(5)]
    for r in reqs:
        gateway.arrive(slots, r, r.arrival_s)
    assert [r.where for r in reqs] == ["local", "local", "refused", "local", "local"]
    assert gateway.requests == 4  # a refused request never reaches the overflow rule nor the scraped counters


def test_a_class_that_may_not_overflow_stays_local_and_a_queue_limit_refuses_when_short():
    classes = {c.name: c for c in (SLOClassSpec(name="fast", ttft_ms=500),
                                   SLOClassSpec(name="slow", overflow=False),
                                   SLOClassSpec(name="none", overflow=False, queue_limit=0))}
    cfg = SimConfig(profile=SMALL, classes=classes, overflow=OverflowPolicy(enabled=True, max_waiting_per_replica=0))
    gateway, slots = _gateway(cfg)  # waiting 0 per replica: short from the start
    reqs = [SimRequest(0.0, 100, 4, klass=k) for k in ("fast", "slow", "none")]
    for r in reqs:
        gateway.arrive(slots, r, 0.0)
    assert [r.where for r in reqs] == ["overflow", "local", "rejected"]


def test_the_table_per_class_and_tenant_on_a_small_trace():
    """Two tenants and a third sending 10x its share through one replica: batch never overflows and nothing is lost,
    the abusive tenant is refused past its limit and the others never are."""
    burst = idle_then_burst(base_rate=0.5, burst_rate=12, duration_s=600, burst_at_s=200, burst_len_s=60, bursts=1,
                            prompt_tokens=800, output_tokens=20)
    trace, cfg, *_ = prepare(Options(trace="idle-burst:base_rate=0.5,burst_rate=12,duration_s=600,burst_at_s=200,"
                                           "burst_len_s=60,bursts=1,prompt_tokens=800,output_tokens=20",
                                     classes="interactive=0.3,standard=0.5,batch=0.2", tenants=3, max_num_seqs=16))
    assert cfg.tenants.default.max_requests_per_minute == fair_tenant_rpm(burst, 3)
    assert cfg.classes["interactive"].ttft_ms == 500 and not cfg.classes["batch"].overflow
    res = simulate(trace, Scaler("static-1", decide_static, StaticPolicy(1), 1),
                   replace(cfg, overflow=replace(cfg.overflow, enabled=True)))
    groups = {g.name: g for g in population(res)}
    assert set(list(groups)[:3]) == {"class interactive", "class standard", "class batch"}
    assert list(groups)[3:] == ["tenant t1", "tenant t2", "tenant t3"]
    assert groups["class batch"].overflowed == 0 and groups["class batch"].rejected == 0
    assert groups["class interactive"].overflowed > 0
    assert groups["tenant t3"].refused > 0 and groups["tenant t1"].refused == groups["tenant t2"].refused == 0
    assert groups["tenant t3"].busiest_minute <= 2 * cfg.tenants.default.max_requests_per_minute
    assert sum(groups[f"tenant t{i}"].requests for i in (1, 2, 3)) == len(trace)
    assert Counter(r.where for r in res.requests).keys() <= {"local", "overflow", "rejected", "refused"}
    table = population_table(population(res))
    assert table.splitlines()[0].startswith("| class / tenant") and "| tenant t3" in table


def test_simulate_prints_the_table_per_class_and_tenant_when_given():
    from floodway.operator.simulator.run import run_cli

    out = run_cli(Options(trace="steps:rates=2,step_s=120,prompt_tokens=200,output_tokens=10", static_peak=1,
                          policies=["floodway+overflow"], classes="interactive=0.5,batch=0.5", tenants=2))
    assert "per class and tenant" in out and "t2 sending 10x its share" in out
    assert "| class interactive" in out and "| tenant t2" in out
    assert "per class" not in run_cli(Options(trace="steps:rates=2,step_s=120", static_peak=1,
                                              policies=["floodway"]))


def test_with_engine_priority_a_replica_admits_a_higher_class_first():
    rep = Replica(ReplicaProfile(max_num_seqs=1), 0.0, lambda r: None)
    reqs = [SimRequest(0.0, 100, 50) for _ in range(4)]
    for r, p in zip(reqs, (10, 10, 0, 10), strict=True):
        r.priority = p
        rep.submit(r, 0.0)
    # The 0 takes the seat of the first 10 (preempted, it waits first of its equals); the rest wait in order.
    assert list(rep.prefilling) == [reqs[2]] and list(rep.queue) == [reqs[0], reqs[1], reqs[3]]
    # A prompt being prefilled yields to one admitted after it with a lower number (the engine's scheduler does).
    rep = Replica(ReplicaProfile(max_num_seqs=4, max_num_batched_tokens=64), 0.0, lambda r: None)
    long, short = SimRequest(0.0, 1000, 5), SimRequest(0.0, 100, 5)
    long.priority, short.priority = 10, 0
    rep.submit(long, 0.0)
    rep.submit(short, 0.01)
    rep.advance_to(1.0)
    assert short.first_token_s < long.first_token_s
    gateway, slots = _gateway(SimConfig(profile=SMALL, engine_priority=True,
                                        classes={"batch": SLOClassSpec(name="batch", priority=10)}))
    r = SimRequest(0.0, 100, 4, klass="batch")
    gateway.arrive(slots, r, 0.0)
    assert r.priority == 10


def test_with_engine_priority_a_full_batch_of_long_answers_gives_a_higher_class_its_seat_at_once():
    """Both seats hold batch answers of 1000 tokens (10 ms a step): an interactive request preempts the newer and
    has its first token within a step or two, where without priority it waits for a whole answer (10 s). The
    preempted one recomputes its prompt and the tokens it had, then finishes its answer; nothing is left held."""
    def run(priority):
        rep = Replica(ReplicaProfile(max_num_seqs=2, decode_step_s={1: 0.01}, decode_s_per_kv_token=0.0), 0.0,
                      lambda r: None)
        b1, b2, urgent = SimRequest(0.0, 100, 1000), SimRequest(0.0, 100, 1000), SimRequest(1.0, 50, 10)
        b1.priority = b2.priority = priority
        for r in (b1, b2, urgent):
            rep.submit(r, r.arrival_s)
        rep.advance_to(100.0)
        assert not rep.busy and rep.kv_used == 0 and rep.kv_ctx == 0
        return b1, b2, urgent

    b1, b2, urgent = run(10)
    assert urgent.first_token_s - 1.0 < 0.03
    assert b1.finish_s < b2.finish_s  # b2, the newer, was preempted and recomputed 100 + ~100 tokens
    assert b2.finish_s - b1.finish_s > urgent.finish_s - urgent.first_token_s
    _, _, urgent = run(0)
    assert urgent.first_token_s > 9.0


def test_batch_demand_alone_scales_only_to_the_batch_class_s_cap_and_every_request_completes():
    """A burst of batch requests only: our policy panics to what it needs without a cap, to the cap with one
    (autoscaler/classes.py, fed the simulated gateway's class counters), and the capped run still answers every
    request locally."""
    def run(cap):
        trace, cfg, policy, _, _ = prepare(Options(
            trace="steps:rates=1/25/1,step_s=300,prompt_tokens=400,output_tokens=100", classes="batch=1.0",
            batch_max_replicas=cap, max_num_seqs=16))
        assert policy.class_caps == ((("batch", cap),) if cap is not None else ())
        return trace, compare.run(trace, ["floodway"], cfg, policy, compare.Sizing(4, 2, 1, 8))[1][0]

    _, free = run(None)
    assert max(x["desired"] for x in free.timeline) == 8
    trace, capped = run(2)
    assert max(x["desired"] for x in capped.timeline) == 2
    assert [r.where for r in capped.requests] == ["local"] * len(trace)
    assert all(r.finish_s is not None for r in capped.requests)


def test_a_request_is_held_to_its_class_s_ttft_and_tpot_slos_else_the_service_s():
    cfg = SimConfig(ttft_slo_s=0.5, tpot_slo_s=0.05, classes={
        "chat": SLOClassSpec(name="chat", ttft_ms=200, tpot_ms=20), "bulk": SLOClassSpec(name="bulk")})
    r = SimRequest(0.0, 100, 11, klass="chat")
    r.first_token_s, r.finish_s, r.where = 0.1, 0.1 + 10 * 0.03, "local"  # TTFT 100 ms, TPOT 30 ms
    assert not met(cfg, r)
    r.klass = "bulk"
    assert met(cfg, r)
    r.first_token_s, r.finish_s = 0.6, 0.9
    assert not met(cfg, r)


def test_batch_is_held_to_ten_times_the_service_s_tpot_and_the_other_classes_to_the_service_s():
    """Batch jobs only need throughput: an answer slowed past the service's TPOT (preempted, recomputed) still counts
    as met within 10x; interactive and standard have no tpotMs of their own."""
    specs = {c["name"]: c for c in class_specs(list(MIX), 0.5, 0.05)}
    assert specs["batch"]["tpotMs"] == pytest.approx(500) and specs["batch"]["ttftMs"] == pytest.approx(60000)
    assert "tpotMs" not in specs["interactive"] and "tpotMs" not in specs["standard"]
    _, cfg, *_ = prepare(Options(trace="steps:rates=2,step_s=60", classes="interactive=0.3,standard=0.5,batch=0.2",
                                 tpot_slo_s=0.1))
    assert cfg.tpot_slo_of("batch") == pytest.approx(1.0)
    assert cfg.tpot_slo_of("interactive") == cfg.tpot_slo_of("standard") == cfg.tpot_slo_of(None) == 0.1
    r = SimRequest(0.0, 100, 11, klass="batch")
    r.first_token_s, r.finish_s, r.where = 1.0, 1.0 + 10 * 0.6, "local"  # TPOT 600 ms: 6x the service's
    assert met(cfg, r)
    r.klass = "standard"
    assert not met(cfg, r)
    r.klass, r.finish_s = "batch", 1.0 + 10 * 1.2  # 12x: a starved answer misses
    assert not met(cfg, r)
