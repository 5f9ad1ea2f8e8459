"""Prefix-aware routing behind two gateway replicas, with real traffic through kube-proxy: each gateway replica
keeps its own prefix index (it learns what each engine holds only from what it routed itself), so a
conversation's second turn reaches the engine holding its first turn's prefix only if it reaches the same gateway
replica. The operator renders the gateway Service with `sessionAffinity: ClientIP` for that; this shows it on the
real node (two SmolLM2 engine pods, two gateway pods, the Service's cluster IP served by kube-proxy's iptables
rules), with conversations from several client addresses so that both gateway replicas route some.

Without affinity each request's connection goes to either replica: about half the second turns would reach the
replica that never saw the conversation, which picks an engine by load alone, wrong half the time, so ~25% of
second turns would go astray and all K right by chance is ~0.75^K (10% for K = 8). The second half shows it:
with the Service's affinity patched away (the operator re-renders its objects only when the InferenceService
changes, so the patch holds), fresh conversations' second turns do reach the other replica.

Client addresses, named as a stand-in: a cluster's clients have addresses of their own; here they are
192.0.2.0/24 (TEST-NET-1, routed nowhere) addresses added to the node's bridge, which goes with the node."""

import ipaddress
import json
from collections import Counter

import httpx
import pytest
from floodway_tests_chart import (  # loaded by conftest.py
    MODEL_CLAIM,
    NS,
    SERVED,
    apply,
    describe,
    engine_pods,
    pods,
    ready_since,
)
from floodway_tests_realnode import BRIDGE, sh
from prometheus_client.parser import text_string_to_metric_families

IS = "prefix"
CLIENTS = list(ipaddress.ip_network("192.0.2.0/27").hosts())
MIN_PER_REPLICA = 3  # conversations each gateway replica must route before the second turns are sent
MIN_CONVERSATIONS = 8
BLOCK_TOKENS = 16  # the engine's KV block: it caches whole blocks only
HITS = "vllm:prefix_cache_hits_total"
METRICS = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/metrics', timeout=10).read().decode())"
POLICY = ("Parcels are insured up to 500 euros unless the sender declared a higher value. A parcel that has not "
          "moved for five working days is searched for by the depot that scanned it last; after ten it is "
          "declared lost and the sender is refunded. Damaged parcels are photographed at the depot, and the "
          "receiver may refuse them at the door. Claims are answered within fourteen days. Parcels to islands "
          "take two days longer, and depots close on public holidays; a parcel held at a depot is kept for seven "
          "days before it goes back to the sender at the sender's cost. ")


def inference_service(node_name: str) -> dict:
    return {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": IS, "namespace": NS},
            "spec": {
                "model": SERVED,
                "storage": {"modelClaim": {"name": MODEL_CLAIM}},
                # KV for 4 x 1024 tokens per engine: every conversation's first turn stays cached.
                "engine": {"maxModelLen": 1024, "maxNumSeqs": 4, "startupTimeoutSeconds": 300,
                           "env": [{"name": "HF_HUB_OFFLINE", "value": "1"},
                                   {"name": "OMP_NUM_THREADS", "value": "1"}]},
                "resources": {"gpus": 0, "cpu": "200m", "memory": "2Gi",
                              "nodeSelector": {"kubernetes.io/hostname": node_name}},
                "replicas": {"min": 2, "max": 2},
                # Two gateway replicas, prefix-aware routing as by default. Each replica counts only the work it
                # sent itself, so the load cap (tests/unit/gateway) could move a second turn off its holder when
                # one replica's own first turns happened to land mostly on one engine: the cap is set out of reach,
                # since what is shown here is where the turns go, not the cap.
                "gateway": {"replicas": 2, "routing": {"prefixLoadSlack": 100}},
            }}


def first_turn(i: int) -> list[dict]:
    """Its own from the first block on: a prefix shared by all would rightly draw them to one engine."""
    return [{"role": "system", "content": f"Ticket {i:04d} of the parcel desk. " + POLICY},
            {"role": "user", "content": f"My parcel {i * 7919} left the depot on day {i % 28 + 1} and has not "
                                        "arrived. Where could it be, and whom should I call about it?"}]


