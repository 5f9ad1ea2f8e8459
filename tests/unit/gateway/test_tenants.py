"""The tenant admission rule (gateway/tenants.py) with an injected clock: windows, reset times, Retry-After values,
concurrency slots, the overflow cap; the tenants file; and how the spec's gateway.tenants reaches the gateway."""

import asyncio

import pytest
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.gateway.overflow import OverflowPolicy, PoolState, RequestInfo, overflow_decision
from floodway.operator.gateway.tenant_gate import WithRelease
from floodway.operator.gateway.tenants import (
    ANONYMOUS,
    CONCURRENT,
    REQUESTS,
    TOKENS,
    TenantState,
    admit,
    merged_limits,
    overflow_allows,
    overflow_taken,
    parse_tenants,
    released,
    reset_text,
    tenant_of,
)
from floodway.operator.render import Images, Owner
from floodway.operator.render.gateway import cluster_gateway_config, gateway_deployment
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.models import TenantLimitsSpec, TenantSpec
from pydantic import ValidationError

T0 = 1000.0  # any monotonic origin


def run(limits: TenantLimitsSpec, times_tokens, state=TenantState()):
    """The admissions of requests (at, tokens) in order (none released), and the counters after them."""
    out = []
    for at, tokens in times_tokens:
        a = admit(state, limits, tokens, at)
        state = a.state
        out.append(a)
    return out, state


def test_requests_per_minute_admit_a_burst_of_the_limit_then_refuse_until_the_bucket_refills():
    limits = TenantLimitsSpec(max_requests_per_minute=3)
    got, state = run(limits, [(T0, 10)] * 4)
    assert [a.refused for a in got] == [None, None, None, REQUESTS]
    first = dict(got[0].headers)
    assert first == {"x-ratelimit-limit-requests": "3", "x-ratelimit-remaining-requests": "2",
                     "x-ratelimit-reset-requests": "20s"}  # one of three spent: a third of a minute to refill
    refused = dict(got[3].headers)
    assert refused["x-ratelimit-remaining-requests"] == "0" and refused["x-ratelimit-reset-requests"] == "1m0s"
    assert refused["retry-after"] == "20" and refused["retry-after-ms"] == "20000"  # one request refills in 20 s
    assert got[3].retry_after_s == pytest.approx(20.0)
    assert got[3].state == got[2].state  # a refusal charges nothing
    # 19.5 s later the bucket holds 0.975 of a request: still refused, Retry-After rounded up to whole seconds.
    late = admit(state, limits, 10, T0 + 19.5)
    assert late.refused == REQUESTS and dict(late.headers)["retry-after"] == "1"
    assert dict(late.headers)["retry-after-ms"] == "500"
    assert admit(state, limits, 10, T0 + 20.0).refused is None


def test_tokens_per_minute_count_the_estimate_and_name_the_binding_limit():
    limits = TenantLimitsSpec(max_requests_per_minute=100, max_tokens_per_minute=600)
    got, state = run(limits, [(T0, 400), (T0, 300)])
    assert got[0].refused is None and got[1].refused == TOKENS
    h = dict(got[0].headers)
    assert h["x-ratelimit-limit-tokens"] == "600" and h["x-ratelimit-remaining-tokens"] == "200"
    assert h["x-ratelimit-reset-tokens"] == "40s" and h["x-ratelimit-remaining-requests"] == "99"
    assert h["x-ratelimit-reset-requests"] == "600ms"
    assert dict(got[1].headers)["retry-after"] == "10"  # 100 tokens missing at 10 tokens/s
    # A request larger than a whole minute's tokens costs the full bucket instead of never fitting.
    big = admit(TenantState(), limits, 5000, T0)
    assert big.refused is None and dict(big.headers)["x-ratelimit-remaining-tokens"] == "0"


def test_concurrency_slots_are_held_until_released():
    limits = TenantLimitsSpec(max_concurrent_requests=2)
    got, state = run(limits, [(T0, 1)] * 3)
    assert [a.refused for a in got] == [None, None, CONCURRENT] and state.in_flight == 2
    assert got[2].retry_after_s == 1.0 and dict(got[2].headers)["retry-after"] == "1"
    assert not [k for k, _ in got[0].headers if k.startswith("x-ratelimit")]  # no rate limit set: no rate headers
    state = released(state)
    assert admit(state, limits, 1, T0).refused is None
    assert released(TenantState()).in_flight == 0  # never below zero


def test_without_limits_everything_is_admitted_without_headers():
    got, state = run(TenantLimitsSpec(), [(T0, 10**6)] * 50)
    assert all(a.refused is None and a.headers == () for a in got) and state.in_flight == 50


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (0.0004, "1ms"), (0.12, "120ms"), (1.5, "1.5s"), (20, "20s"),
                                           (59.9999, "1m0s"), (60, "1m0s"), (90.25, "1m30.25s")])
def test_reset_durations_in_openais_format(seconds, text):
    assert reset_text(seconds) == text


