"""LoRA through a real `floodway engine` and the official openai client: an adapter fine-tuned here with peft (a fixed
answer format) changes the answer where it is named in `model`, and only there; vLLM's load/unload endpoints with a
clear 4xx for each bad adapter; `/v1/models` with `parent`; `vllm:lora_requests_info`."""

import json
import shutil

import httpx
import openai
import pytest

from tests.lora_peft import FORMAT_ANSWER, finetune_format_adapter, question

BASE = "floodway/tiny-llama"


@pytest.fixture(scope="module")
def adapter(tiny_model_path, tmp_path_factory, torch_threads) -> str:
    with torch_threads(1):  # a second thread only waits for the first on a shared 2-core machine
        return finetune_format_adapter(tiny_model_path, tmp_path_factory.mktemp("lora") / "fmt")


@pytest.fixture(scope="module")
def server(start_engine, adapter):
    # Steps of at least 20 ms: a 64-token answer is still running when the metrics are read.
    return start_engine("--max-model-len", "256", "--max-num-seqs", "8", "--step-delay-ms", "20", "--enable-lora",
                        "--lora-modules", f"fmt={adapter}", "--max-loras", "2", "--max-lora-rank", "16")


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _answer(client, model: str, i: int) -> str:
    r = client.completions.create(model=model, prompt=question(i), max_tokens=8, temperature=0)
    assert r.model == model
    return r.choices[0].text


def test_the_fine_tuned_adapter_answers_in_its_format_and_the_base_does_not(client):
    held_out = range(100, 104)  # not among the questions it was trained on
    assert all(_answer(client, "fmt", i).startswith(FORMAT_ANSWER) for i in held_out)
    assert not any(_answer(client, BASE, i).startswith(FORMAT_ANSWER[:4]) for i in held_out)
    chunks = list(client.completions.create(model="fmt", prompt=question(200), max_tokens=8, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices).startswith(FORMAT_ANSWER)
    assert {c.model for c in chunks} == {"fmt"}


def test_models_lists_adapters_with_their_parent(server, adapter):
    data = httpx.get(server.url + "/v1/models").json()["data"]
    assert [(m["id"], m["parent"], m["root"]) for m in data] == [(BASE, None, None), ("fmt", BASE, adapter)]
    assert httpx.get(server.url + "/v1/models/fmt").json()["parent"] == BASE


def _post(server, path: str, body) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def test_load_and_unload_like_vllm(server, client, adapter):
    r = _post(server, "/v1/load_lora_adapter", {"lora_name": "fmt2", "lora_path": adapter})
    assert r.status_code == 200 and r.text == "Success: LoRA adapter 'fmt2' added successfully."
    assert _answer(client, "fmt2", 101).startswith(FORMAT_ANSWER)
    again = _post(server, "/v1/load_lora_adapter", {"lora_name": "fmt2", "lora_path": adapter})
    assert again.status_code == 400 and "already been loaded" in again.json()["error"]["message"]
    r = _post(server, "/v1/unload_lora_adapter", {"lora_name": "fmt2"})
    assert r.status_code == 200 and r.text == "Success: LoRA adapter 'fmt2' removed successfully."
    with pytest.raises(openai.NotFoundError, match="fmt2"):
        _answer(client, "fmt2", 101)
    gone = _post(server, "/v1/unload_lora_adapter", {"lora_name": "fmt2"})
    assert gone.status_code == 404 and gone.json()["error"]["param"] == "lora_name"


def _copy(adapter: str, tmp_path, name: str, **config) -> str:
    folder = tmp_path / name
    shutil.copytree(adapter, folder)
    cfg = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**cfg, **config}))
    return str(folder)


def test_bad_adapters_get_clear_4xx(server, adapter, tmp_path):
    from safetensors.torch import load_file, save_file

    mismatch = _copy(adapter, tmp_path, "mismatch")
    weights = load_file(f"{mismatch}/adapter_model.safetensors")
    save_file({k: v[:, :100].contiguous() if "lora_A" in k else v for k, v in weights.items()},  # as if hidden size 100
              f"{mismatch}/adapter_model.safetensors")
    broken = _copy(adapter, tmp_path, "broken")
    (tmp_path / "broken" / "adapter_config.json").write_text("{")
    cases = [({"lora_name": "x", "lora_path": str(tmp_path / "nowhere")}, 404, "no adapter folder"),
             ({"lora_name": "x", "lora_path": broken}, 400, "not valid JSON"),
             ({"lora_name": "x", "lora_path": _copy(adapter, tmp_path, "r32", r=32)}, 400, "--max-lora-rank 16"),
             ({"lora_name": "x", "lora_path": mismatch}, 400, "base-model mismatch"),
             ({"lora_name": BASE, "lora_path": adapter}, 400, "base model"),
             ({"lora_name": "bad name", "lora_path": adapter}, 400, "lora_name"),
             ({"lora_name": "x"}, 400, "lora_path")]
    for body, status, message in cases:
        r = _post(server, "/v1/load_lora_adapter", body)
        assert (r.status_code, message in r.json()["error"]["message"]) == (status, True), (body, r.text)
    assert "x" not in [m["id"] for m in httpx.get(server.url + "/v1/models").json()["data"]]


def test_lora_requests_info_names_running_adapters(server, client):
    stream = client.completions.create(model="fmt", prompt=question(300), max_tokens=64, temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})
    next(iter(stream))  # running now, for at least 63 more steps of 20 ms
    text = httpx.get(server.url + "/metrics").text
    stream.close()
    line = next(x for x in text.splitlines() if x.startswith("vllm:lora_requests_info{"))
    assert 'max_lora="2"' in line and 'running_lora_adapters="fmt"' in line and 'waiting_lora_adapters=""' in line
    assert float(line.rsplit(" ", 1)[1]) > 1.7e9  # valued by the time, as vLLM