def second_turn(messages: list[dict], answer: str) -> list[dict]:
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": "And if it is lost?"}]


def chat(url: str, client: ipaddress.IPv4Address, messages: list[dict]) -> dict:
    """One turn from `client`'s address on a connection of its own (kube-proxy picks a replica per connection):
    {gateway, engine (its pod: the backend id less the port), answer, prompt, cached}."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address=str(client)), timeout=120.0) as http:
        r = http.post(f"{url}/v1/chat/completions", json={"model": SERVED, "messages": messages, "max_tokens": 8,
                                                         "temperature": 0.0})
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    return {"gateway": r.headers["x-floodway-gateway"], "engine": r.headers["x-floodway-backend"].rsplit(":", 1)[0],
            "answer": r.json()["choices"][0]["message"]["content"], "prompt": usage["prompt_tokens"],
            "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)}


def affinity_rules() -> bool:
    """Whether kube-proxy's iptables rules for the gateway Service keep client affinity (`-m recent`)."""
    return any(f"{NS}/{IS}:http" in r and "recent" in r for r in sh("iptables-save", "-t", "nat").stdout.splitlines())


def cache_hits(c, pod: str) -> float:
    """The engine's prefix-cache hit counter, read inside its pod (the engine port admits the gateway only)."""
    text = c.kubectl("-n", NS, "exec", pod, "-c", "engine", "--", "python", "-c", METRICS, timeout_s=60).stdout
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == HITS)


def ready_backends(pod: dict) -> float:
    """How many ready engines this gateway pod routes to (its own /metrics)."""
    text = httpx.get(f"http://{pod['status']['podIP']}:8080/metrics", timeout=5.0).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "floodway_gateway_ready_backends")


@pytest.fixture(scope="module")
def service(node_cluster, floodway_chart):
    """The InferenceService with 2 engines and 2 gateways, each gateway routing to both engines; deleted at the end,
    waited for until its pods are gone."""
    c = floodway_chart
    apply(c, inference_service(node_cluster.name))

    def serving() -> str | None:
        gateways = [p for p in pods(c, IS, "gateway") if ready_since(p)]
        got = c.kubectl("-n", NS, "get", "service", IS, "-o", "jsonpath={.spec.clusterIP}", check=False)
        if len(gateways) != 2 or got.returncode != 0:
            return None
        try:  # each replica sees both engines ready, and the Service answers
            if not all(ready_backends(p) == 2 for p in gateways):
                return None
            return got.stdout if httpx.get(f"http://{got.stdout}/v1/models", timeout=2.0).status_code == 200 else None
        except httpx.HTTPError:
            return None

    try:
        try:
            ip = c.wait_until("2 engines Ready in both gateway replicas", serving, timeout_s=300, interval_s=1.0)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{describe(c)}") from None
        yield {"cluster": c, "url": f"http://{ip}"}
    finally:
        c.kubectl("-n", NS, "delete", "inferenceservice", IS, "--ignore-not-found", "--wait=true", "--timeout=120s",
                  timeout_s=150)
        c.wait_until("the prefix service's pods gone", lambda: not c.get(
            "-n", NS, "pods", "-l", f"app.kubernetes.io/instance={IS}")["items"], timeout_s=120, interval_s=1.0)


@pytest.fixture(scope="module")
def clients():
    """The client addresses on the node's bridge (removed again; the bridge itself goes with the node)."""
    for ip in CLIENTS:
        sh("ip", "addr", "add", f"{ip}/32", "dev", BRIDGE)
    try:
        yield CLIENTS
    finally:
        for ip in CLIENTS:
            sh("ip", "addr", "del", f"{ip}/32", "dev", BRIDGE, check=False)


def begin(url: str, client: ipaddress.IPv4Address, i: int) -> dict:
    """Conversation i's first turn from `client`: chat()'s fields, the client and the messages."""
    messages = first_turn(i)
    return {"client": client, "messages": messages, **chat(url, client, messages)}


