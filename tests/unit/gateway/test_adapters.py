"""The gateway's adapter rules: which adapter a request names, the overflow API's model per local model, adapter
holders for affinity (scored as the prefix cache's, under its load cap), and prefix keys that never cross adapters."""

import json
import random

import aiohttp
from aiohttp import web
from floodway.operator.gateway.adapters import AdapterIndex, adapter_hits, adapter_of, never_overflows, overflow_model
from floodway.operator.gateway.backends import BackendTable, listed_adapters
from floodway.operator.gateway.overflow import OverflowPolicy, PoolState, RequestInfo, overflow_decision
from floodway.operator.gateway.prefix_index import BLOCK_CHARS, request_keys
from floodway.operator.gateway.routing import BackendLoad, PrefixPolicy, RoutingWeights, pick_prefix

from tests.unit.gateway.stand_in import serve


def test_adapter_of_names_every_other_served_name_or_what_the_engines_list():
    assert adapter_of("support", "base", ()) == "support"
    assert adapter_of("base", "base", ()) is None and adapter_of(None, "base", ()) is None
    # Without served_models the base is unknown: only a name some engine lists as an adapter is one.
    assert adapter_of("support", None, {"support"}) == "support"
    assert adapter_of("base", None, {"support"}) is None and adapter_of(None, None, {"support"}) is None


def test_overflow_model_maps_names_and_never_sends_an_unmapped_adapter():
    mapping = {"support-bot": "gpt-small-ft", "base": "gpt-small"}
    assert overflow_model("support-bot", "support-bot", mapping, None) == "gpt-small-ft"
    assert overflow_model("base", None, mapping, "other") == "gpt-small"  # the mapping wins over overflow.model
    assert never_overflows("legal-bot", mapping)  # the API never heard of it
    assert not never_overflows("support-bot", mapping) and not never_overflows(None, {})
    assert overflow_model("base", None, {}, "gpt-small") == "gpt-small"
    assert overflow_model("base", None, {}, None) == "base"
    assert overflow_model(None, None, {}, None) is None  # nothing named, base unknown: the client's body as is


def test_adapter_hits_only_for_adapters():
    holders = {"e1": {"a", "b"}, "e2": {"b"}, "e3": set()}
    assert adapter_hits("b", holders) == {"e1": 1.0, "e2": 1.0}
    assert adapter_hits("a", holders) == {"e1": 1.0}
    assert adapter_hits(None, holders) == {}


def test_index_forgets_the_least_recently_sent_beyond_the_slots():
    idx = AdapterIndex(slots=2)
    for a in ("x", "y", "x", "z"):
        idx.sent("e1", a)
    idx.listed("e2", {"x"})
    idx.listed("e3", {"x", "y", "z"})  # more than its slots: which are resident is unknown
    assert idx.holders() == {"e1": {"x", "z"}, "e2": {"x"}, "e3": frozenset()}
    assert idx.names() == {"x", "y", "z"}
    idx.forget("e1")
    assert "e1" not in idx.holders()
    idx.retain(["e3"])
    assert idx.holders() == {"e3": frozenset()} and idx.names() == {"x", "y", "z"}


def test_listed_adapters_are_the_entries_with_a_parent():
    body = {"object": "list", "data": [{"id": "base", "parent": None}, {"id": "fmt", "parent": "base"},
                                       {"id": "x", "parent": "base", "root": "/a"}, "junk"]}
    assert listed_adapters(json.dumps(body)) == ["fmt", "x"]
    assert listed_adapters("not json") == listed_adapters("[]") == listed_adapters('{"data": 3}') == []


def test_affinity_picks_the_holder_within_the_load_cap():
    loads = [BackendLoad("e1", True, recent_work=10.0), BackendLoad("e2", True, recent_work=10.0),
             BackendLoad("e3", True, recent_work=10.0)]
    held = adapter_hits("a", {"e2": {"a"}})
    w, p = RoutingWeights(), PrefixPolicy()
    assert {pick_prefix(loads, {}, random.Random(s), w, p, resident=held).id for s in range(20)} == {"e2"}
    busy = [loads[0], BackendLoad("e2", True, recent_work=100.0), loads[2]]  # past the cap: load decides
    assert "e2" not in {pick_prefix(busy, {}, random.Random(s), w, p, resident=held).id for s in range(20)}
    # Held everywhere: no reason to prefer any; the load-only pick spreads them.
    everywhere = adapter_hits("a", {b.id: {"a"} for b in loads})
    assert len({pick_prefix(loads, {}, random.Random(s), w, p, resident=everywhere).id for s in range(20)}) > 1
    # Holding the adapter is worth prefix_weight queued requests, no more.
    for running, chosen in ((p.prefix_weight - 0.5, "e2"), (p.prefix_weight + 0.5, "e1")):
        pool = [BackendLoad("e1", True), BackendLoad("e2", True, running=running)]
        assert pick_prefix(pool, {}, random.Random(0), w, p, resident={"e2": 1.0}).id == chosen


