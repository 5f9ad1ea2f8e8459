"""Fair share in the gateway's hold queue: the virtual token counter rule (fair_share.py) as pure functions, and
through the proxy (the queue's thin shell) with an injected clock and an engine stand-in that answers when the test
says: a class's queueLimit and TTFT SLO, a light tenant's requests released interleaved with a heavy one's, and the
TTFT SLO attainment counted by tenant and class."""

import asyncio
import json
import random

from floodway.operator.gateway.backends import BackendTable
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.fair_share import Held, joined, left, next_turn
from floodway.operator.gateway.metrics import GatewayMetrics
from floodway.operator.gateway.overflow import OverflowPolicy, PoolState, RequestInfo, overflow_decision
from floodway.operator.gateway.proxy import Gateway, Reply
from floodway.operator.gateway.routing import RoutingWeights


def queue(*tenants_tokens, klass="tools"):
    """Held requests joined in this order (tenant, tokens), and the counters after they joined."""
    held, counters = [], {}
    for seq, (tenant, tokens) in enumerate(tenants_tokens):
        entry = Held(seq, tenant, klass, 0, tokens)
        counters = joined(counters, held, entry)
        held.append(entry)
    return held, counters


def release_all(held, counters):
    """The tenants in the order the queue releases them, each released in its turn (one per round)."""
    order = []
    while held:
        pick = next(h for h in held if h.seq == next_turn(held, counters, ()))
        held = [h for h in held if h is not pick]
        counters = left(counters, held, pick, released=True)
        order.append(pick.tenant)
    return order


def test_a_light_tenant_is_released_interleaved_with_a_heavy_ones_backlog():
    held, counters = queue(*[("heavy", 100)] * 8, ("light", 100), ("light", 100))
    assert release_all(held, counters) == ["heavy", "light", "heavy", "light"] + ["heavy"] * 6
    # FIFO (the order they joined) would release both light requests last.


def test_counters_weigh_tokens_not_requests():
    held, counters = queue(("big", 400), ("big", 400), *[("small", 100)] * 8)
    assert release_all(held, counters)[:6] == ["big", "small", "small", "small", "small", "big"]


def test_a_tenant_back_from_idle_starts_at_the_smallest_backlogged_counter():
    held, counters = queue(("a", 100), ("b", 100))
    counters = {("tools", "a"): 900.0, ("tools", "b"): 700.0, ("tools", "idle"): 5.0}
    back = Held(9, "idle", "tools", 0, 100)
    assert joined(counters, held, back)[("tools", "idle")] == 700.0  # no credit banked while away
    assert joined({**counters, ("tools", "idle"): 800.0}, held, back)[("tools", "idle")] == 800.0  # keeps a debt
    assert joined(counters, [Held(0, "idle", "tools")], back) == counters  # still backlogged: unchanged
    other_class = Held(9, "idle", "batch", 0, 100)
    assert joined(counters, held, other_class)[("batch", "idle")] == 0.0  # fairness is within a class


def test_counters_are_charged_on_release_only_and_dropped_when_the_class_empties():
    a, b = Held(0, "a", "tools", 0, 50), Held(1, "b", "tools", 0, 70)
    assert left({}, [b], a, released=True) == {("tools", "a"): 50.0}
    assert left({}, [b], a, released=False) == {}  # refused or gone: nothing served
    assert left({("tools", "a"): 50.0, ("batch", "x"): 3.0}, [], b, released=True) == {("batch", "x"): 3.0}


def test_a_round_looks_at_each_held_request_once_higher_classes_first():
    held = [Held(0, "a", "batch", 10), Held(1, "a", "tools", 5), Held(2, "b", "tools", 5)]
    counters = {("tools", "a"): 10.0}
    done: list[int] = []
    while (turn := next_turn(held, counters, done)) is not None:
        done.append(turn)
    assert done == [2, 1, 0]


