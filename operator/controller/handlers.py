"""kopf handlers: thin shells that read the cluster, call the pure functions (render, the control loop's step,
build_status, transition_events) and write back by server-side apply, status patches and events. Errors become
conditions, events and kopf retries with backoff, never a crash of the operator."""

import logging
import time

import kopf
from floodway.operator.controller.conditions import transition_events
from floodway.operator.controller.history_store import (
    due,
    history_configmap,
    history_conflict,
    history_name,
    saved_history,
)
from floodway.operator.controller.kube import KubeError, own_namespace
from floodway.operator.controller.loop import first_state, step, tick_status
from floodway.operator.controller.ownership import conflict
from floodway.operator.controller.pods import any_ready, engine_pods, pod_problems, secret_problem
from floodway.operator.controller.scrape import scrape, scrape_adapters
from floodway.operator.controller.status import Observation, build_status, now_rfc3339
from floodway.operator.controller.storage import claim_problems, claim_roles
from floodway.operator.planner.fit import spec_fit
from floodway.operator.render import Owner, render, service_url
from floodway.operator.render.engine import engine_deployment
from floodway.operator.render.gateway import GATEWAY_PORT, SERVICE_PORT
from floodway.operator.render.meta import engine_name, selector_string
from floodway.operator.spec import GROUP, PLURAL, VERSION, SpecError, parse_spec

log = logging.getLogger("floodway.operator")
TIMER_S = 1.0  # the timer wakes often; each service acts every spec.autoscaling.intervalSeconds
# Where the operator runs: the engines' NetworkPolicy admits scrapes from there only.
OPERATOR_NAMESPACE = own_namespace()


def _publish(body, patch, status: dict) -> None:
    previous = body.get("status") or {}
    for event in transition_events(previous.get("conditions") or [], status["conditions"]):
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    for key, value in status.items():
        patch.status[key] = value


def _invalid(body, patch, err: SpecError) -> None:
    kopf.event(body, type="Warning", reason="InvalidSpec", message=str(err))
    patch.status["conditions"] = [{"type": "Ready", "status": "False", "reason": "InvalidSpec",
                                   "message": str(err), "lastTransitionTime": now_rfc3339()}]


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile(body, spec, name, namespace, uid, meta, patch, memo, **_):
    try:
        parsed = parse_spec(dict(spec))
    except SpecError as err:
        _invalid(body, patch, err)
        raise kopf.PermanentError(str(err)) from None
    owner = Owner(name, namespace, uid)
    kube = memo.kube
    # The saved traffic history, looked at each time as the rendered objects are: one not ours is left alone.
    saved = kube.get("v1", "ConfigMap", namespace, history_name(owner))
    taken = history_conflict(saved, owner)
    if memo.get("loop") is None:
        current = kube.get("apps/v1", "Deployment", namespace, engine_name(owner))
        memo.loop = first_state(current["spec"].get("replicas") if current else None, parsed,
                                None if taken else saved_history(saved))
    objs = render(parsed, owner, memo.images, memo.loop.scaler.replicas, OPERATOR_NAMESPACE)
    conflicts, foreign = ([taken], {("ConfigMap", history_name(owner))}) if taken else ([], set())
    try:
        for obj in objs:
            m = obj["metadata"]
            problem = conflict(obj, kube.get(obj["apiVersion"], obj["kind"], m["namespace"], m["name"]), uid)
            if problem:  # never adopted: left as it is, named in the OwnershipConflict condition
                conflicts.append(problem)
                foreign.add((obj["kind"], m["name"]))
            else:
                kube.apply(obj)
    except KubeError as err:
        kopf.event(body, type="Warning", reason="ApplyFailed", message=str(err))
        raise kopf.TemporaryError(f"apply failed: {err}", delay=15) from None
    memo.foreign = foreign
    memo.fit = spec_fit(parsed)
    memo.applied_at = time.monotonic()
    obs = Observation(desired_replicas=memo.loop.scaler.replicas, fit_level=memo.fit[0], fit_message=memo.fit[1],
                      conflicts=tuple(conflicts))
    _publish(body, patch, build_status(parsed, body.get("status") or {}, obs, now_rfc3339(), meta.get("generation"),
                                       selector_string(owner, "engine"), service_url(owner)))
    if conflicts:  # retried, so the service converges once the user removes the object
        raise kopf.TemporaryError("; ".join(conflicts), delay=30)


