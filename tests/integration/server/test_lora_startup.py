"""A real `floodway engine` started with bad --lora-modules next to a good one (a missing folder, a broken
adapter_config.json, a rank above --max-lora-rank, an adapter made for another base model): it turns ready, the base
model and the good adapter answer through the official client, `/v1/models` lists only what loaded (vLLM's shape,
adapters with `parent`), `/debug/engine` lists each failure with its reason, the log names each, and the operator's
parsers read both bodies as the status needs them."""

import json
import shutil

import httpx
import openai
import pytest
from floodway.operator.controller.adapters import failed_adapters, listed_adapters

from tests.lora_peft import random_adapter

BASE = "floodway/tiny-llama"
# name -> (how the folder is spoiled, the words its reason must contain)
BAD = {"gone": ("missing", "no adapter folder"), "broken": ("config", "not valid JSON"),
       "big": ("rank", "--max-lora-rank 16"), "other": ("mismatch", "base-model mismatch")}


def spoiled(good: str, tmp_path, how: str) -> str:
    folder = tmp_path / how
    if how == "missing":
        return str(folder)
    shutil.copytree(good, folder)
    config = folder / "adapter_config.json"
    if how == "config":
        config.write_text("{")
    elif how == "rank":
        config.write_text(json.dumps({**json.loads(config.read_text()), "r": 32}))
    else:  # lora_A as if the base model's hidden size were 100
        from safetensors.torch import load_file, save_file

        weights = load_file(folder / "adapter_model.safetensors")
        save_file({k: v[:, :100].contiguous() if "lora_A" in k else v for k, v in weights.items()},
                  folder / "adapter_model.safetensors")
    return str(folder)


@pytest.fixture(scope="module")
def adapters(tiny_model_path, tmp_path_factory, torch_threads) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("lora-startup")
    with torch_threads(1):
        good = random_adapter(tiny_model_path, tmp / "good", r=8, alpha=16, seed=1)
    return {"good": good, **{name: spoiled(good, tmp, how) for name, (how, _) in BAD.items()}}


@pytest.fixture(scope="module")
def server(start_engine, adapters):
    modules = [a for name, path in adapters.items() for a in ("--lora-modules", f"{name}={path}")]
    return start_engine("--max-model-len", "256", "--max-num-seqs", "4", "--enable-lora", "--max-loras", "2",
                        "--max-lora-rank", "16", *modules)


def test_bad_startup_adapters_leave_the_base_and_the_good_adapter_serving(server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    for model in (BASE, "good"):
        r = client.completions.create(model=model, prompt="hello", max_tokens=4, temperature=0)
        assert r.model == model and r.choices[0].finish_reason == "length"
    with pytest.raises(openai.NotFoundError, match="gone"):
        client.completions.create(model="gone", prompt="hello", max_tokens=4)
    models = httpx.get(server.url + "/v1/models").json()
    assert [(m["id"], m["parent"]) for m in models["data"]] == [(BASE, None), ("good", BASE)]
    assert listed_adapters(models) == ("good",)


def test_each_failure_is_reported_with_its_reason_and_logged(server, adapters):
    debug = httpx.get(server.url + "/debug/engine").json()
    failed = {f["name"]: f for f in debug["failed_lora_adapters"]}
    assert list(failed) == list(BAD)
    for name, (_, words) in BAD.items():
        assert failed[name]["path"] == adapters[name] and words in failed[name]["reason"], failed[name]
        assert f"LoRA adapter '{name}' failed to load, serving without it: {failed[name]['reason']}" in \
            server.log_tail(10**6)
    assert failed_adapters(debug) == tuple((n, f["reason"]) for n, f in failed.items())


def test_loading_a_failed_adapter_later_clears_its_failure(server, adapters):
    r = httpx.post(server.url + "/v1/load_lora_adapter", json={"lora_name": "gone", "lora_path": adapters["good"]})
    assert r.status_code == 200, r.text
    assert "gone" not in [f["name"] for f in httpx.get(server.url + "/debug/engine").json()["failed_lora_adapters"]]
    assert listed_adapters(httpx.get(server.url + "/v1/models").json()) == ("gone", "good")
