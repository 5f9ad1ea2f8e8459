"""Hostile bodies fuzzed (hypothesis) against a real engine and real gateways in front of it, on the local path
and the overflow path: lone surrogates, invalid UTF-8, huge integers and floats, NaN, deep JSON, 2-5 MB
prompts, unsupported fields, broken bodies. Every answer is below 500 and valid against the official OpenAI spec
(an ErrorResponse when it is an error; a response or a stream of chunks when a body happened to be valid);
afterwards the engine is healthy, no backend was taken out of rotation, and (the session fixture checks it) no
traceback reached the engine's log.

Bounded for the test suite (FUZZ_EXAMPLES per target, derandomized); a larger, random run for anyone:
    FLOODWAY_FUZZ_EXAMPLES=2000 .venv/bin/pytest tests/integration/server/test_fuzz_hostile.py -q
"""

import json
import os

import httpx
import pytest
import yaml
from floodway.operator import procs
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("FLOODWAY_FUZZ_EXAMPLES", "20"))
MODEL = "floodway/tiny-llama"
CMPL, CHAT = "/v1/completions", "/v1/chat/completions"


def raw(value) -> bytes:
    return json.dumps(value).encode()  # ASCII-escaped: a lone surrogate travels as a valid JSON escape


surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
texts = st.one_of(st.text(max_size=40), st.builds(lambda a, s, b: a + s + b, st.text(max_size=5), surrogates,
                                                  st.text(max_size=5)))
huge_ints = st.integers(1, 6000).map(lambda digits: b"-" * (digits % 2) + b"9" * digits)  # past 4300: refused
floats = st.sampled_from([b"1e308", b"-1e308", b"1e999", b"NaN", b"Infinity", b"-Infinity", b"4.9e-324"])
deep = st.tuples(st.integers(1, 20_000), st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")])).map(
    lambda d: d[1][0] * d[0] + b"1" + d[1][1] * d[0])
# 2-5 MB JSON strings (over 4 MiB: 413) of ASCII, escapes, lone-surrogate escapes, or raw multi-byte UTF-8
FILLERS = [b"a", b"\\u00e9", b"\\udcff", "\u00e9".encode(), "\U0001F600".encode()]
big_text = st.tuples(st.integers(2 * 2**20, 5 * 2**20), st.sampled_from(FILLERS)).map(
    lambda s: b'"' + s[1] * (s[0] // len(s[1])) + b'"')
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
                           max_leaves=12).map(raw)
values = st.one_of(json_values, texts.map(raw), huge_ints, floats, deep, st.just(b"[1, 99999999999999999999]"))
text_values = st.one_of(values, values, values, big_text)  # multi-MB now and then: each costs seconds here
FIELDS = ["prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "seed",
          "stop", "stop_token_ids", "logprobs", "top_logprobs", "stream", "stream_options", "tools",
          "response_format", "logit_bias", "user", "model", "echo", "best_of", "ignore_eos"]


@st.composite
def hostile_bodies(draw) -> tuple[str, bytes]:
    path = draw(st.sampled_from([CMPL, CHAT]))
    fields = {"model": raw(MODEL), "max_tokens": b"2"}
    if path == CMPL:
        fields["prompt"] = raw("hi")
    else:
        fields["messages"] = raw([{"role": "user", "content": "hi"}])
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(FIELDS) | texts)
        fields[key] = draw(text_values if key in ("prompt", "stop", "user") else values)
    if path == CHAT and draw(st.booleans()):  # the hostile value inside a message
        fields["messages"] = b'[{"role": "user", "content": ' + draw(text_values) + b"}]"
    body = b"{" + b", ".join(raw(k) + b": " + v for k, v in fields.items()) + b"}"
    damage = draw(st.sampled_from(["none"] * 6 + ["truncate", "bad_utf8", "top_level"]))
    if damage == "truncate":
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif damage == "bad_utf8":
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80"])) + body[at:]
    elif damage == "top_level":
        body = b"[" + body + b"]"
    return path, body


@pytest.fixture(scope="module")
def fuzz_engine(start_engine):
    return start_engine("--max-model-len", "64")


