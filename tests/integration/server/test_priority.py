"""The request field `priority` (a vLLM extension of the OpenAI API): served by an engine started with
--scheduling-policy priority, refused with a 400 naming it by an fcfs engine unless 0, as vLLM does. Every answer is
checked against the OpenAI spec's shapes. (Which request goes first: tests/unit/engine/test_scheduler.py.)"""

import httpx
import pytest

CMPL, CHAT = "/v1/completions", "/v1/chat/completions"
BODIES = {CMPL: {"prompt": "hi", "max_tokens": 2}, CHAT: {"messages": [{"role": "user", "content": "hi"}],
                                                          "max_tokens": 2}}


@pytest.fixture(scope="module")
def priority_server(start_engine):
    return start_engine("--max-model-len", "256", "--max-num-seqs", "8", "--scheduling-policy", "priority")


def post(server, path, stream=False, **fields):
    return httpx.post(server.url + path, json={**BODIES[path], "stream": stream, **fields}, timeout=60)


@pytest.mark.parametrize("path", [CMPL, CHAT])
@pytest.mark.parametrize("stream", [False, True])
def test_the_priority_policy_serves_any_integer_priority(priority_server, path, stream, validate_reply):
    for priority in (-3, 0, 7):
        r = post(priority_server, path, stream, priority=priority)
        assert r.status_code == 200, r.text
        validate_reply(r)


@pytest.mark.parametrize("path", [CMPL, CHAT])
def test_fcfs_serves_priority_0_and_refuses_any_other(engine_server, path, validate_reply):
    r = post(engine_server, path, priority=0)
    assert r.status_code == 200, r.text
    validate_reply(r)
    for priority in (1, -1):
        r = post(engine_server, path, priority=priority)
        assert r.status_code == 400, r.text
        err = validate_reply(r)["error"]
        assert (err["param"], err["type"]) == ("priority", "invalid_request_error")
        assert f"priority {priority} needs --scheduling-policy priority" in err["message"], err["message"]


@pytest.mark.parametrize("value", ["high", 1.5, None, True])
def test_a_priority_that_is_no_integer_is_refused_under_either_policy(engine_server, priority_server, value,
                                                                      validate_reply):
    for server in (engine_server, priority_server):
        r = post(server, CMPL, priority=value)
        assert r.status_code == 400, r.text
        err = validate_reply(r)["error"]
        assert (err["param"], err["code"]) == ("priority", "invalid_value"), err
