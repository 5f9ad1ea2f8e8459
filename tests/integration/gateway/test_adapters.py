"""LoRA adapters through the real gateway process: two tiny engines, each serving a different adapter made with
peft, behind one gateway that reads their /v1/models as they turn ready. A request for an adapter goes to the
engine holding it (within the load cap, which requests taken in turn never reach); the overflow rule per model: a
mapped adapter overflows under its mapped name, an unmapped one never does (429 with Retry-After when the hold is
full)."""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from floodway.operator import procs

from tests.integration.gateway.conftest import MODEL
from tests.lora_peft import random_adapter


@pytest.fixture(scope="module")
def adapters(tiny_model_path, tmp_path_factory, torch_threads) -> dict[str, str]:
    d = tmp_path_factory.mktemp("lora")
    with torch_threads(1):
        return {name: random_adapter(tiny_model_path, d / name, r=4, alpha=8, seed=seed)
                for seed, name in enumerate(("a", "b"))}


def _complete(gw: procs.Proc, model: str, prompt: str = "The same prompt for every model") -> httpx.Response:
    return httpx.post(gw.url + "/v1/completions", timeout=60,
                      json={"model": model, "prompt": prompt, "max_tokens": 2, "temperature": 0})


def test_each_adapter_goes_to_the_engine_holding_it_and_only_mapped_ones_overflow(engine, gateway, adapters,
                                                                                     validate_reply):
    with ThreadPoolExecutor(2) as pool:  # both start at once: most of a start is one core's imports
        started = {name: pool.submit(engine, f"lora-{name}", MODEL, "--enable-lora", "--lora-modules",
                                     f"{name}={path}", "--max-loras", "1") for name, path in adapters.items()}
        holder = {name: future.result() for name, future in started.items()}
    gw = gateway({"served_models": [MODEL, "a", "b"], "max_loras": 1, "scrape_interval_s": 0.2,
                  "backends": {"static": [holder["a"].url, holder["b"].url]}})
    state = httpx.get(gw.url + "/debug/state").json()["backends"]
    assert {b["id"]: b["adapters"] for b in state} == {holder["a"].url: ["a"], holder["b"].url: ["b"]}
    for _ in range(4):
        for name in ("a", "b", MODEL):
            r = _complete(gw, name)
            validate_reply(r)
            assert r.status_code == 200 and r.json()["model"] == name
            if name != MODEL:
                assert r.headers["x-floodway-backend"] == holder[name].url

    # No engine ready and no room to hold: a is mapped to the API's model, b is not.
    dead = f"http://127.0.0.1:{procs.free_port()}"
    spill = gateway({"served_models": [MODEL, "a", "b"], "backends": {"static": [dead]},
                     "overflow": {"enabled": True, "base_url": holder["a"].url + "/v1", "models": {"a": MODEL},
                                  "hold_queue_size": 0}})
    mapped, base, unmapped = _complete(spill, "a"), _complete(spill, MODEL), _complete(spill, "b")
    for r in (mapped, base):
        validate_reply(r)
        assert r.status_code == 200 and r.headers["x-floodway-backend"] == "overflow" and r.json()["model"] == MODEL
    validate_reply(unmapped)
    assert unmapped.status_code == 429 and int(unmapped.headers["retry-after"]) >= 1
    assert unmapped.json()["error"]["code"] == "capacity_exceeded"