def test_the_overflow_cap_is_a_bucket_of_overflowed_tokens():
    assert overflow_allows(TenantState(), TenantLimitsSpec(), 10**6, T0)  # no cap
    assert not overflow_allows(TenantState(), TenantLimitsSpec(max_overflow_tokens_per_minute=0), 1, T0)  # never
    capped = TenantLimitsSpec(max_overflow_tokens_per_minute=120)
    state = overflow_taken(TenantState(), capped, 100, T0)
    assert overflow_allows(state, capped, 20, T0) and not overflow_allows(state, capped, 30, T0)
    assert overflow_allows(state, capped, 30, T0 + 5.0)  # 2 tokens/s refill: 10 more after 5 s


def test_a_spent_tenant_cap_keeps_the_request_local_or_holds_it():
    policy, info = OverflowPolicy(enabled=True), RequestInfo(10, T0, tenant_capped=True)
    busy = PoolState(ready=1, waiting=10)
    assert overflow_decision(busy, policy, RequestInfo(10, T0), T0).target == "overflow"
    local = overflow_decision(busy, policy, info, T0)
    assert (local.target, local.reason) == ("local", "tenant_overflow_cap")
    assert overflow_decision(PoolState(ready=0), policy, info, T0).target == "hold"


def test_a_listed_tenant_overrides_only_the_fields_it_sets():
    default = TenantLimitsSpec(max_requests_per_minute=60, max_concurrent_requests=4)
    own = TenantSpec(name="batch", max_concurrent_requests=1, max_tokens_per_minute=1000)
    assert merged_limits(default, own) == TenantLimitsSpec(max_requests_per_minute=60, max_tokens_per_minute=1000,
                                                           max_concurrent_requests=1)


def test_tenants_file():
    text = "# team keys\nsk-a  alpha\n\n   sk-b beta\nsk-c alpha\n"
    assert parse_tenants(text) == {"sk-a": "alpha", "sk-b": "beta", "sk-c": "alpha"}
    for bad, line in (("sk-secret\n", 1), ("ok a\nsk-secret two words\n", 2), ("sk-secret b@d\n", 1),
                      ("sk-secret a\nsk-secret b\n", 2)):
        with pytest.raises(ValueError, match=f"line {line}") as e:
            parse_tenants(bad)
        assert "sk-secret" not in str(e.value)  # never the key


def test_a_key_names_its_tenant_a_client_token_is_anonymous_others_are_refused():
    keys, tokens = {"sk-a": "alpha"}, {"tok"}
    assert tenant_of("sk-a", keys, tokens) == "alpha"
    assert tenant_of("tok", keys, tokens) == ANONYMOUS
    assert tenant_of("sk-b", keys, tokens) is None and tenant_of("", keys, tokens) is None
    assert tenant_of("s\u00e9", keys, tokens) is None  # not ASCII: refused, not a crash


def _spec(**gateway) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({"model": "m", "gateway": gateway})


def test_the_spec_reaches_the_gateway_config_and_mounts_the_tenants_file():
    spec = _spec(tenantsSecretRef={"name": "tenants", "key": "file"},
                 tenants={"default": {"maxRequestsPerMinute": 60},
                          "limits": [{"name": "batch", "maxConcurrentRequests": 1}]})
    owner = Owner("svc", "ns")
    config = GatewayConfig.model_validate(cluster_gateway_config(spec, owner))
    assert config.tenants.enabled()
    assert config.tenants.limits_by_name() == {"batch": TenantLimitsSpec(max_requests_per_minute=60,
                                                                         max_concurrent_requests=1)}
    pod = gateway_deployment(spec, owner, Images())["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "tenants")
    assert volume["secret"] == {"secretName": "tenants", "items": [{"key": "file", "path": "tenants"}]}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tenants")
    assert config.tenants.keys_file == f"{mount['mountPath']}/tenants"
    plain = cluster_gateway_config(_spec(), owner)
    assert "tenants" not in plain and not GatewayConfig.model_validate(plain).tenants.enabled()


def test_tenant_names_are_unique_and_limits_positive():
    with pytest.raises(ValidationError, match="must be unique"):
        _spec(tenants={"limits": [{"name": "a"}, {"name": "a"}]})
    with pytest.raises(ValidationError):
        _spec(tenants={"default": {"maxRequestsPerMinute": 0}})
    with pytest.raises(ValidationError):
        _spec(tenants={"limits": [{"name": "has space"}]})


@pytest.mark.parametrize("fails", [False, True])
def test_an_answer_carries_the_headers_and_frees_its_slot_once_however_it_ends(fails):
    sent, freed = [], []

    async def answer(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        if fails:  # an engine failing, or the client gone (the server cancels the answer)
            raise asyncio.CancelledError
        await send({"type": "http.response.body", "body": b"ok"})

    async def send(message):
        sent.append(message)

    wrapped = WithRelease(answer, (("x-ratelimit-limit-requests", "3"),), lambda: freed.append(1))
    try:
        asyncio.run(wrapped({}, None, send))
    except asyncio.CancelledError:
        assert fails
    assert sent[0]["headers"] == [(b"content-type", b"text/plain"), (b"x-ratelimit-limit-requests", b"3")]
    assert freed == [1]
