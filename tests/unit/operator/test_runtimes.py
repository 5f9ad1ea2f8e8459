"""The runtime table: each runtime's flags from the spec, its probes, and its metric names mapped to ours
(the sample texts follow each runtime's documented /metrics output)."""

import typing

import pytest
from floodway.operator.autoscaler.signals import parse_engine
from floodway.operator.gateway.backends import parse_engine_load
from floodway.operator.gateway.config import GatewayConfig
from floodway.operator.render import Images, Owner, render
from floodway.operator.render.engine import engine_args, ready_path
from floodway.operator.render.gateway import cluster_gateway_config
from floodway.operator.runtimes import RUNTIMES, runtime
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.models import EngineSpec
from pydantic import ValidationError

ENGINE = {"maxModelLen": 2048, "maxNumSeqs": 8, "maxNumBatchedTokens": 512, "blockSize": 32,
          "gpuMemoryUtilization": 0.8}


def spec(runtime_name: str, gpus: int = 1, storage: dict | None = None, **engine) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({
        "model": "org/model", "servedModelName": "chat", "resources": {"gpus": gpus}, "storage": storage or {},
        "engine": {"runtime": runtime_name, **ENGINE, **engine}})


def flags(args: list[str]) -> dict[str, str | None]:
    """{flag: value or None for a bare switch}."""
    out, i = {}, 0
    while i < len(args):
        value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        out[args[i]] = value
        i += 2 if value is not None else 1
    return out


def test_the_spec_offers_exactly_the_table():
    assert typing.get_args(EngineSpec.model_fields["runtime"].annotation) == tuple(RUNTIMES)


def test_unknown_runtime_is_named():
    with pytest.raises(ValueError, match="unknown runtime 'ollama'"):
        runtime("ollama")


def test_vllm_and_ours_share_vllm_flags():
    ours = flags(engine_args(spec("floodway"), "0.0.0.0", 8000))
    vllm = flags(engine_args(spec("vllm", gpus=2), "0.0.0.0", 8000))
    for f in (ours, vllm):
        assert f["--model"] == "org/model" and f["--served-model-name"] == "chat" and f["--port"] == "8000"
        assert f["--max-model-len"] == "2048" and f["--max-num-seqs"] == "8" and f["--block-size"] == "32"
    assert vllm["--tensor-parallel-size"] == "2" and "--drain-timeout" not in vllm
    assert "--tensor-parallel-size" not in ours and ours["--drain-timeout"] == "55"
    assert "--tensor-parallel-size" not in flags(engine_args(spec("vllm", gpus=1), "h", 1))


def test_vllm_on_cpu_gets_blocks_its_attention_takes_and_a_kv_cache_the_pod_bounds():
    """vLLM's CPU attention takes blocks of a multiple of 32 tokens (16 fails at start), and without a size its CPU
    KV cache takes a share of the host's memory: on CPU the operator rounds the block size up and passes our
    engine's CPU KV default. On GPUs, and for our engine on CPU, the spec's values go through as they are."""
    from floodway.engine.config import DEFAULT_CPU_KV_BYTES

    for block, rendered in ((16, "32"), (32, "32"), (40, "64")):
        cpu = flags(engine_args(spec("vllm", gpus=0, blockSize=block), "h", 1))
        assert cpu["--block-size"] == rendered and cpu["--kv-cache-memory-bytes"] == str(DEFAULT_CPU_KV_BYTES)
    gpu = flags(engine_args(spec("vllm", gpus=1, blockSize=16), "h", 1))
    assert gpu["--block-size"] == "16" and "--kv-cache-memory-bytes" not in gpu
    ours = flags(engine_args(spec("floodway", gpus=0, blockSize=16), "h", 1))
    assert ours["--block-size"] == "16" and "--kv-cache-memory-bytes" not in ours


def test_a_model_on_a_claim_is_loaded_from_its_mount():
    s = spec("sglang", storage={"modelClaim": {"name": "models", "path": "qwen"}})
    assert flags(engine_args(s, "h", 1))["--model-path"] == "/models/qwen"


