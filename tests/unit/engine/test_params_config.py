import pytest
from floodway.engine.config import EngineConfig
from floodway.engine.sampling_params import SamplingParams


@pytest.mark.parametrize("kwargs, field", [
    (dict(max_tokens=-1), "max_tokens"),
    (dict(presence_penalty=2.5), "presence_penalty"),
    (dict(frequency_penalty=-2.1), "frequency_penalty"),
    (dict(repetition_penalty=0.0), "repetition_penalty"),
    (dict(logit_bias={5: 101}), "logit_bias"),
    (dict(logit_bias={-1: 1}), "logit_bias"),
    (dict(min_tokens=17), "min_tokens"),
    (dict(logprobs=21), "logprobs"),
    (dict(prompt_logprobs=-1), "prompt_logprobs"),
    (dict(max_tokens=1.5), "max_tokens"),
    (dict(temperature=-0.1), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.01), "top_p"),
    (dict(top_k=-2), "top_k"),
    (dict(stop="END"), "stop"),
    (dict(stop=[1]), "stop"),
    (dict(stop=[""]), "stop"),
    (dict(stop_token_ids=[-1]), "stop_token_ids"),
    (dict(seed="x"), "seed"),
    (dict(logprobs="yes"), "logprobs"),
])
def test_sampling_params_name_the_bad_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs).validate()


def test_sampling_params_defaults_are_valid_and_greedy_detection():
    SamplingParams().validate()
    assert SamplingParams(temperature=0).greedy
    assert SamplingParams(top_k=1).greedy
    assert not SamplingParams(top_k=-1).greedy


@pytest.mark.parametrize("kwargs, field", [
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(block_size=-16), "block_size"),
    (dict(max_num_batched_tokens=True), "max_num_batched_tokens"),
    (dict(max_model_len=0), "max_model_len"),
    (dict(num_kv_blocks=0), "num_kv_blocks"),
    (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
    (dict(dtype="int8"), "dtype"),
    (dict(device="tpu"), "device"),
    (dict(enable_chunked_prefill=False, max_model_len=4096, max_num_batched_tokens=2048), "max_num_batched_tokens"),
])
def test_engine_config_names_the_bad_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        EngineConfig(**kwargs).validate()
