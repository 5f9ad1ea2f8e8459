import pytest
from floodway.operator.gateway.config import GatewayConfig, load_config


def write(tmp_path, text):
    p = tmp_path / "gw.yaml"
    p.write_text(text)
    return p


def test_full_example_loads_and_maps_to_policy(tmp_path):
    cfg = load_config(write(tmp_path, """
port: 9000
served_models: [chat]
backends: {static: ["http://127.0.0.1:1/", "http://127.0.0.1:2"]}
slo: {ttft_ms: 500}
overflow:
  enabled: true
  base_url: http://127.0.0.1:3/v1
  model: small
  api_key_env: KEY
  max_waiting_per_replica: 2
  max_requests_per_minute: 60
  breaker: {failure_threshold: 2, cooldown_s: 5}
"""))
    assert cfg.backends.static == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    policy = cfg.overflow_policy()
    assert policy.enabled and policy.ttft_slo_s == 0.5 and policy.max_waiting_per_replica == 2
    assert policy.budget.max_requests_per_minute == 60 and policy.budget.max_tokens_per_minute is None
    assert policy.breaker.failure_threshold == 2


@pytest.mark.parametrize("text, message", [
    ("backends: {static: [http://a]}\nbogus: 1", "bogus"),
    ("backends: {static: [ftp://a]}", "must start with http"),
    ("backends: {static: [http://a, http://a]}", "distinct"),
    ("{}", "no backends"),
    ("backends: {static: [http://a]}\noverflow: {enabled: true}", "base_url"),
    ("backends: {static: [http://a]}\noverflow: {api_key_env: A, api_key_file: /b}", "not both"),
    ("backends: {static: [http://a]}\nscrape_interval_s: 0", "scrape_interval_s"),
    ("- a list", "mapping"),
    ("a: [", "not valid YAML"),
])
def test_bad_configs_name_the_problem(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        load_config(write(tmp_path, text))


def test_missing_file(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_kubernetes_source():
    cfg = GatewayConfig.model_validate({"backends": {"kubernetes": {"namespace": "ns", "service": "svc"}}})
    assert cfg.backends.kubernetes.refresh_s == 2.0