def test_sglang_flags():
    f = flags(engine_args(spec("sglang", gpus=4, enablePrefixCaching=False), "0.0.0.0", 30000))
    assert f["--model-path"] == "org/model" and f["--served-model-name"] == "chat" and f["--host"] == "0.0.0.0"
    assert f["--context-length"] == "2048" and f["--max-running-requests"] == "8"
    assert f["--chunked-prefill-size"] == "512" and f["--page-size"] == "32" and f["--mem-fraction-static"] == "0.8"
    assert f["--tp-size"] == "4" and "--enable-metrics" in f and "--disable-radix-cache" in f


def test_tgi_flags():
    f = flags(engine_args(spec("tgi", gpus=2, dtype="bfloat16"), "0.0.0.0", 8000))
    assert f["--model-id"] == "org/model" and f["--hostname"] == "0.0.0.0" and f["--num-shard"] == "2"
    assert f["--max-total-tokens"] == "2048" and f["--max-input-tokens"] == "2047"
    assert f["--max-batch-size"] == "8" and f["--max-batch-prefill-tokens"] == "512" and f["--dtype"] == "bfloat16"
    assert "--dtype" not in flags(engine_args(spec("tgi"), "h", 1))  # auto: TGI chooses


def test_llamacpp_flags_give_every_slot_the_full_context():
    f = flags(engine_args(spec("llamacpp", gpus=0, extraArgs=["--threads", "2"]), "0.0.0.0", 8080))
    assert f["--model"] == "org/model" and f["--alias"] == "chat" and f["--port"] == "8080"
    assert f["--parallel"] == "8" and f["--ctx-size"] == str(2048 * 8) and f["--batch-size"] == "512"
    assert "--metrics" in f and "--n-gpu-layers" not in f and f["--threads"] == "2"
    assert flags(engine_args(spec("llamacpp", gpus=1), "h", 1))["--n-gpu-layers"] == "999"


@pytest.mark.parametrize("name", ["floodway", "vllm"])
def test_scheduling_policy_priority_is_vllms_flag(name):
    assert "--scheduling-policy" not in flags(engine_args(spec(name), "h", 1))  # fcfs: both runtimes' default
    assert flags(engine_args(spec(name, schedulingPolicy="priority"), "h", 1))["--scheduling-policy"] == "priority"


@pytest.mark.parametrize("name", ["sglang", "tgi", "llamacpp"])
def test_runtimes_without_vllms_priority_scheduling_refuse_it(name):
    assert spec(name, schedulingPolicy="fcfs").engine.scheduling_policy == "fcfs"
    with pytest.raises(ValidationError, match="engine.schedulingPolicy priority is served by engine.runtime floodway"):
        spec(name, schedulingPolicy="priority")


@pytest.mark.parametrize("name", ["floodway", "llamacpp"])
def test_runtimes_without_tensor_parallelism_are_refused_several_gpus(name):
    assert RUNTIMES[name].tensor_parallel_flag is None
    with pytest.raises(ValidationError, match="tensor parallelism"):
        spec(name, gpus=2)


@pytest.mark.parametrize("name,ready,command,image", [
    ("floodway", "/ready", ["floodway", "engine"], "floodway/engine:"),
    ("vllm", "/health", None, "vllm/vllm-openai:"),
    ("sglang", "/health", ["python3", "-m", "sglang.launch_server"], "lmsysorg/sglang:"),
    ("tgi", "/health", None, "ghcr.io/huggingface/text-generation-inference:"),
    ("llamacpp", "/health", None, "ghcr.io/ggml-org/llama.cpp:server"),
])
def test_render_probes_command_image_and_gateway_config(name, ready, command, image):
    s = spec(name)
    objs = render(s, Owner("chat", "ns", "u"), Images())
    engine = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "chat-engine")
    c = engine["spec"]["template"]["spec"]["containers"][0]
    assert ready_path(s) == ready == c["readinessProbe"]["httpGet"]["path"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c.get("command") == command and c["image"].startswith(image)
    config = GatewayConfig.model_validate(cluster_gateway_config(s, Owner("chat", "ns", "u")))
    assert config.engine_runtime == name  # the gateway probes and parses like the engines it fronts


def test_gateway_config_rejects_an_unknown_runtime():
    with pytest.raises(ValidationError, match="engine_runtime"):
        GatewayConfig.model_validate({"backends": {"static": ["http://a:1"]}, "engine_runtime": "ollama"})


def _hist(name: str, labels: str, buckets: dict[str, float]) -> str:
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{le="{le}"{labels}}} {v}' for le, v in buckets.items()]
    count = buckets["+Inf"]
    return "\n".join(lines + [f"{name}_count{{{labels.lstrip(',')}}} {count}",
                              f"{name}_sum{{{labels.lstrip(',')}}} 1.0"]) + "\n"