@kopf.timer(GROUP, VERSION, PLURAL, interval=TIMER_S)
def autoscale(body, spec, name, namespace, uid, meta, patch, memo, **_):
    try:
        parsed = parse_spec(dict(spec))
    except SpecError:
        return  # reconcile reported it
    now = time.monotonic()
    if memo.get("loop") is None or now - memo.get("last_tick", -1e9) < parsed.autoscaling.interval_seconds:
        return
    memo.last_tick = now
    owner = Owner(name, namespace, uid)
    kube = memo.kube
    try:
        pods = kube.list("v1", "Pod", namespace, selector_string(owner, "engine"))
        gateway_pods = kube.list("v1", "Pod", namespace, selector_string(owner, "gateway"))
        deployment = kube.get("apps/v1", "Deployment", namespace, engine_name(owner))
        claims = {c: kube.get("v1", "PersistentVolumeClaim", namespace, c) for c in claim_roles(parsed)}
    except KubeError as err:
        log.warning("%s/%s: cannot read the cluster this tick: %s", namespace, name, err)
        return
    found = engine_pods(pods)
    urls = {pod: f"http://{ip}:{parsed.engine.port}" for pod, ip in found.ready.items()}
    template = memo.gateway_url_template
    gateway_urls = sorted({template.format(name=name, namespace=namespace, port=SERVICE_PORT, pod_ip=ip,
                                           pod_port=GATEWAY_PORT)
                           for ip in engine_pods(gateway_pods).ready.values()}) if template else []
    wall = time.time()
    s = step(parsed, memo.loop, scrape(urls, gateway_urls, found.starting, wall, runtime=parsed.engine.runtime),
             wall)
    wanted = s.decision.replicas
    foreign = memo.get("foreign", set())
    ours = ("Deployment", engine_name(owner)) not in foreign
    if ours and (s.moved or (deployment and deployment["spec"].get("replicas") != wanted)):
        try:
            kube.apply(engine_deployment(parsed, owner, memo.images, wanted))
        except KubeError as err:
            kopf.event(body, type="Warning", reason="ScaleFailed", message=str(err))
            return  # keep the old state: the next tick tries again
        if s.moved:
            kopf.event(body, type="Normal", reason="ScaledUp" if wanted > s.before else "ScaledDown",
                       message=f"{s.before} -> {wanted}: {s.decision.reason}")
    memo.loop = s.state
    # With a forecast, the history this tick added to is saved once a minute, so a restart goes on with it.
    keeps = parsed.autoscaling.forecast_lead_seconds and ("ConfigMap", history_name(owner)) not in foreign
    if keeps and due(memo.get("history_saved"), wall, s.state.history.bucket_s):
        memo.history_saved = wall  # the next try is next minute, saved or not: a failing API server is not hammered
        try:
            kube.apply(history_configmap(owner, s.state.history))
        except KubeError as err:
            log.warning("%s/%s: cannot save the traffic history, retrying next minute: %s", namespace, name, err)
    dstatus = (deployment or {}).get("status") or {}
    ref = parsed.overflow.api_key_secret_ref
    fit_level, fit_message = memo.get("fit", (None, ""))
    seen = Observation(
        replicas=dstatus.get("replicas", 0), ready_replicas=dstatus.get("readyReplicas", 0),
        gateway_ready=any_ready(gateway_pods), fit_level=fit_level, fit_message=fit_message,
        secret_problem=secret_problem(gateway_pods, ref.name) if parsed.overflow.enabled and ref else None,
        pod_problems=(*pod_problems(pods, "engine"), *pod_problems(gateway_pods, "gateway")),
        claim_problems=tuple(claim_problems(parsed, namespace, claims)),
        adapters=scrape_adapters(urls, [a.name for a in parsed.adapters]) if parsed.adapters else None)
    _publish(body, patch, tick_status(parsed, s, seen, body.get("status") or {}, now_rfc3339(),
                                      meta.get("generation"), selector_string(owner, "engine"), service_url(owner)))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    # Progress and diff-base live in annotations: the structural status schema would prune kopf's own fields.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="serving.floodway.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="serving.floodway.io", key="last-handled-configuration")
    settings.posting.level = logging.WARNING  # our own events say what happened; kopf adds only its errors
    settings.watching.server_timeout = 120
