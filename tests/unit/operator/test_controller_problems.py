"""What keeps a service from running, as the operator reports it without a cluster: pods stuck on a missing
Secret or key, an image or a node; missing claims; objects it did not create; the external scaling mode;
FitsGPU from a shape given in the spec. Pod and claim dicts follow what the API server returns."""

import pytest
from floodway.operator.autoscaler.policy import ScalerState
from floodway.operator.autoscaler.signals import Scrape
from floodway.operator.controller.conditions import transition_events
from floodway.operator.controller.ownership import conflict
from floodway.operator.controller.pods import pod_problems, secret_problem
from floodway.operator.controller.scaling import tick
from floodway.operator.controller.status import Observation, build_status
from floodway.operator.controller.storage import claim_problems, claim_roles
from floodway.operator.planner.fit import spec_fit
from floodway.operator.spec import InferenceServiceSpec

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"
SECRET_MSG = 'secret "hf-token" not found'
KEY_MSG = "couldn't find key token in Secret serving/hf-token"


def spec(**kw) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({"model": "m", **kw})


def waiting_pod(name: str, reason: str, message: str = "", container: str = "engine", init: bool = False) -> dict:
    statuses = [{"name": container, "ready": False, "state": {"waiting": {"reason": reason, "message": message}}}]
    return {"metadata": {"name": name}, "status": {"phase": "Pending", **{
        "initContainerStatuses" if init else "containerStatuses": statuses}}}


def unschedulable_pod(name: str, message: str) -> dict:
    return {"metadata": {"name": name}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}}


def conds(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


@pytest.mark.parametrize("reason, message", [
    ("CreateContainerConfigError", SECRET_MSG), ("CreateContainerConfigError", KEY_MSG),
    ("ImagePullBackOff", 'Back-off pulling image "floodway/engine:9"'),
    ("ErrImageNeverPull", 'Container image "floodway/engine:9" is not present with pull policy of Never'),
    ("CrashLoopBackOff", "back-off 5m0s restarting failed container=engine")])
def test_stuck_containers_are_named_with_the_kubelets_words(reason, message):
    [p] = pod_problems([waiting_pod("chat-engine-a", reason, message)], "engine")
    assert p.reason == reason
    assert p.message == f"engine pod chat-engine-a: container engine {reason}: {message}"


def test_progress_is_not_a_problem_and_duplicates_are_counted():
    assert pod_problems([waiting_pod("a", "ContainerCreating"), waiting_pod("b", "PodInitializing")], "engine") == []
    deleting = waiting_pod("c", "CrashLoopBackOff")
    deleting["metadata"]["deletionTimestamp"] = T0
    assert pod_problems([deleting], "engine") == []
    [p] = pod_problems([waiting_pod(n, "CreateContainerConfigError", SECRET_MSG) for n in "xyz"], "engine")
    assert p.message.startswith("engine pod x (and 2 more): container engine")
    [p] = pod_problems([waiting_pod("g", "ErrImagePull", "nope", container="fetch", init=True)], "gateway")
    assert p.message == "gateway pod g: container fetch ErrImagePull: nope"


def test_a_missing_claim_shows_in_the_pods_and_in_the_claims():
    msg = '0/3 nodes are available: persistentvolumeclaim "models" not found. preemption: 0/3 nodes are available'
    [p] = pod_problems([unschedulable_pod("chat-engine-a", msg)], "engine")
    assert p.reason == "Unschedulable" and '"models" not found' in p.message
    s = spec(storage={"modelClaim": {"name": "models"}, "cacheClaim": {"name": "cache"}})
    assert claim_roles(s) == {"cache": "storage.cacheClaim", "models": "storage.modelClaim"}
    problems = claim_problems(s, "serving", {"models": None, "cache": {"status": {"phase": "Bound"}}})
    assert problems == ["storage.modelClaim: PersistentVolumeClaim serving/models not found (the engine pods stay "
                        "Pending until it exists)"]
    assert "lost its volume" in claim_problems(s, "ns", {"models": {"status": {"phase": "Lost"}},
                                                         "cache": {"status": {"phase": "Pending"}}})[0]
    assert claim_problems(spec(), "ns", {}) == [] and claim_roles(spec()) == {}


def test_conditions_and_events_name_what_is_missing():
    s = spec(storage={"modelClaim": {"name": "models"}})
    problems = tuple(pod_problems([waiting_pod("chat-engine-a", "CreateContainerConfigError", KEY_MSG)], "engine"))
    bad = build_status(s, {}, Observation(pod_problems=problems, claim_problems=(
        "storage.modelClaim: PersistentVolumeClaim serving/models not found",)), T0, 1, "", "")
    c = conds(bad)
    assert (c["PodsHealthy"]["status"], c["PodsHealthy"]["reason"]) == ("False", "CreateContainerConfigError")
    assert KEY_MSG in c["PodsHealthy"]["message"] and "chat-engine-a" in c["PodsHealthy"]["message"]
    assert (c["StorageAvailable"]["status"], c["StorageAvailable"]["reason"]) == ("False", "ClaimUnavailable")
    events = {e.reason: e for e in transition_events([], bad["conditions"])}
    assert events["CreateContainerConfigError"].type == "Warning" and KEY_MSG in events[
        "CreateContainerConfigError"].message
    assert "serving/models not found" in events["ClaimUnavailable"].message
    fixed = build_status(s, bad, Observation(pod_problems=(), claim_problems=()), T1, 1, "", "")
    assert conds(fixed)["PodsHealthy"]["status"] == "True" and conds(fixed)["StorageAvailable"]["status"] == "True"
    assert [e.type for e in transition_events(bad["conditions"], fixed["conditions"])] == ["Normal", "Normal"]
    kept = build_status(s, bad, Observation(), T1, 1, "", "")  # reconcile: pods not looked at
    assert conds(kept)["PodsHealthy"] == c["PodsHealthy"]
    assert "StorageAvailable" not in conds(build_status(spec(), bad, Observation(), T1, 1, "", ""))


def test_overflow_key_problem_still_found_among_other_waits():
    pods = [waiting_pod("g", "CreateContainerConfigError", 'secret "overflow-key" not found', container="gateway")]
    assert 'secret "overflow-key" not found' in secret_problem(pods, "overflow-key")
    assert secret_problem([waiting_pod("g", "ImagePullBackOff", '"overflow-key"')], "overflow-key") is None


SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "chat", "namespace": "serving"}}