def test_a_classs_queue_limit_and_ttft_slo_bound_its_wait():
    policy = OverflowPolicy(enabled=True, hold_timeout_s=10.0)
    short = PoolState(ready=1, waiting=5, predicted_ttft_s=0.5, held=3, held_of_class=3)
    tools = RequestInfo(10, 0.0, class_local=True, queue_limit=4, ttft_slo_s=2.0)
    assert overflow_decision(short, policy, tools, 0.0).target == "hold"  # within its limit
    full = overflow_decision(PoolState(ready=1, waiting=5, held=4, held_of_class=4), policy, tools, 0.0)
    assert (full.target, full.reason, full.retry_after_s) == ("reject", "class_queue_full:class_local", 1.0)
    late = overflow_decision(short, policy, RequestInfo(10, 0.0, class_local=True, queue_limit=4, ttft_slo_s=2.0,
                                                        held=True), 1.5)
    assert (late.target, late.reason) == ("reject", "class_ttft_slo:class_local")  # 1.5 s waited + 0.5 s ahead
    batch = RequestInfo(10, 0.0, class_local=True, queue_limit=0)
    assert overflow_decision(short, policy, batch, 0.0).target == "reject"  # 0: refused when short
    assert overflow_decision(PoolState(ready=1), policy, batch, 0.0).target == "local"  # not short: served
    assert overflow_decision(short, policy, RequestInfo(10, 0.0, class_local=True), 0.0).target == "local"  # unset
    # A class that may overflow, with the API unavailable to it, waits within its limit instead of the engines.
    spent = overflow_decision(short, OverflowPolicy(enabled=False), RequestInfo(10, 0.0, queue_limit=4), 0.0)
    assert (spent.target, spent.reason) == ("hold", "overflow_disabled")


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


async def _settle(gateway: Gateway, held: int) -> None:
    for _ in range(200):
        if gateway.held == held:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{gateway.held} held, expected {held}")


def _gateway(clock, queue_limit=16, ttft_ms=None) -> tuple[Gateway, list[str], list[asyncio.Event]]:
    """A gateway whose one engine runs one request at once (max_num_seqs 1, the overflow threshold 1 waiting),
    tenants heavy and light of class tools (may not overflow, queueLimit); its engine stand-in records each
    request's prompt and answers when the test sets its event."""
    config = GatewayConfig.model_validate({
        "served_models": ["base"], "backends": {"static": ["http://engine"]},
        "classes": [{"name": "tools", "overflow": False, "queue_limit": queue_limit, "ttft_ms": ttft_ms}],
        "tenants": {"default": {"default_class": "tools"}},
        "overflow": {"enabled": True, "base_url": "http://api/v1", "max_waiting_per_replica": 1}})
    table = BackendTable(RoutingWeights(), random.Random(0))
    table.set_endpoints([("http://engine", "http://engine")])
    backend = table.backends["http://engine"]
    backend.ready, backend.max_num_seqs = True, 1
    gateway = Gateway(config, table, GatewayMetrics(), None, None, clock=clock)
    sent, gates = [], []

    async def local(choice, path, body, stream, t0, predicted):
        choice.backend.in_flight += 1
        sent.append(json.loads(body)["prompt"])
        gates.append(gate := asyncio.Event())
        await gate.wait()
        choice.backend.in_flight -= 1
        gateway.notify()
        return Reply(b"{}", 200, choice.backend.id, "application/json")

    gateway._local = local
    return gateway, sent, gates


async def test_the_hold_queue_releases_a_light_tenant_between_a_heavy_ones_requests():
    gateway, sent, gates = _gateway(Clock())
    body = lambda p: json.dumps({"model": "base", "prompt": p, "max_tokens": 10}).encode()  # noqa: E731
    calls = [asyncio.create_task(gateway.handle("/v1/completions", body(f"heavy{i}"), {}, "heavy"))
             for i in range(6)]
    await _settle(gateway, 4)  # two on the engine (one running, one queued there), four held
    calls += [asyncio.create_task(gateway.handle("/v1/completions", body(f"light{i}"), {}, "light"))
              for i in range(2)]
    await _settle(gateway, 6)
    for i in range(8):  # the engine answers one at a time; each answer frees a place for one held request
        gates[i].set()
        await _settle(gateway, max(0, 6 - i - 1))
    await asyncio.gather(*calls)
    assert sent == ["heavy0", "heavy1", "heavy2", "light0", "heavy3", "light1", "heavy4", "heavy5"]
    assert gateway.hold.fair == {} and gateway.hold.turn is None  # nothing held: counters dropped, no round


