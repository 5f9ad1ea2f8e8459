"""The operator's decisions without a cluster: policy mapping, ticks, status, events, pods, paths (the lease:
test_lease.py)."""

import dataclasses

import pytest
from floodway.operator.autoscaler.policy import TARGET_BATCH_SHARE, AutoscalerPolicy, ScalerState
from floodway.operator.autoscaler.signals import EngineSample, GatewaySample, Scrape, Signals
from floodway.operator.controller.conditions import set_condition, transition_events
from floodway.operator.controller.kube import object_path
from floodway.operator.controller.pods import any_ready, engine_pods, secret_problem
from floodway.operator.controller.scaling import autoscaler_policy, initial_state, spec_values, tick
from floodway.operator.controller.status import Observation, build_status
from floodway.operator.spec import InferenceServiceSpec

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:01:00Z"


def spec(**kw) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({"model": "m", **kw})


def test_the_spec_declares_every_policy_default_it_supplies():
    """A policy field the spec supplies has no default of its own; one it does not supply has one."""
    supplied = set(spec_values(spec()))
    for f in dataclasses.fields(AutoscalerPolicy):
        assert (f.default is dataclasses.MISSING) == (f.name in supplied), f.name


def test_target_concurrency_defaults_to_a_share_of_the_batch():
    assert autoscaler_policy(spec()).target_concurrency == TARGET_BATCH_SHARE * 64 == 40  # engine.maxNumSeqs 64
    assert autoscaler_policy(spec(engine={"maxNumSeqs": 256})).target_concurrency == 160
    given = spec(engine={"maxNumSeqs": 256}, autoscaling={"targetConcurrency": 12})
    assert autoscaler_policy(given).target_concurrency == 12


def test_policy_follows_the_spec():
    p = autoscaler_policy(spec(replicas={"min": 0, "max": 3}, slo={"attainment": 0.9, "ttftMs": 5000},
                               autoscaling={"targetConcurrency": 2, "scaleToZeroAfterSeconds": 30, "sloNoiseZ": 0}))
    assert (p.replicas_min, p.replicas_max, p.target_concurrency, p.slo_attainment, p.scale_to_zero_after_seconds,
            p.slo_noise_z, p.slo_ttft_ms) == (0, 3, 2, 0.9, 30, 0, 5000)


def test_the_overflow_budget_applies_only_where_the_service_overflows():
    api = {"enabled": True, "baseURL": "http://api.example/v1", "apiKeySecretRef": {"name": "k", "key": "key"}}
    assert autoscaler_policy(spec(overflow=api)).overflow_share == 0.04  # the spec's default
    assert autoscaler_policy(spec(overflow=api, autoscaling={"overflowShare": 0})).overflow_share == 0.0
    assert autoscaler_policy(spec(autoscaling={"overflowShare": 0.1})).overflow_share == 0.0  # overflow off


def busy(t: float, waiting: float, finished: float = 0.0) -> Scrape:
    return Scrape(time=t, engines={"e0": EngineSample(running=4, waiting=waiting, kv_usage=0.5,
                                                      finished_total=finished)},
                  gateway=GatewaySample(requests_total=10 * t, overflow_total=2 * t))


def test_tick_scales_up_on_queue_and_reports_signals():
    s = spec(replicas={"min": 1, "max": 4}, autoscaling={"targetConcurrency": 4})
    first = tick(s, initial_state(1, s), None, busy(100.0, waiting=20), 100.0)
    assert first.decision.replicas > 1 and first.signals.ready == 1
    second = tick(s, first.decision.state, busy(100.0, 20), busy(105.0, 20), 105.0)
    assert second.signals.arrival_rate == pytest.approx(10.0) and second.signals.overflow_rate == pytest.approx(2.0)


def test_tick_holds_min_when_autoscaling_is_off():
    s = spec(replicas={"min": 2, "max": 4}, autoscaling={"enabled": False})
    assert tick(s, ScalerState(replicas=3), None, busy(1.0, 50), 1.0).decision.replicas == 2


@pytest.mark.parametrize("current, expected", [(None, 1), (0, 1), (3, 3), (9, 4)])
def test_initial_state_is_within_bounds(current, expected):
    assert initial_state(current, spec(replicas={"min": 1, "max": 4})).replicas == expected