def test_a_table_keeps_an_adapter_on_its_holder_and_prefills_it_in_full():
    table = BackendTable(RoutingWeights(), random.Random(0), prefix=PrefixPolicy(), max_loras=1)
    table.set_endpoints([("e1", "http://e1"), ("e2", "http://e2")])
    for b in table.backends.values():
        b.ready = True
    table.adapters.listed("e2", ["b"])
    keys = request_keys({"prompt": "q" * BLOCK_CHARS * 4}, "a")
    first = table.choose(frozenset(), keys, 64, "a")
    table.take(first, keys, "a")
    holder = first.backend.id
    other_keys = request_keys({"prompt": "w" * BLOCK_CHARS * 4}, "a")  # another prompt: the adapter alone decides
    again = table.choose(frozenset(), other_keys, 64, "a")
    assert again.backend.id == holder and again.uncached == 64  # the adapter saves no prefill
    assert table.choose(frozenset(), [], 64, "b").backend.id == "e2"  # listed at startup
    table.mark_unready(holder)
    assert holder not in table.adapters.holders()


def test_prefix_keys_never_cross_adapters():
    payload = {"prompt": "p" * BLOCK_CHARS * 3}
    base, a, b = request_keys(payload), request_keys(payload, "a"), request_keys(payload, "b")
    assert len(base) == len(a) == len(b) == 3
    assert not set(base) & set(a) and not set(a) & set(b) and not set(base) & set(b)
    assert request_keys(payload, "a") == a and request_keys(payload, None) == base


def test_an_unmapped_model_is_served_locally_or_held_never_overflowed():
    policy = OverflowPolicy(enabled=True, hold_queue_size=2, hold_timeout_s=10.0)
    unmapped = RequestInfo(100, arrived_at=0.0, unmapped_model=True)
    mapped = RequestInfo(100, arrived_at=0.0)
    queued = PoolState(ready=1, waiting=10.0)  # past max_waiting_per_replica: the queue-depth trigger fires
    assert overflow_decision(queued, policy, mapped, 0.0).target == "overflow"
    assert (overflow_decision(queued, policy, unmapped, 0.0).target,
            overflow_decision(queued, policy, unmapped, 0.0).reason) == ("local", "model_not_mapped")
    none_ready = PoolState(ready=0)
    assert overflow_decision(none_ready, policy, unmapped, 0.0).target == "hold"
    full = overflow_decision(PoolState(ready=0, held=2), policy, unmapped, 0.0)
    assert (full.target, full.reason, full.retry_after_s) == ("reject", "hold_queue_full:model_not_mapped", 1.0)


def test_the_spec_gives_engines_and_gateway_one_slot_count_and_the_overflow_names():
    from floodway.engine.config import EngineConfig
    from floodway.operator.gateway.config import GatewayConfig
    from floodway.operator.render.engine import engine_args
    from floodway.operator.render.gateway import gateway_config
    from floodway.operator.spec import InferenceServiceSpec

    overflow = {"enabled": True, "baseURL": "https://api.example.com/v1", "models": {"support": "api-support"},
                "apiKeySecretRef": {"name": "k", "key": "k"}}
    adapters = [{"name": "support", "source": "a/support"}, {"name": "legal", "source": "a/legal"}]
    spec = InferenceServiceSpec.model_validate({"model": "base", "adapters": adapters, "overflow": overflow})
    config = GatewayConfig.model_validate(gateway_config(spec, {"static": ["http://127.0.0.1:9"]}, 9000))
    args = engine_args(spec, "0.0.0.0", 8000)
    assert config.max_loras == int(args[args.index("--max-loras") + 1]) == 2
    assert config.served_models == ["base", "support", "legal"]
    assert config.overflow.models == {"support": "api-support"} and config.overflow.model == "base"
    plain = InferenceServiceSpec.model_validate({"model": "base"})
    assert GatewayConfig.model_validate(gateway_config(plain, {"static": ["http://127.0.0.1:9"]}, 9000)).max_loras == \
        EngineConfig.max_loras


async def test_a_backend_turning_ready_is_read_for_its_adapters_and_forgotten_when_unready():
    ready = {"status": 200}
    models = {"object": "list", "data": [{"id": "base", "object": "model", "parent": None},
                                         {"id": "support", "object": "model", "parent": "base"}]}

    async def probe(_):
        return web.Response(status=ready["status"], text="")

    async def listing(_):
        return web.json_response(models)
    app = web.Application()
    app.router.add_get("/ready", probe)
    app.router.add_get("/metrics", probe)
    app.router.add_get("/v1/models", listing)
    runner, url = await serve(app)
    table = BackendTable(RoutingWeights(), random.Random(0), prefix=PrefixPolicy(), max_loras=2)
    table.set_endpoints([("e", url)])
    try:
        async with aiohttp.ClientSession() as session:
            await table.refresh(session, 5.0)
            assert table.backends["e"].ready and table.adapters.holders() == {"e": {"support"}}
            assert table.adapters.names() == {"support"}
            ready["status"] = 503  # draining or restarting: its slots are gone
            await table.refresh(session, 5.0)
            assert table.adapters.holders() == {} and table.adapters.names() == frozenset()
    finally:
        await runner.cleanup()