@pytest.fixture(scope="module")
def gateways(fuzz_engine, tmp_path_factory):
    """{"local": a gateway in front of the engine, "overflow": one with no live replica, overflowing to it}."""
    dead = f"http://127.0.0.1:{procs.free_port()}"
    configs = {"local": {"backends": {"static": [fuzz_engine.url]}, "scrape_interval_s": 0.2},
               "overflow": {"backends": {"static": [dead]},
                            "overflow": {"enabled": True, "base_url": fuzz_engine.url + "/v1"}}}
    started = {}
    try:
        for name, config in configs.items():
            port = procs.free_port()
            folder = tmp_path_factory.mktemp(f"gateway-{name}")
            (folder / "gateway.yaml").write_text(yaml.safe_dump({"host": "127.0.0.1", "port": port,
                                                                 "debug_state": True, **config}))
            started[name] = procs.start(procs.FLOODWAY_ARGV + ["gateway", "--config", str(folder / "gateway.yaml")],
                                        port, "/ready", timeout_s=60, log_path=str(folder / "gateway.log"))
        yield started
    finally:
        for proc in started.values():
            proc.stop(grace_s=5)


# Each kind at least once per run (printed with its answer), whatever hypothesis draws besides.
KINDS = {
    "5 MB prompt": (CMPL, b'{"prompt": "' + b"a" * (5 * 2**20) + b'"}'),
    "3 MB of lone-surrogate escapes": (CMPL, b'{"prompt": "' + b"\\udcff" * 2**19 + b'"}'),
    "2 MB chat message (UTF-8)": (CHAT, b'{"messages": [{"role": "user", "content": "' + "\u00e9".encode() * 2**20
                                  + b'"}]}'),
    "lone surrogate in stop": (CMPL, b'{"prompt": "hi", "max_tokens": 2, "stop": "\\ud800"}'),
    "invalid UTF-8 byte": (CMPL, b'{"prompt": "a\xffb"}'),
    "JSON 20000 deep": (CMPL, b'{"prompt": ' + b"[" * 20_000 + b"1" + b"]" * 20_000 + b"}"),
    "6000-digit integer": (CMPL, b'{"prompt": "hi", "max_tokens": ' + b"9" * 6000 + b"}"),
    "1e999 and NaN": (CMPL, b'{"prompt": "hi", "max_tokens": 1e999, "temperature": NaN}'),
    "max_tokens 10**30": (CMPL, b'{"prompt": "hi", "max_tokens": 1' + b"0" * 30 + b"}"),
    "tools": (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}'),
    "logprobs 3": (CMPL, b'{"prompt": "hi", "max_tokens": 2, "logprobs": 3}'),
    "truncated body": (CMPL, b'{"prompt": "hi", "max_tok'),
    "top-level array": (CHAT, b'[{"messages": []}]'),
}
NAMES = {body: name for name, (_, body) in KINDS.items()}


def kinds(test):
    for case in KINDS.values():
        test = example(case=case)(test)
    return test


def check(url: str, path: str, body: bytes, seen: list, validate_reply) -> None:
    r = httpx.post(url + path, content=body, headers={"content-type": "application/json"}, timeout=120)
    seen.append(r.status_code)
    if body in NAMES:
        print(f"  {NAMES[body]}: {r.status_code} {r.text[:110]}")
    assert r.status_code < 500, (body[:200], r.status_code, r.text[:300])
    validate_reply(r)
    if r.status_code >= 400:
        error = r.json()["error"]
        assert error["message"] and error["type"], error


@pytest.mark.parametrize("target", ["engine", "local", "overflow"])
def test_hostile_bodies_never_get_a_server_error(fuzz_engine, gateways, target, validate_reply):
    url = fuzz_engine.url if target == "engine" else gateways[target].url
    seen: list[int] = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize="FLOODWAY_FUZZ_EXAMPLES" not in
              os.environ, suppress_health_check=list(HealthCheck))
    @given(case=hostile_bodies())
    @kinds
    def run(case):
        check(url, *case, seen, validate_reply)

    run()
    assert seen and any(400 <= code < 500 for code in seen)
    assert httpx.get(fuzz_engine.url + "/health", timeout=10).status_code == 200
    if target != "engine":
        text = httpx.get(url + "/metrics", timeout=10).text
        retried = [line for line in text.splitlines() if 'outcome="retried"' in line and not line.endswith(" 0.0")]
        assert not retried, retried  # no hostile request counted as a backend failure
    print(f"{target}: {len(seen)} hostile requests, statuses {sorted(set(seen))}")