def conds(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


def test_status_ready_scaling_and_columns():
    s = spec(overflow={"enabled": True, "baseURL": "https://x/v1", "apiKeySecretRef": {"name": "k", "key": "v"}})
    sig = Signals(ready=1, running=(3.0,), waiting=(5.0,), kv_usage=(0.4,), arrival_rate=4.0, overflow_rate=1.0,
                  attainment=0.95, goodput=2.0, finished_rate=2.5)
    st = build_status(s, {}, Observation(replicas=1, ready_replicas=1, desired_replicas=3, gateway_ready=True,
                                         signals=sig, scale_reason="scale up: demand", scaled_at=T0,
                                         fit_level="warning", fit_message="tight"), T0, 2, "a=b", "http://u/v1")
    c = conds(st)
    assert c["Ready"]["status"] == "True" and c["Scaling"]["reason"] == "ScalingUp"
    assert c["Overflowing"]["status"] == "True" and c["SLOAtRisk"]["status"] == "True"
    assert c["FitsGPU"]["status"] == "False" and c["FitsGPU"]["message"] == "tight"
    assert c["OverflowKeyAvailable"]["status"] == "True"
    assert st["observed"] == {"waiting": 5.0, "running": 3.0, "kvCacheUsage": 0.4, "sloAttainment": 0.95,
                              "goodput": 2.0, "arrivalRate": 4.0, "overflowRate": 0.25}
    assert (st["readyReplicas"], st["desiredReplicas"], st["lastScaleTime"], st["selector"]) == (1, 3, T0, "a=b")
    assert all(x["observedGeneration"] == 2 for x in st["conditions"])


def test_status_keeps_transition_time_while_unchanged():
    obs = Observation(replicas=1, ready_replicas=1, desired_replicas=1, gateway_ready=True)
    first = build_status(spec(), {}, obs, T0, 1, "", "")
    again = build_status(spec(), first, obs, T1, 1, "", "")
    assert conds(again)["Ready"]["lastTransitionTime"] == T0
    down = build_status(spec(), again, dataclasses.replace(obs, ready_replicas=0), T1, 1, "", "")
    assert conds(down)["Ready"]["status"] == "False" and conds(down)["Ready"]["lastTransitionTime"] == T1


def test_status_missing_secret_and_scale_to_zero():
    s = spec(replicas={"min": 0, "max": 2},
             overflow={"enabled": True, "baseURL": "https://x/v1", "apiKeySecretRef": {"name": "k", "key": "v"}})
    st = build_status(s, {}, Observation(replicas=0, ready_replicas=0, desired_replicas=0, gateway_ready=False,
                                         secret_problem="overflow API key unavailable: secret \"k\" not found"),
                      T0, 1, "", "")
    c = conds(st)
    assert c["OverflowKeyAvailable"]["reason"] == "SecretMissing" and c["Ready"]["reason"] == "GatewayNotReady"
    st = build_status(s, {}, Observation(replicas=0, ready_replicas=0, desired_replicas=0, gateway_ready=True),
                      T0, 1, "", "")
    assert conds(st)["Ready"]["reason"] == "ScaledToZero"


def test_events_only_on_changes():
    a = set_condition([], "FitsGPU", "False", "TightFit", "only 3 sequences fit", T0)
    assert [e.type for e in transition_events([], a)] == ["Warning"]
    assert transition_events(a, set_condition(a, "FitsGPU", "False", "TightFit", "same", T1)) == []
    healthy = set_condition([], "Ready", "True", "ReplicasReady", "ok", T0)
    assert transition_events([], healthy) == []
    lost = set_condition(healthy, "Ready", "False", "NoReadyReplica", "none", T1)
    assert [(e.type, e.reason) for e in transition_events(healthy, lost)] == [("Warning", "NoReadyReplica")]
    back = set_condition(lost, "Ready", "True", "ReplicasReady", "ok", T1)
    assert [(e.type, e.reason) for e in transition_events(lost, back)] == [("Normal", "ReplicasReady")]


def pod(name, ready=True, ip="10.0.0.1", phase="Running", deleting=False, waiting=None):
    p = {"metadata": {"name": name}, "status": {"phase": phase, "podIP": ip, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}}
    if deleting:
        p["metadata"]["deletionTimestamp"] = T0
    if waiting:
        p["status"]["containerStatuses"] = [{"name": "gateway", "state": {"waiting": waiting}}]
    return p


def test_engine_pods_ready_starting_and_draining():
    found = engine_pods([pod("a"), pod("b", ready=False), pod("c", deleting=True), pod("d", phase="Failed",
                                                                                          ready=False)])
    assert found.ready == {"a": "10.0.0.1"} and found.starting == 1
    assert any_ready([pod("a")]) and not any_ready([pod("a", deleting=True)])


def test_secret_problem_from_kubelet_state():
    msg = 'secret "overflow-key" not found'
    pods = [pod("g", ready=False, waiting={"reason": "CreateContainerConfigError", "message": msg})]
    assert msg in secret_problem(pods, "overflow-key")
    assert secret_problem(pods, "other") is None and secret_problem([pod("g")], "overflow-key") is None


def test_object_paths():
    assert object_path("v1", "Service", "ns", "a") == "/api/v1/namespaces/ns/services/a"
    assert object_path("apps/v1", "Deployment", "ns") == "/apis/apps/v1/namespaces/ns/deployments"
    assert object_path("serving.floodway.io/v1alpha1", "InferenceService", "ns", "x", "status") == (
        "/apis/serving.floodway.io/v1alpha1/namespaces/ns/inferenceservices/x/status")


def test_fit_check_levels_become_conditions():
    from floodway.operator.planner.fit import spec_fit as _fit

    level, message = _fit(spec(model="floodway/tiny-llama", resources={"gpus": 0}))
    assert level == "unchecked" and "no GPU" in message
    tight = spec(model="floodway/llama-150m", resources={"gpus": 1, "gpuMemoryGiB": 2},
                 engine={"maxModelLen": 4096, "maxNumSeqs": 256, "dtype": "float32"})
    level, message = _fit(tight)
    assert level in ("warning", "refuse") and ("maxNumSeqs" in message or "maxModelLen" in message), message
    st = build_status(tight, {}, Observation(fit_level=level, fit_message=message), T0, 1, "", "")
    assert conds(st)["FitsGPU"]["status"] == "False"
    st = build_status(tight, {}, Observation(fit_level="unchecked", fit_message="no GPU"), T0, 1, "", "")
    assert conds(st)["FitsGPU"]["status"] == "Unknown"


def test_scaling_condition_directions_and_unknown_counts():
    up = build_status(spec(), {}, Observation(replicas=3, ready_replicas=1, desired_replicas=3), T0, 1, "", "")
    assert conds(up)["Scaling"]["reason"] == "ScalingUp"
    down = build_status(spec(), up, Observation(replicas=3, ready_replicas=3, desired_replicas=2), T1, 1, "", "")
    assert conds(down)["Scaling"]["reason"] == "ScalingDown"
    kept = build_status(spec(), down, Observation(desired_replicas=2), T1, 1, "", "")  # reconcile: counts unknown
    assert conds(kept)["Scaling"] == conds(down)["Scaling"]
    assert conds(build_status(spec(), {}, Observation(desired_replicas=1), T0, 1, "", ""))["Ready"]["status"] == \
        "Unknown"


def test_local_status_line():
    from floodway.operator.local.runner import status_line

    st = {"readyReplicas": 2, "desiredReplicas": 3, "lastScaleReason": "panic: demand 9",
          "observed": {"waiting": 4, "running": 2, "kvCacheUsage": 0.5, "sloAttainment": 0.97, "overflowRate": 0.25},
          "conditions": [{"type": "Overflowing", "status": "True"}]}
    line = status_line("chat", st)
    assert line.startswith("chat: replicas 2/3 ready  waiting 4  running 2  kv 0.50  slo 0.97")
    assert "OVERFLOWING" in line and line.endswith("| last scale: panic: demand 9")  # not the current decision
    assert status_line("chat", {}).endswith("overflow -")


def test_local_manifest_rules():
    from floodway.operator.local.manifest import DEFAULT_MANIFEST, build, overflow_key, secret_env_name
    from floodway.operator.spec import SpecError

    obj = build(DEFAULT_MANIFEST, "http://127.0.0.1:9/v1")
    assert obj.spec.overflow.enabled and obj.spec.overflow.base_url == "http://127.0.0.1:9/v1"
    assert overflow_key(obj) == "local" and not build(DEFAULT_MANIFEST).spec.overflow.enabled
    assert secret_env_name("team-key", "api.key") == "FLOODWAY_SECRET_TEAM_KEY_API_KEY"
    remote = {**DEFAULT_MANIFEST, "spec": {**DEFAULT_MANIFEST["spec"], "overflow": {
        "enabled": True, "baseURL": "https://x/v1", "apiKeySecretRef": {"name": "k", "key": "v"}}}}
    assert overflow_key(build(remote), {"FLOODWAY_SECRET_K_V": "sk-1"}) == "sk-1"
    with pytest.raises(SpecError, match="FLOODWAY_SECRET_K_V"):
        overflow_key(build(remote), {})
