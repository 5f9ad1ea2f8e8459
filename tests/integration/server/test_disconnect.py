"""A client that dies mid-request gets its request aborted: the engine's KV blocks all come back."""

import subprocess
import sys
import textwrap

import httpx
import pytest

# A real client process: the official openai client streaming a long completion, printing each chunk.
CLIENT = textwrap.dedent("""
    import sys, openai
    client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", max_retries=0)
    stream = client.completions.create(model="floodway/tiny-llama", prompt="A long story: " * 8, max_tokens=200,
                                       stream=True, extra_body={"ignore_eos": True})
    for chunk in stream:
        print("chunk", flush=True)
""")


def _abort_count(url: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("vllm:request_success_total") and 'finished_reason="abort"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("vllm:request_success_total{finished_reason=abort} missing")


def _blocks(url: str) -> dict:
    metrics = {}
    for line in httpx.get(url + "/metrics").text.splitlines():
        for name in ("floodway_kv_free_blocks", "floodway_kv_total_blocks", "vllm:kv_cache_usage_perc"):
            if line.startswith(name + "{"):
                metrics[name] = float(line.rsplit(" ", 1)[1])
    return metrics


def test_killed_streaming_client_frees_all_kv_blocks(slow_server, wait_for, engine_debug):
    url = slow_server.url
    aborts = _abort_count(url)
    client = subprocess.Popen([sys.executable, "-P", "-c", CLIENT, url], stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(3):  # mid-stream: a few chunks arrived
            assert client.stdout.readline().strip() == "chunk"
        in_use = engine_debug(url)["stats"]
        assert in_use["num_free_blocks"] < in_use["num_total_blocks"]  # the request holds blocks now
    finally:
        client.kill()
        client.wait()
    stats = wait_for(lambda: (s := engine_debug(url))["inflight"] == 0
                     and s["stats"]["num_free_blocks"] == s["stats"]["num_total_blocks"] and s, 30,
                     "all KV blocks free after the client was killed")
    assert stats["stats"]["num_running"] == 0 and stats["stats"]["num_waiting"] == 0
    assert stats["stats"]["generation_tokens_total"] > 0
    m = _blocks(url)
    assert m["floodway_kv_free_blocks"] == m["floodway_kv_total_blocks"] and m["vllm:kv_cache_usage_perc"] == 0
    assert _abort_count(url) == aborts + 1


def test_disconnected_non_streaming_client_is_aborted(slow_server, wait_for, engine_debug):
    url = slow_server.url
    aborts = _abort_count(url)
    body = {"prompt": "Tell me everything.", "max_tokens": 240, "ignore_eos": True}
    with httpx.Client(base_url=url) as c:
        with pytest.raises(httpx.ReadTimeout):  # gives up long before 240 steps of >= 20 ms
            c.post("/v1/completions", json=body, timeout=httpx.Timeout(30, read=0.2))
    wait_for(lambda: _abort_count(url) == aborts + 1, 30, "the abandoned request to be aborted")
    stats = wait_for(lambda: (s := engine_debug(url)["stats"])["num_free_blocks"] == s["num_total_blocks"] and s,
                     30, "all KV blocks free")
    assert stats["num_running"] == 0