def go_on(url: str, conversations: list[dict]) -> list[tuple[dict, dict]]:
    """Each conversation's second turn, from its client: [(first turn, second turn)]."""
    return [(t, chat(url, t["client"], second_turn(t["messages"], t["answer"]))) for t in conversations]


def start_conversations(url: str, clients: list) -> list[dict]:
    """First turns, one conversation per client address, until each gateway replica routed MIN_PER_REPLICA and
    there are MIN_CONVERSATIONS (with the Service's affinity, kube-proxy draws each new address's replica)."""
    started = []
    for i, client in enumerate(clients):
        per_replica = Counter(t["gateway"] for t in started)
        if len(started) >= MIN_CONVERSATIONS and len(per_replica) == 2 and min(per_replica.values()) >= MIN_PER_REPLICA:
            break
        started.append(begin(url, client, i))
    return started


def test_second_turns_reach_the_engine_of_their_first_behind_two_gateway_replicas(service, clients):
    c, url = service["cluster"], service["url"]
    svc = c.get("-n", NS, "service", IS)
    assert svc["spec"].get("sessionAffinity") == "ClientIP", svc["spec"]  # as the operator rendered it
    assert affinity_rules()  # and as kube-proxy serves it
    engines = {p["metadata"]["name"] for p in engine_pods(c, IS)}
    hits_before = {pod: cache_hits(c, pod) for pod in engines}

    firsts = start_conversations(url, clients)
    replicas = Counter(t["gateway"] for t in firsts)
    assert len(replicas) == 2 and min(replicas.values()) >= MIN_PER_REPLICA, replicas
    assert {t["engine"] for t in firsts} == engines, firsts  # both engines hold conversations
    turns = go_on(url, firsts)
    pairs = [(t["gateway"], t["engine"], s["gateway"], s["engine"], s["cached"]) for t, s in turns]
    print(f"\nnode tier: {len(firsts)} conversations over gateway replicas {dict(replicas)} and engines "
          f"{dict(Counter(t['engine'] for t in firsts))}; (first gateway, engine, second gateway, engine, cached "
          f"tokens): {pairs}")
    for t, s in turns:
        assert s["gateway"] == t["gateway"], (t, s)  # the Service's affinity held the client to one replica
        assert s["engine"] == t["engine"], (t, s)  # that replica's index sent it where its prefix is
        # The whole first prompt's full blocks, less at most one (the chat template closes the first user turn
        # differently once an answer follows).
        assert s["cached"] >= (t["prompt"] // BLOCK_TOKENS - 1) * BLOCK_TOKENS, (t, s)
    for pod in engines:
        cached_there = sum(s["cached"] for _, s in turns if s["engine"] == pod)
        assert cache_hits(c, pod) - hits_before[pod] >= cached_there > 0, pod


def test_without_affinity_second_turns_reach_the_other_replica(service, clients):
    """The contrast: the Service's affinity patched away, the second turns of fresh conversations reach either
    replica; those that reach the one which routed their first still land on their engine."""
    c, url = service["cluster"], service["url"]
    c.kubectl("-n", NS, "patch", "service", IS, "--type=merge", "-p", json.dumps({"spec": {"sessionAffinity": "None"}}))

    c.wait_until("kube-proxy dropping the Service's affinity", lambda: not affinity_rules(), timeout_s=60,
                 interval_s=0.5)
    turns = go_on(url, [begin(url, client, 1000 + n) for n, client in enumerate(clients[:12])])
    moved = [(t, s) for t, s in turns if s["gateway"] != t["gateway"]]
    astray = [(t, s) for t, s in turns if s["engine"] != t["engine"]]
    print(f"\nnode tier: without affinity, of {len(turns)} second turns {len(moved)} reached the other gateway "
          f"replica and {len(astray)} another engine than their first (cached tokens there: "
          f"{[s['cached'] for _, s in astray]})")
    assert moved, "all 12 second turns reached their first turn's replica (chance: 1 in 4096)"
    assert all(s["gateway"] != t["gateway"] for t, s in astray), astray  # only another replica loses the prefix
