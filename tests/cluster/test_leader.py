"""Two `floodway operator` replicas at once against the real control plane, both with the chart's ServiceAccount
and Lease: one leads, the standby acts on nothing; SIGKILL the leader and the standby takes the Lease and
carries on, and nothing is applied twice: every object the first leader applied keeps its generation and its
server-side-apply entry (managedFields) through the takeover (the new leader's apply is a no-op), a spec change
after it bumps the gateway Deployment once, and no event is emitted twice."""

import json
import time

import pytest
import yaml
from floodway.operator.controller.lease import RETRY
from floodway.operator.procs import FLOODWAY_ARGV, free_port, start
from floodway.operator.render import Images, Owner, render
from floodway.operator.render.meta import MANAGER, selector_string
from floodway.operator.spec.resource import parse

NS = "leader"  # one of the test release's watchNamespaces (conftest.WATCHED_NAMESPACES)
LEASE = ("floodway-system", "floodway")  # the chart's Lease: its Role names only this one
DURATION_S = 5
# The takeover's bound, from the Lease rules (controller/lease.py): the standby first sees the last renewal up to one
# retry period after it was written, takes over once that record is older than the duration by its own clock, and
# looks once per retry period: 7 s. Margin for API calls, kubectl polling and a loaded 2-core machine: 3 s. A standby
# that waited 2.5 durations (12.5 s from the renewal it saw, so at least 11.5 s after the kill) or more fails it.
TAKEOVER_BOUND_S = DURATION_S * (1 + 2 * RETRY) + 3.0
NAME = "twice"


def replica(cluster, identity: str):
    port = free_port()
    argv = [*FLOODWAY_ARGV, "operator", "--kubeconfig", str(cluster.service_account_kubeconfig("floodway-system",
                                                                                               "floodway")),
            "--health-port", str(port), "--gateway-url", "", "--namespace", NS, "--lease-namespace", LEASE[0],
            "--lease-name", LEASE[1], "--lease-duration", str(DURATION_S), "--identity", identity]
    # healthy as soon as it runs, leading or not
    return start(argv, port, "/healthz", 60, log_path=str(cluster.dir / f"operator-{identity}.log"))


def lease(cluster) -> dict:
    return cluster.get("-n", LEASE[0], "lease", LEASE[1])["spec"]


def holder(cluster) -> str | None:
    found = cluster.run("kubectl", "-n", LEASE[0], "get", "lease", LEASE[1], "-o", "json", check=False)
    return json.loads(found.stdout)["spec"].get("holderIdentity") if found.returncode == 0 else None


def applied(cluster, objs: list[dict]) -> dict[str, tuple]:
    """kind/name -> (generation, the operator's managedFields entry): what changes when the operator's apply
    changes the object, and only then (status writers and other managers are left out)."""
    out = {}
    for o in objs:
        ref = f"{o['kind'].lower()}/{o['metadata']['name']}"
        live = cluster.get("-n", NS, ref, "--show-managed-fields")["metadata"]
        mine = [m for m in live.get("managedFields", []) if m["manager"] == MANAGER and m["operation"] == "Apply"
                and not m.get("subresource")]
        assert len(mine) == 1, (ref, live.get("managedFields"))
        out[ref] = (live.get("generation"), json.dumps(mine[0], sort_keys=True))
    return out


def events(cluster) -> list[tuple[str, str]]:
    items = cluster.get("-n", NS, "events", "--field-selector",
                        f"involvedObject.kind=InferenceService,involvedObject.name={NAME}")["items"]
    return sorted((e["reason"], e["message"]) for e in items for _ in range(e.get("count") or 1))


def is_ready(cluster) -> bool:
    st = cluster.get("-n", NS, "inferenceservice", NAME).get("status", {})
    return any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions", []))


@pytest.fixture
def replicas(cluster, floodway_release):
    started = {}
    yield started
    for proc in started.values():
        proc.stop()
    cluster.kubectl("-n", NS, "delete", "inferenceservice", NAME, "--ignore-not-found", "--wait=false")


def test_the_standby_takes_over_from_a_killed_leader_and_applies_nothing_twice(cluster, replicas):
    replicas["a"] = replica(cluster, "replica-a")
    cluster.wait_until("replica-a holds the Lease", lambda: holder(cluster) == "replica-a", 60)
    replicas["b"] = replica(cluster, "replica-b")
    isvc = {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"model": "floodway/tiny-llama", "resources": {"gpus": 1}, "replicas": {"min": 1, "max": 1},
                     "slo": {"ttftMs": 500}}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(isvc))
    cluster.wait_until("Ready under replica-a", lambda: is_ready(cluster), 90)
    live = cluster.get("-n", NS, "inferenceservice", NAME)
    owner = Owner(NAME, NS, live["metadata"]["uid"])
    objs = render(parse(live).spec, owner, Images.from_env({}))
    before, events_before, transitions = applied(cluster, objs), events(cluster), lease(cluster)["leaseTransitions"]
    assert holder(cluster) == "replica-a"
    assert "holding lease" not in replicas["b"].log_tail(20000)  # the standby has not started reconciling

    replicas.pop("a").kill()  # SIGKILL: no Lease release, no clean-up
    killed = time.monotonic()
    cluster.wait_until("replica-b holds the Lease", lambda: holder(cluster) == "replica-b", 6 * DURATION_S, 0.1)
    takeover_s = time.monotonic() - killed
    print(f"\nleader killed -> standby holds the Lease: {takeover_s:.1f} s (bound {TAKEOVER_BOUND_S:.1f} s, "
          f"lease {DURATION_S} s)")
    assert takeover_s <= TAKEOVER_BOUND_S, f"takeover took {takeover_s:.1f} s, bound {TAKEOVER_BOUND_S:.1f} s"
    assert lease(cluster)["leaseTransitions"] == transitions + 1

    # A change only replica-b can act on: the gateway's config (its ConfigMap, and its Deployment's pod template).
    cluster.kubectl("-n", NS, "patch", "inferenceservice", NAME, "--type=merge", "-p",
                    json.dumps({"spec": {"slo": {"ttftMs": 700}}}))
    generation = cluster.get("-n", NS, "inferenceservice", NAME)["metadata"]["generation"]
    cm = f"{NAME}-gateway"

    def handled() -> bool:
        config = yaml.safe_load(cluster.get("-n", NS, "configmap", cm)["data"]["gateway.yaml"])
        status = cluster.get("-n", NS, "inferenceservice", NAME).get("status", {})
        return config["slo"]["ttft_ms"] == 700 and status.get("observedGeneration") == generation

    cluster.wait_until("replica-b applied the change", handled, 60)
    cluster.wait_until("Ready under replica-b", lambda: is_ready(cluster), 90)

    after = applied(cluster, objs)
    changed = {ref for ref in before if before[ref] != after[ref]}
    assert changed == {f"configmap/{cm}", f"deployment/{NAME}-gateway"}, changed
    gateway = f"deployment/{NAME}-gateway"
    assert after[gateway][0] == before[gateway][0] + 1  # one new pod template, applied once
    engine_rs = cluster.get("-n", NS, "rs", "-l", selector_string(owner, "engine"))["items"]
    assert len(engine_rs) == 1, "the new leader changed the engine's pod template"
    after_events = events(cluster)
    assert set(events_before) <= set(after_events)
    assert len(after_events) == len(set(after_events)), f"an event emitted twice: {after_events}"