def test_objects_not_created_by_this_service_are_not_adopted():
    assert conflict(SERVICE, None, "uid-1") is None
    ours = {"metadata": {"ownerReferences": [{"kind": "InferenceService", "name": "chat", "uid": "uid-1",
                                              "controller": True}]}}
    assert conflict(SERVICE, ours, "uid-1") is None
    users = {"metadata": {"name": "chat"}}
    assert conflict(SERVICE, users, "uid-1") == (
        "Service serving/chat already exists, not created by it; the operator does not adopt it (delete or "
        "rename it, or rename the InferenceService)")
    old = {"metadata": {"ownerReferences": [{"kind": "InferenceService", "name": "chat", "uid": "uid-0",
                                             "controller": True}]}}
    assert "owned by InferenceService chat" in conflict(SERVICE, old, "uid-1")


def test_ownership_conflict_condition_and_event():
    message = conflict(SERVICE, {"metadata": {}}, "u")
    st = build_status(spec(), {}, Observation(conflicts=(message,)), T0, 1, "", "")
    c = conds(st)["OwnershipConflict"]
    assert (c["status"], c["reason"], c["message"]) == ("True", "ObjectNotOwned", message)
    [event] = [e for e in transition_events([], st["conditions"]) if e.reason == "ObjectNotOwned"]
    assert event.type == "Warning" and "Service serving/chat" in event.message
    resolved = build_status(spec(), st, Observation(conflicts=()), T1, 1, "", "")
    assert conds(resolved)["OwnershipConflict"]["status"] == "False"


def test_external_mode_ticks_follow_replicas_count():
    s = spec(replicas={"min": 1, "max": 4, "count": 3}, autoscaling={"mode": "external"})
    t = tick(s, ScalerState(replicas=1), None, Scrape(time=1.0, engines={}), 1.0)
    assert t.decision.replicas == 3 and "replicas.count 3" in t.decision.reason
    s = spec(replicas={"min": 1, "max": 4, "count": 7}, autoscaling={"mode": "external"})
    assert tick(s, ScalerState(replicas=1), None, Scrape(time=1.0, engines={}), 1.0).decision.replicas == 4


QWEN_7B = {"hiddenSize": 3584, "numLayers": 28, "numHeads": 28, "numKvHeads": 4, "vocabSize": 152064,
           "params": 7.6e9}


def test_fits_gpu_from_a_shape_in_the_spec():
    hub = spec(model="Qwen/Qwen2.5-7B-Instruct", resources={"gpuType": "H100-80GB"})
    level, message = spec_fit(hub)
    assert level == "unchecked" and "spec.modelShape" in message  # says how to get it checked
    level, message = spec_fit(spec(model="Qwen/Qwen2.5-7B-Instruct", resources={"gpuType": "H100-80GB"},
                                   modelShape=QWEN_7B))
    assert level == "ok" and message.startswith("from spec.modelShape: fits")
    level, message = spec_fit(spec(model="Qwen/Qwen2.5-7B-Instruct", resources={"gpuMemoryGiB": 8},
                                   modelShape=QWEN_7B))
    assert level == "refuse" and "weights" in message
    on_claim = spec(storage={"modelClaim": {"name": "models"}}, resources={"gpuType": "H100-80GB"})
    level, message = spec_fit(on_claim)
    assert level == "unchecked" and "PersistentVolumeClaim models" in message and "spec.modelShape" in message
    st = build_status(on_claim, {}, Observation(fit_level=level, fit_message=message), T0, 1, "", "")
    assert conds(st)["FitsGPU"]["status"] == "Unknown" and "modelShape" in conds(st)["FitsGPU"]["message"]


def test_own_namespace_from_env_or_the_service_account(tmp_path, monkeypatch):
    from floodway.operator.controller.kube import own_namespace

    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert own_namespace(str(tmp_path / "absent")) is None
    (tmp_path / "ns").write_text("floodway-system\n")
    assert own_namespace(str(tmp_path / "ns")) == "floodway-system"
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    assert own_namespace(str(tmp_path / "ns")) == "ops"
