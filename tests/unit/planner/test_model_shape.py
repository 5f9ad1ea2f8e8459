"""Reading a model's shape: built-in names, folders, config.json files, the Hugging Face cache (offline)."""

import json

import pytest
from floodway.operator.planner.memory import weight_format
from floodway.operator.planner.model_shape import hf_cache_dir, load_shape, read_config, shape_from_config
from floodway.operator.planner.units import ConfigNotFound, PlanError


def test_builtin_model_reads_without_materialising(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOODWAY_CACHE", str(tmp_path / "cache"))
    shape = load_shape("floodway/tiny-llama")
    assert shape.source == "built-in"
    assert (shape.hidden_size, shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.vocab_size) == \
        (256, 4, 8, 4, 4096)
    assert not (tmp_path / "cache").exists()  # no weights written just to read a shape


def test_folder_and_config_file(llama2_7b):
    by_folder = load_shape(llama2_7b)
    by_file = load_shape(f"{llama2_7b}/config.json")
    assert by_folder.params == by_file.params == 6_738_415_616
    assert by_folder.source == by_file.source == f"{llama2_7b}/config.json"
    assert by_folder.config_dtype == "float16" and by_folder.max_position_embeddings == 4096


def _cache_snapshot(cache, repo_id, revision, cfg, ref="main"):
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "snapshots" / revision).mkdir(parents=True)
    (repo / "snapshots" / revision / "config.json").write_text(json.dumps(cfg))
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(revision)
    return repo / "snapshots" / revision / "config.json"


def test_hugging_face_cache_layout_agrees_with_huggingface_hub(hf_cache, configs):
    from huggingface_hub import try_to_load_from_cache

    old = _cache_snapshot(hf_cache, "meta-llama/Llama-3.1-8B", "a" * 40, configs["llama2-7b"], ref=None)
    path = _cache_snapshot(hf_cache, "meta-llama/Llama-3.1-8B", "b" * 40, configs["llama3-8b"])
    assert old.exists()
    cfg, source = read_config("meta-llama/Llama-3.1-8B")
    assert source == str(path) == try_to_load_from_cache("meta-llama/Llama-3.1-8B", "config.json",
                                                         cache_dir=str(hf_cache))
    assert cfg["num_key_value_heads"] == 8


def test_cache_without_ref_takes_the_newest_snapshot(hf_cache, configs):
    import os

    first = _cache_snapshot(hf_cache, "org/model", "1" * 40, configs["llama2-7b"], ref=None)
    second = _cache_snapshot(hf_cache, "org/model", "2" * 40, configs["qwen2.5-7b"], ref=None)
    os.utime(first, (1, 1))
    assert read_config("org/model")[1] == str(second)


def test_hf_home_and_xdg_locate_the_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hf_cache_dir() == tmp_path / "hf" / "hub"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"


def test_unknown_model_says_where_it_looked(hf_cache):
    with pytest.raises(ConfigNotFound, match="no config.json found.*Hugging Face cache") as err:
        load_shape("nobody/nothing")
    assert str(hf_cache) in str(err.value)


@pytest.mark.parametrize("content,message", [
    ("{not json", "cannot read"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({"model_type": "x", "hidden_size": 64}), "lacks num_hidden_layers, num_attention_heads, vocab_size"),
])
def test_bad_configs_are_clear_errors(tmp_path, content, message):
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(PlanError, match=message):
        load_shape(str(tmp_path))


def test_gpt2_style_fields(configs):
    shape = shape_from_config(configs["gpt2"], "gpt2", "test")
    assert (shape.num_layers, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.hidden_size,
            shape.intermediate_size, shape.max_position_embeddings) == (12, 12, 12, 64, 768, 3072, 1024)


def test_nested_text_config_and_quantization(configs):
    cfg = {"model_type": "llava", "text_config": configs["llama3-8b"],
           "quantization_config": {"quant_method": "awq", "bits": 4}}
    shape = shape_from_config(cfg, "vlm", "test")
    assert shape.num_kv_heads == 8 and shape.quantization_bits == 4
    assert shape_from_config({**configs["llama3-8b"], "quantization_config": {"quant_method": "fp8"}}, "q",
                             "test").quantization_bits == 8


@pytest.mark.parametrize("quantization_config, bits", [
    # llm-compressor's W4A16 (pack-quantized) and FP8 (float-quantized) configs, as they ship
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}}, 4),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}, 8),
    # groups of different widths (not served by our engine, sized all the same): the widest
    ({"quant_method": "compressed-tensors", "config_groups": {"a": {"weights": {"num_bits": 4}},
                                                              "b": {"weights": {"num_bits": 8}}}}, 8),
    ({"quant_method": "gptq", "bits": 8}, 8),
    ({"quant_method": "awq", "w_bit": 4}, 4),
    ({"quant_method": "bitsandbytes"}, None),
])
def test_a_checkpoint_s_own_bits_size_its_weights(configs, quantization_config, bits):
    cfg = {**configs["llama3-8b"], "quantization_config": quantization_config}
    shape = shape_from_config(cfg, "q", "test")
    assert shape.quantization_bits == bits
    assert weight_format(shape, "bfloat16", None).precision == {4: "int4", 8: "int8", None: "bfloat16"}[bits]


def test_params_override_is_labelled_and_scales_active(configs):
    shape = shape_from_config(configs["mixtral-8x7b"], "m", "test", params=46.7e9)
    assert shape.params == 46_700_000_000 and shape.params_source == "given with --params"
    assert shape.active_params == round(12_879_925_248 * 46.7e9 / 46_702_792_704)
    with pytest.raises(PlanError, match="--params must be positive"):
        shape_from_config(configs["gpt2"], "g", "test", params=0)


def test_head_dim_and_multi_query(configs):
    assert shape_from_config({**configs["llama2-7b"], "head_dim": 256}, "x", "t").head_dim == 256
    assert shape_from_config({**configs["llama2-7b"], "multi_query": True}, "x", "t").num_kv_heads == 1
