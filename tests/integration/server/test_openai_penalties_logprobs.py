"""Penalties, logit_bias, min_tokens, top-N logprobs and echo through the official openai client (and raw HTTP for
stream chunks and error bodies, validated against the OpenAI spec) against real engines: the tiny model where only
the mechanism matters, the trained SmolLM2-135M-Instruct in fp32 where logprob values are compared with
transformers' own.

Penalized greedy outputs are checked token for token against transformers' generate with its logits processors
(presence and frequency have none: OpenAI's formula is a processor written here). Logprobs are of the model's raw
distribution, before temperature, penalties and bias (vLLM's default): a +100 bias picks a token whose logprob
stays what the model gave it."""

import json

import httpx
import openai
import pytest
import torch

TINY = "floodway/tiny-llama"
SMOL = "floodway/smollm2-135m-instruct"
# "The quick brown fox jumps over the lazy dog" in the tiny model's tokens
PROMPT = [507, 1413, 1129, 2375, 81, 277, 1269, 1080, 2844, 86, 952, 267, 314, 68, 93, 92, 563, 74]
GREEDY = dict(temperature=0, max_tokens=12)
NO_EOS = {"ignore_eos": True}


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def stream(url: str, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=120) as r:
        assert r.status_code == 200, r.read()
        events = [e for e in r.read().decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    return [json.loads(e[6:]) for e in events[:-1]]


@pytest.fixture(scope="module")
def tiny_hf(tiny_model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return (AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32).eval(),
            AutoTokenizer.from_pretrained(tiny_model_path))


class OpenAIPenalties:
    """OpenAI's documented formula as a transformers logits processor, over the generated tokens only:
    mu[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty."""

    def __init__(self, prompt_len: int, presence: float, frequency: float):
        self.prompt_len, self.presence, self.frequency = prompt_len, presence, frequency

    def __call__(self, input_ids, scores):
        generated = input_ids[:, self.prompt_len:]
        counts = torch.zeros_like(scores).scatter_add_(1, generated, torch.ones_like(generated, dtype=scores.dtype))
        return scores - counts * self.frequency - (counts > 0).to(scores.dtype) * self.presence


def _hf_greedy(hf, n: int, presence=0.0, frequency=0.0, repetition=1.0) -> str:
    from transformers import LogitsProcessorList

    model, tok = hf
    custom = [OpenAIPenalties(len(PROMPT), presence, frequency)] if presence or frequency else []
    with torch.inference_mode():
        out = model.generate(torch.tensor([PROMPT]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             repetition_penalty=repetition, logits_processor=LogitsProcessorList(custom),
                             pad_token_id=0, eos_token_id=None)
    return tok.decode(out[0, len(PROMPT):], skip_special_tokens=True)


@pytest.mark.parametrize("penalties", [
    dict(presence_penalty=1.5), dict(frequency_penalty=1.2), dict(presence_penalty=-0.5, frequency_penalty=0.8),
    dict(repetition_penalty=1.6), dict(repetition_penalty=1.3, frequency_penalty=0.6)], ids=str)
def test_penalized_greedy_output_equals_transformers_with_its_processors(engine_server, tiny_hf, penalties):
    c = client(engine_server)
    plain = c.completions.create(model=TINY, prompt=PROMPT, **GREEDY, extra_body=NO_EOS)
    rep = {k: v for k, v in penalties.items() if k == "repetition_penalty"}  # a vLLM extra
    r = c.completions.create(model=TINY, prompt=PROMPT, **GREEDY, presence_penalty=penalties.get("presence_penalty"),
                             frequency_penalty=penalties.get("frequency_penalty"), extra_body={**NO_EOS, **rep})
    want = _hf_greedy(tiny_hf, 12, penalties.get("presence_penalty", 0.0), penalties.get("frequency_penalty", 0.0),
                      penalties.get("repetition_penalty", 1.0))
    assert r.choices[0].text == want
    assert want != plain.choices[0].text == _hf_greedy(tiny_hf, 12)  # the penalty changed the output


def test_logit_bias_forces_and_bans_tokens_and_logprobs_stay_raw(engine_server, tiny_hf):
    c, tok = client(engine_server), tiny_hf[1]
    forced = 1234
    r = c.completions.create(model=TINY, prompt=PROMPT, temperature=0, max_tokens=4, logprobs=1,
                             logit_bias={str(forced): 100}, extra_body=NO_EOS)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == tok.decode([forced] * 4)
    # Raw distribution: the forced token keeps the model's own (low) logprob; after the bias it would be ~0.
    assert all(x < -1.0 for x in lp.token_logprobs)
    assert all(len(top) == 2 and top[lp.tokens[i]] == lp.token_logprobs[i]
               for i, top in enumerate(lp.top_logprobs))  # the model's favourite, and the chosen token
    first = c.completions.create(model=TINY, prompt=PROMPT, temperature=0, max_tokens=1, logprobs=0)
    favourite = int(_hf_logprobs(tiny_hf[0], PROMPT)[-1].argmax())
    assert first.choices[0].text == tok.decode([favourite])
    banned = c.completions.create(model=TINY, prompt=PROMPT, temperature=0, max_tokens=1,
                                  logit_bias={str(favourite): -100})
    assert banned.choices[0].text != first.choices[0].text


def test_min_tokens_holds_back_a_stop_token(engine_server, tiny_hf):
    c = client(engine_server)
    favourite = int(_hf_logprobs(tiny_hf[0], PROMPT)[-1].argmax())
    body = dict(model=TINY, prompt=PROMPT, **GREEDY)
    stopped = c.completions.create(**body, extra_body={**NO_EOS, "stop_token_ids": [favourite]})
    assert stopped.choices[0].finish_reason == "stop" and stopped.usage.completion_tokens == 1
    held = c.completions.create(**body, extra_body={**NO_EOS, "stop_token_ids": [favourite], "min_tokens": 4})
    assert held.usage.completion_tokens >= 4 and held.choices[0].text != stopped.choices[0].text


def _hf_logprobs(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), -1)


def test_echo_returns_the_prompt_with_its_logprobs(engine_server, tiny_hf, validate_openai):
    model, tok = tiny_hf
    text = tok.decode(PROMPT)
    plain = client(engine_server).completions.create(model=TINY, prompt=text, max_tokens=3, temperature=0, echo=True)
    assert plain.choices[0].text.startswith(text) and plain.choices[0].logprobs is None
    body = dict(model=TINY, prompt=PROMPT, max_tokens=3, temperature=0, echo=True, logprobs=2, ignore_eos=True)
    r = httpx.post(engine_server.url + "/v1/completions", json=body, timeout=120).json()
    lp = r["choices"][0]["logprobs"]
    assert r["choices"][0]["text"] == plain.choices[0].text  # the same prompt, as text or as its ids
    assert len(lp["tokens"]) == len(PROMPT) + 3 and lp["tokens"][:len(PROMPT)] == [tok.decode([t]) for t in PROMPT]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None  # as OpenAI: nothing scores token 0
    ref = _hf_logprobs(model, PROMPT)
    assert lp["token_logprobs"][1:len(PROMPT)] == pytest.approx(
        [ref[p - 1, PROMPT[p]].item() for p in range(1, len(PROMPT))], abs=1e-4)
    assert all(2 <= len(top) <= 3 for top in lp["top_logprobs"][1:])
    validate_openai(r, "CreateCompletionResponse")


def test_echo_with_max_tokens_zero_scores_the_prompt_only(engine_server, validate_stream):
    c = client(engine_server)
    r = c.completions.create(model=TINY, prompt=PROMPT, max_tokens=0, echo=True, logprobs=0)
    assert r.usage.completion_tokens == 0 and r.choices[0].finish_reason == "length"
    assert len(r.choices[0].logprobs.tokens) == len(PROMPT) and r.choices[0].logprobs.token_logprobs[0] is None
    longer = c.completions.create(model=TINY, prompt=PROMPT, max_tokens=2, echo=True, logprobs=0, extra_body=NO_EOS)
    assert r.choices[0].logprobs.token_logprobs == longer.choices[0].logprobs.token_logprobs[:len(PROMPT)]
    chunks = stream(engine_server.url, "/v1/completions", dict(model=TINY, prompt=PROMPT, max_tokens=0, echo=True,
                                                                logprobs=0))
    validate_stream(chunks, "CreateCompletionResponse")
    assert [ch["choices"][0]["text"] for ch in chunks] == [r.choices[0].text]


def test_streamed_logprobs_add_up_to_the_whole_and_conform(engine_server, tiny_hf, validate_stream):
    body = dict(model=TINY, prompt=PROMPT, max_tokens=10, temperature=0, logprobs=3, ignore_eos=True)
    whole = httpx.post(engine_server.url + "/v1/completions", json=body, timeout=120).json()["choices"][0]
    chunks = stream(engine_server.url, "/v1/completions", body)
    validate_stream(chunks, "CreateCompletionResponse")
    pieces = [c["choices"][0]["logprobs"] for c in chunks if c["choices"]]
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        assert sum((p[key] for p in pieces), []) == whole["logprobs"][key], key
    echoed = stream(engine_server.url, "/v1/completions", {**body, "echo": True})
    validate_stream(echoed, "CreateCompletionResponse")
    first = echoed[0]["choices"][0]
    assert first["text"].startswith(tiny_hf[1].decode(PROMPT)) and first["logprobs"]["token_logprobs"][0] is None
    assert "".join(c["choices"][0]["text"] for c in echoed) == tiny_hf[1].decode(PROMPT) + whole["text"]


def test_chat_top_logprobs_streamed_and_whole(engine_server, validate_openai, validate_stream):
    body = dict(model=TINY, messages=[{"role": "user", "content": "Say something."}], max_tokens=6, temperature=0,
                logprobs=True, top_logprobs=4, ignore_eos=True)
    r = httpx.post(engine_server.url + "/v1/chat/completions", json=body, timeout=120).json()
    validate_openai(r, "CreateChatCompletionResponse")
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == 6
    for entry in content:
        alts = entry["top_logprobs"]
        assert len(alts) == 4 and [a["logprob"] for a in alts] == sorted((a["logprob"] for a in alts), reverse=True)
        assert alts[0]["logprob"] >= entry["logprob"]  # greedy picks the most likely token
        assert all(a["bytes"] == list(a["token"].encode()) for a in alts)
    chunks = stream(engine_server.url, "/v1/chat/completions", body)
    validate_stream(chunks, "CreateChatCompletionStreamResponse")
    streamed = [e for c in chunks for ch in c["choices"] if ch.get("logprobs") for e in ch["logprobs"]["content"]]
    assert streamed == content


@pytest.mark.parametrize("path, extra, param", [
    ("/v1/completions", {"logit_bias": {"abc": 1}}, "logit_bias"),
    ("/v1/completions", {"logit_bias": {"5": 101}}, "logit_bias"),
    ("/v1/completions", {"logit_bias": {"99999": 1}}, "logit_bias"),  # outside the vocabulary
    ("/v1/completions", {"presence_penalty": 2.5}, "presence_penalty"),
    ("/v1/completions", {"frequency_penalty": "1"}, "frequency_penalty"),
    ("/v1/completions", {"repetition_penalty": 0}, "repetition_penalty"),
    ("/v1/completions", {"min_tokens": 20, "max_tokens": 5}, "min_tokens"),
    ("/v1/completions", {"logprobs": 6}, "logprobs"),
    ("/v1/chat/completions", {"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
    ("/v1/chat/completions", {"top_logprobs": 2}, None),  # needs logprobs: true
])
def test_bad_values_get_a_400_naming_the_field(engine_server, validate_openai, path, extra, param):
    base = {"prompt": "hi"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(engine_server.url + path, json={"model": TINY, **base, **extra}, timeout=60)
    assert r.status_code == 400, r.text
    validate_openai(r.json(), "ErrorResponse")
    if param:
        assert r.json()["error"]["param"].split(".")[0] == param  # logit_bias.<key> names the entry
    else:
        assert "top_logprobs" in r.json()["error"]["message"]


# ---- the trained model: values against transformers -----------------------------------------------------------

@pytest.fixture(scope="module")
def smol(start_engine):
    return start_engine("--model", SMOL, "--dtype", "float32", "--quantization", "none", "--max-model-len", "512",
                        "--max-num-seqs", "4")


@pytest.fixture(scope="module")
def smol_hf():
    from floodway.engine.models.builtin import resolve_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(SMOL)  # the folder the engine loads too
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(path)


def test_chat_logprobs_match_transformers_log_softmax_on_smollm2(smol, smol_hf):
    model, tok = smol_hf
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False),
                        add_special_tokens=False)
    r = client(smol).chat.completions.create(model=SMOL, messages=messages, max_tokens=12, temperature=0,
                                             logprobs=True, top_logprobs=5)
    content = r.choices[0].logprobs.content
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=len(content), do_sample=False)[0].tolist()
    ids = out[len(prompt):]
    ref = _hf_logprobs(model, prompt + ids)
    for i, entry in enumerate(content):
        row = ref[len(prompt) - 1 + i]
        assert entry.token == tok.decode([ids[i]])
        assert entry.logprob == pytest.approx(row[ids[i]].item(), abs=2e-3)
        vals, top = row.topk(5)
        assert [a.token for a in entry.top_logprobs] == [tok.decode([t]) for t in top.tolist()]
        assert [a.logprob for a in entry.top_logprobs] == pytest.approx(vals.tolist(), abs=2e-3)


def test_echo_prompt_logprobs_match_transformers_on_smollm2(smol, smol_hf):
    """max_tokens 0 with echo: the prompt scored, each token's logprob and top 5 as transformers computes them."""
    model, tok = smol_hf
    prompt = tok.encode("The three primary colours are red, yellow and blue.", add_special_tokens=False)
    r = client(smol).completions.create(model=SMOL, prompt=prompt, max_tokens=0, logprobs=5, echo=True)
    lp = r.choices[0].logprobs
    assert r.choices[0].text == tok.decode(prompt) and lp.tokens == [tok.decode([t]) for t in prompt]
    ref = _hf_logprobs(model, prompt)
    assert lp.token_logprobs[0] is None
    assert lp.token_logprobs[1:] == pytest.approx([ref[p - 1, prompt[p]].item() for p in range(1, len(prompt))],
                                                  abs=2e-3)
    for p in range(1, len(prompt)):
        vals, top = ref[p - 1].topk(5)
        want = {tok.decode([t]): v for t, v in zip(top.tolist(), vals.tolist(), strict=True)}
        want[lp.tokens[p]] = ref[p - 1, prompt[p]].item()
        assert lp.top_logprobs[p] == pytest.approx(want, abs=2e-3)
