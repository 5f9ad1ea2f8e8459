"""schemathesis fuzzes the server from its own OpenAPI schema: valid and invalid bodies, never a 5xx.

Bounded: 12 examples per operation and mode, against a server whose tiny context (40 tokens) caps the
cost of any valid request (a chat request without max_tokens generates up to the context's end).
"""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

P, N = GenerationMode.POSITIVE, GenerationMode.NEGATIVE
CASES = [("/v1/completions", "POST", P), ("/v1/completions", "POST", N), ("/v1/chat/completions", "POST", P),
         ("/v1/chat/completions", "POST", N), ("/v1/models", "GET", P)]  # a GET without parameters has no negatives


@pytest.fixture(scope="module")
def fuzz_server(start_engine):
    return start_engine("--max-model-len", "40")


@pytest.fixture(scope="module")
def schema(fuzz_server):
    return schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")


@pytest.mark.parametrize("path,method,mode", CASES, ids=[f"{m} {p} {g.value}" for p, m, g in CASES])
def test_no_server_error_for_generated_requests(schema, fuzz_server, path, method, mode):
    operation = schema[path][method]
    seen = []

    @settings(max_examples=12, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        response = case.call(base_url=fuzz_server.url, timeout=60)
        seen.append(response.status_code)
        case.validate_response(response, checks=[not_a_server_error])

    run()
    assert seen and all(code < 500 for code in seen)
    if mode is GenerationMode.NEGATIVE and method == "POST":
        assert any(400 <= code < 500 for code in seen)  # the fuzzer did reach the error paths