SGLANG = ('# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\n'
          'sglang:num_running_reqs{model_name="chat"} 5.0\n'
          '# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="chat"} 3.0\n'
          '# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name="chat"} 0.28\n'
          '# TYPE sglang:num_requests_total counter\nsglang:num_requests_total{model_name="chat"} 12.0\n'
          + _hist("sglang:time_to_first_token_seconds", ',model_name="chat"', {"0.1": 4, "0.5": 10, "+Inf": 12})
          + _hist("sglang:time_per_output_token_seconds", ',model_name="chat"', {"0.05": 11, "+Inf": 12})
          + _hist("sglang:inter_token_latency_seconds", ',model_name="chat"', {"0.05": 90, "+Inf": 100}))

TGI = ('# TYPE tgi_queue_size gauge\ntgi_queue_size 2\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 6\n'
       '# TYPE tgi_request_success counter\ntgi_request_success 40\n'
       + _hist("tgi_request_mean_time_per_token_duration", "", {"0.01": 30, "0.1": 39, "+Inf": 40}))

# llama-server --metrics: gauges and counters, no labels, no histograms.
LLAMACPP = ('# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n'
            '# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 6886\n'
            '# HELP llamacpp:requests_processing Number of requests processing.\n'
            '# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 4\n'
            '# HELP llamacpp:requests_deferred Number of requests deferred.\n'
            '# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 7\n')


def load(text: str, names) -> dict[str, float]:
    """The gateway's view of an engine's load (the signals every runtime maps)."""
    return {k: v for k, v in parse_engine_load(text, names).items() if k in ("running", "waiting", "kv_usage")}


def test_sglang_metrics_map_to_ours():
    names = RUNTIMES["sglang"].metrics
    s = parse_engine(SGLANG, names)
    assert (s.running, s.waiting, s.kv_usage, s.finished_total) == (5.0, 3.0, 0.28, 12.0)
    assert s.ttft[0.5] == 10 and s.tpot_per_request and s.tpot[0.05] == 11
    assert load(SGLANG, names) == {"running": 5.0, "waiting": 3.0, "kv_usage": 0.28}
    assert parse_engine(SGLANG).running == 0.0  # read with our names, none of it is there


def test_tgi_metrics_map_to_ours_without_ttft():
    names = RUNTIMES["tgi"].metrics
    s = parse_engine(TGI, names)
    assert (s.running, s.waiting, s.kv_usage, s.finished_total) == (6.0, 2.0, 0.0, 40.0)
    assert s.ttft == {} and s.tpot_per_request and s.tpot[0.1] == 39
    assert parse_engine_load(TGI, names)["waiting"] == 2.0


def test_llamacpp_metrics_map_to_ours():
    names = RUNTIMES["llamacpp"].metrics
    s = parse_engine(LLAMACPP, names)
    assert (s.running, s.waiting, s.ttft, s.finished_total) == (4.0, 7.0, {}, 0.0)
    assert load(LLAMACPP, names) == {"running": 4.0, "waiting": 7.0, "kv_usage": 0.0}


def test_vllm_kv_usage_under_its_old_name_and_first_name_wins():
    names = RUNTIMES["vllm"].metrics
    old = '# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
    assert parse_engine(old, names).kv_usage == 0.5 == parse_engine_load(old, names)["kv_usage"]
    both = old + '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="m"} 0.25\n'
    assert parse_engine(both, names).kv_usage == 0.25 == parse_engine_load(both, names)["kv_usage"]