async def test_past_its_queue_limit_or_its_ttft_slo_a_request_gets_429_with_retry_after():
    clock = Clock()
    gateway, sent, gates = _gateway(clock, queue_limit=1, ttft_ms=1000)
    body = json.dumps({"model": "base", "prompt": "p", "max_tokens": 10}).encode()
    calls = [asyncio.create_task(gateway.handle("/v1/completions", body, {}, "heavy")) for _ in range(3)]
    await _settle(gateway, 1)  # two on the engine, one held: the class's limit
    refused = await gateway.handle("/v1/completions", body, {}, "light")
    refused = refused.answer
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert b"class_queue_full" in refused.body
    clock.now += 1.0  # the held one has waited its whole TTFT SLO: it can no longer meet it
    gateway.notify()  # a round looks at it (as a finished request or a scrape would start one)
    late = (await calls[2]).answer
    assert late.status_code == 429 and b"class_ttft_slo" in late.body and gateway.held == 0
    for gate in gates:
        gate.set()
    assert [(await c).answer.status_code for c in calls[:2]] == [200, 200]


async def test_streamed_answers_count_against_their_classs_ttft_slo_by_tenant_and_class():
    clock = Clock()
    gateway, sent, gates = _gateway(clock, ttft_ms=1000)
    m = gateway.metrics

    async def ask(tenant: str, stream: bool, late_s: float):
        body = json.dumps({"model": "base", "prompt": "p", "max_tokens": 10, "stream": stream}).encode()
        call, before = asyncio.create_task(gateway.handle("/v1/completions", body, {}, tenant)), len(gates)
        while len(gates) == before:  # until the engine stand-in has it
            await asyncio.sleep(0)
        clock.now += late_s  # the first token comes this long after the request arrived
        gates[-1].set()
        return await call

    await ask("heavy", True, 0.4)
    await ask("heavy", True, 1.5)
    await ask("light", True, 1.0)  # at the SLO: met
    await ask("light", False, 0.1)  # a whole answer's first byte is its last token: not measured
    values = {(c._name, labels): child._value.get() for c in (m.tenant_ttft_measured, m.tenant_ttft_met,
                                                              m.class_ttft_measured, m.class_ttft_met)
              for labels, child in c._metrics.items()}
    assert values == {("floodway_gateway_tenant_ttft_measured", ("heavy",)): 2,
                      ("floodway_gateway_tenant_ttft_measured", ("light",)): 1,
                      ("floodway_gateway_tenant_ttft_slo_met", ("heavy",)): 1,
                      ("floodway_gateway_tenant_ttft_slo_met", ("light",)): 1,
                      ("floodway_gateway_class_ttft_measured", ("tools",)): 3,
                      ("floodway_gateway_class_ttft_slo_met", ("tools",)): 2}


async def test_an_arrival_joins_behind_its_classs_held_requests_and_a_cancelled_turn_passes_on():
    gateway, sent, gates = _gateway(Clock())
    body = lambda p: json.dumps({"model": "base", "prompt": p, "max_tokens": 10}).encode()  # noqa: E731
    calls = [asyncio.create_task(gateway.handle("/v1/completions", body(f"r{i}"), {}, "heavy")) for i in range(5)]
    await _settle(gateway, 3)  # r0, r1 on the engine; r2, r3, r4 held
    gateway.notify()  # a round begins: r2's turn; its client goes away before it looks
    assert gateway.hold.turn == min(gateway.hold.queue)
    calls[2].cancel()
    await _settle(gateway, 2)
    gateway.table.backends["http://engine"].max_num_seqs = 10  # room for all, no round yet
    late = asyncio.create_task(gateway.handle("/v1/completions", body("r5"), {}, "heavy"))
    await _settle(gateway, 0)  # r5 could go at once, but joins behind r3 and r4: one round releases all three
    assert sent == ["r0", "r1", "r3", "r4", "r5"]
    for gate in gates:
        gate.set()
    await asyncio.gather(*calls[:2], *calls[3:], late)
