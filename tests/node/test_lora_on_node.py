"""One InferenceService serving two LoRA adapters from the claim its model comes from, on the real node: the
adapters are made here with peft's get_peft_model (seeded random weights, saved by the format's own library) in the
claim's folder next to SmolLM2's weights; each answers through the gateway Service with the official client as
transformers + peft answer with that adapter (greedy, fp32), unlike the base model; the InferenceService status
lists both loaded on the engine replica, with AdaptersReady True.

The module runs after test_floodway_on_node.py (by name), which set the session up and deleted its service."""

import shutil

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
from openai import OpenAI

from tests.lora_peft import peft_greedy, random_adapter

IS = "lora"
FOLDER = "lora-node-test"  # inside the claim's folder (the model's own), removed at the end
NEW_TOKENS = 8
QUESTION = "What is the capital of France?"


def inference_service(node_name: str, adapters: list[str]) -> dict:
    return {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": IS, "namespace": NS},
            "spec": {
                "model": SERVED,
                "storage": {"modelClaim": {"name": MODEL_CLAIM}},  # the claim's root holds config.json
                "adapters": [{"name": name, "source": f"{FOLDER}/{name}"} for name in adapters],
                "engine": {"maxModelLen": 512, "maxNumSeqs": 4, "startupTimeoutSeconds": 300,
                           "env": [{"name": "HF_HUB_OFFLINE", "value": "1"},
                                   {"name": "OMP_NUM_THREADS", "value": "1"}]},
                "resources": {"gpus": 0, "cpu": "200m", "memory": "2Gi",
                              "nodeSelector": {"kubernetes.io/hostname": node_name}},
                "replicas": {"min": 1, "max": 1},
                "autoscaling": {"intervalSeconds": 2},
                "gateway": {"replicas": 1},
            }}


@pytest.fixture(scope="module")
def adapters(model_folder, torch_threads) -> dict[str, str]:
    """name -> its folder inside the claim (all projections at rank 8; q and v at rank 16, its B scaled up so that
    both change the answer to QUESTION), readable by the engine's uid; removed at the end."""
    root = model_folder / FOLDER
    shutil.rmtree(root, ignore_errors=True)
    with torch_threads(1):
        made = {"r8": random_adapter(str(model_folder), root / "r8", r=8, alpha=16, seed=1, gain=0.5),
                "r16-qv": random_adapter(str(model_folder), root / "r16-qv", r=16, alpha=16, seed=2, gain=4.0,
                                         targets=["q_proj", "v_proj"])}
    for p in (root, *root.rglob("*")):
        p.chmod(0o755 if p.is_dir() else 0o644)
    try:
        yield made
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(model_folder, adapters, torch_threads) -> dict[str | None, str]:
    """What transformers + peft answer to QUESTION (chat template, greedy, fp32, one thread as the pod), per adapter
    name and None for the base model."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_folder))
    prompt = list(tok.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"])
    with torch_threads(1):
        return {name: tok.decode(peft_greedy(str(model_folder), path, [prompt], NEW_TOKENS)[0],
                                 skip_special_tokens=True) for name, path in {**adapters, None: None}.items()}


@pytest.fixture(scope="module")
def service(node_cluster, floodway_chart, adapters):
    """The InferenceService with both adapters, its gateway Service answering; deleted at the end, waited for until
    its pods are gone."""
    c = floodway_chart
    apply(c, inference_service(node_cluster.name, list(adapters)))

    def serving() -> str | None:
        got = c.kubectl("-n", NS, "get", "service", IS, "-o", "jsonpath={.spec.clusterIP}", check=False)
        if not any(ready_since(p) for p in engine_pods(c, IS)) or got.returncode != 0:
            return None
        try:
            return got.stdout if httpx.get(f"http://{got.stdout}/v1/models", timeout=2.0).status_code == 200 else None
        except httpx.HTTPError:
            return None

    try:
        try:
            ip = c.wait_until("an engine Ready behind the gateway Service", serving, timeout_s=360, interval_s=1.0)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{describe(c)}") from None
        yield {"cluster": c, "gateway": f"http://{ip}/v1"}
    finally:
        c.kubectl("-n", NS, "delete", "inferenceservice", IS, "--ignore-not-found", "--wait=true", "--timeout=120s",
                  timeout_s=150)
        c.wait_until("the lora service's pods gone", lambda: not (engine_pods(c, IS) or pods(c, IS, "gateway")),
                     timeout_s=120, interval_s=1.0)


def test_two_adapters_from_the_claim_answer_through_the_gateway_as_peft_does(service, reference):
    client = OpenAI(base_url=service["gateway"], api_key="unused", max_retries=0, timeout=120.0)
    got = {}
    for model in (*[m for m in reference if m], None):
        raw = client.chat.completions.with_raw_response.create(
            model=model or SERVED, messages=[{"role": "user", "content": QUESTION}], max_tokens=NEW_TOKENS,
            temperature=0.0)
        completion = raw.parse()
        assert raw.headers.get("x-floodway-backend", "").startswith(f"{IS}-engine-"), raw.headers
        assert completion.model == (model or SERVED)
        got[model] = completion.choices[0].message.content
    print(f"\nnode tier: answers through the gateway {got}; transformers + peft {reference}")
    assert got == reference
    assert len(set(got.values())) == 3, got  # each adapter changes the answer


def test_the_status_lists_both_adapters_loaded_on_the_replica(service, adapters):
    c = service["cluster"]

    def listed() -> dict | None:
        st = c.get("-n", NS, "inferenceservice", IS).get("status", {})
        conds = {x["type"]: x for x in st.get("conditions", [])}
        ok = conds.get("AdaptersReady", {}).get("status") == "True" and conds.get("Ready", {}).get("status") == "True"
        return st if ok and st.get("adapters") else None

    try:
        st = c.wait_until("AdaptersReady True with status.adapters", listed, timeout_s=120, interval_s=1.0)
    except TimeoutError as e:
        raise AssertionError(f"{e}\n{describe(c)}") from None
    pod = next(p for p in engine_pods(c, IS) if ready_since(p))
    assert st["adapters"] == [{"replica": pod["metadata"]["name"], "loaded": sorted(adapters)}], st["adapters"]
    args = pod["spec"]["containers"][0]["args"]
    assert [args[i + 1] for i, a in enumerate(args) if a == "--lora-modules"] == \
        [f"{name}=/models/{FOLDER}/{name}" for name in adapters], args
