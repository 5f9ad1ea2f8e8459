"""engine.quantization and engine.speculative: each runtime takes what it can honour and refuses the rest in
the spec's words; what it takes reaches its own flags. The oracles are the runtimes' own parsers: our engine's
CLI and config checks, and vLLM's source (its quantization and speculative method names, its config keys)."""

import ast
import glob
import json
import os
import typing

import pytest
import typer
from floodway.engine.config import EngineConfig
from floodway.engine.server.cli import with_engine_config
from floodway.engine.spec_decode import config as spec_config
from floodway.operator.render.engine import engine_args
from floodway.operator.runtimes import RUNTIMES
from floodway.operator.spec import InferenceServiceSpec
from floodway.operator.spec.models import EngineSpec, SpeculativeSpec
from pydantic import ValidationError
from typer.testing import CliRunner

QUANTIZATIONS = typing.get_args(EngineSpec.model_fields["quantization"].annotation)
NGRAM = {"method": "ngram", "numSpeculativeTokens": 3, "promptLookupMin": 1, "promptLookupMax": 3}
DRAFT = {"method": "draft_model", "numSpeculativeTokens": 4, "model": "org/draft"}


def spec(runtime: str = "floodway", **engine) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({"model": "org/model", "engine": {"runtime": runtime, **engine}})


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def engine_config(args: list[str]) -> EngineConfig:
    """The rendered arguments as our engine's CLI reads them, through its own checks."""
    seen = {}
    app = typer.Typer()

    @app.command()
    @with_engine_config
    def engine(config: EngineConfig, host: str = "", port: int = 0, drain_timeout: float = 0.0) -> None:
        config.validate()
        seen["config"] = config

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return seen["config"]


@pytest.mark.parametrize("value", QUANTIZATIONS)
def test_our_engine_takes_exactly_the_quantizations_its_config_accepts(value):
    try:
        EngineConfig(quantization=value).validate()
        engine_accepts = True
    except ValueError:
        engine_accepts = False
    if not engine_accepts:
        with pytest.raises(ValidationError, match="engine.runtime floodway takes engine.quantization auto, none"):
            spec(quantization=value)
        return
    config = engine_config(engine_args(spec(quantization=value), "h", 1))
    assert config.quantization == value


@pytest.mark.parametrize("section,expected", [
    (NGRAM, spec_config.SpeculativeConfig("ngram", 3, prompt_lookup_min=1, prompt_lookup_max=3)),
    (DRAFT, spec_config.SpeculativeConfig("draft_model", 4, model="org/draft")),
    ({"method": "ngram", "numSpeculativeTokens": 2}, spec_config.SpeculativeConfig("ngram", 2)),  # its defaults
])
def test_our_engine_reads_the_speculative_section_as_written(section, expected):
    config = engine_config(engine_args(spec(speculative=section), "h", 1))
    assert spec_config.parse(config.speculative_config) == expected


def test_no_section_no_flag_and_auto_passes_nothing_but_its_own_default():
    args = engine_args(spec(), "h", 1)
    assert "--speculative-config" not in args and "--quantization" not in args
    config = engine_config(args)
    assert config.speculative_config is None and config.quantization == "auto"


def test_our_engine_caps_draft_tokens_at_its_own_maximum():
    top = spec_config.MAX_SPECULATIVE_TOKENS
    assert spec(speculative={**NGRAM, "numSpeculativeTokens": top}).engine.speculative.num_speculative_tokens == top
    with pytest.raises(ValidationError, match=f"numSpeculativeTokens up to {top}"):
        spec(speculative={**NGRAM, "numSpeculativeTokens": top + 1})
    # vLLM has no such cap
    assert spec("vllm", speculative={**NGRAM, "numSpeculativeTokens": top + 1})


@pytest.mark.parametrize("section,message", [
    ({"method": "draft_model", "numSpeculativeTokens": 2}, "model is required for method draft_model"),
    ({**NGRAM, "model": "org/draft"}, "model is for method draft_model"),
    ({**DRAFT, "promptLookupMax": 3}, "promptLookupMin and promptLookupMax are for method ngram"),
    ({**NGRAM, "promptLookupMin": 4}, "promptLookupMin must be less than or equal to promptLookupMax"),
    ({**NGRAM, "numSpeculativeTokens": 0}, "greater than or equal to 1"),
    ({"method": "eagle", "numSpeculativeTokens": 2}, "'ngram' or 'draft_model'"),
])
def test_bad_sections_are_refused_with_the_reason(section, message):
    with pytest.raises(ValidationError, match=message):
        spec(speculative=section)


@pytest.mark.parametrize("section", [
    {"method": "draft_model", "num_speculative_tokens": 2},
    {"method": "ngram", "num_speculative_tokens": 2, "model": "m"},
    {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 3},
    {"method": "ngram", "num_speculative_tokens": spec_config.MAX_SPECULATIVE_TOKENS + 1},
])
def test_what_our_engine_would_refuse_at_start_the_spec_refuses_at_apply(section):
    with pytest.raises(ValueError):
        spec_config.parse(json.dumps(section))
    with pytest.raises(ValidationError):
        spec(speculative={SpeculativeSpec.model_fields[k].alias: v for k, v in section.items()})


@pytest.mark.parametrize("runtime,value", [(r.name, q) for r in RUNTIMES.values() for q in QUANTIZATIONS])
def test_each_runtime_takes_its_quantizations_and_refuses_the_rest(runtime, value):
    r = RUNTIMES[runtime]
    if value not in r.quantizations:
        with pytest.raises(ValidationError, match=f"engine.runtime {runtime} takes engine.quantization "
                                                  f"{', '.join(r.quantizations)}"):
            spec(runtime, quantization=value)
        return
    args = engine_args(spec(runtime, quantization=value), "h", 1)
    expected = value if r.quantization_flag and value != "auto" else None
    assert (flag(args, r.quantization_flag) if r.quantization_flag else None) == expected


def test_llamacpp_serves_the_gguf_file_as_it_ships():
    assert spec("llamacpp", quantization="gguf")
    for value in ("int4", "none", "awq"):
        with pytest.raises(ValidationError, match="a GGUF file holds its own quantization: pick the file"):
            spec("llamacpp", quantization=value)


def test_vllm_gets_the_same_json_and_its_own_quantization_flag():
    args = engine_args(spec("vllm", quantization="awq", speculative=DRAFT), "h", 1)
    assert flag(args, "--quantization") == "awq"
    assert json.loads(flag(args, "--speculative-config")) == {
        "method": "draft_model", "num_speculative_tokens": 4, "model": "org/draft"}
    with pytest.raises(ValidationError, match="vLLM loads no GGUF file"):
        spec("vllm", quantization="gguf")


def test_tgi_speculates_by_ngram_only_and_quantizes_with_its_own_flag():
    args = engine_args(spec("tgi", quantization="gptq", speculative={"method": "ngram", "numSpeculativeTokens": 2}),
                       "h", 1)
    assert flag(args, "--speculate") == "2" and flag(args, "--quantize") == "gptq"
    with pytest.raises(ValidationError, match="engine.runtime tgi takes engine.speculative.method ngram"):
        spec("tgi", speculative=DRAFT)
    with pytest.raises(ValidationError, match="tgi takes no engine.speculative.promptLookupMin, promptLookupMax"):
        spec("tgi", speculative=NGRAM)


def test_llamacpp_looks_up_one_ngram_length_and_drafts_k():
    args = engine_args(spec("llamacpp", speculative={"method": "ngram", "numSpeculativeTokens": 5,
                                                     "promptLookupMin": 3}), "h", 1)
    assert (flag(args, "--spec-type"), flag(args, "--spec-ngram-simple-size-n"),
            flag(args, "--spec-ngram-simple-size-m")) == ("ngram-simple", "3", "5")
    defaulted = engine_args(spec("llamacpp", speculative={"method": "ngram", "numSpeculativeTokens": 2}), "h", 1)
    assert flag(defaulted, "--spec-ngram-simple-size-n") == str(spec_config.SpeculativeConfig.prompt_lookup_min)
    with pytest.raises(ValidationError, match="llamacpp takes no engine.speculative.promptLookupMax"):
        spec("llamacpp", speculative=NGRAM)
    with pytest.raises(ValidationError, match="engine.runtime llamacpp takes engine.speculative.method ngram"):
        spec("llamacpp", speculative=DRAFT)


def test_runtimes_without_a_mapping_refuse_the_section():
    with pytest.raises(ValidationError, match="engine.runtime sglang takes no engine.speculative"):
        spec("sglang", speculative=NGRAM)


def test_floodway_up_runs_the_engine_with_the_same_flags(tmp_path):
    from floodway.operator.local.cluster_only import local_spec
    from floodway.operator.local.runner import LocalRunner
    from floodway.operator.spec import InferenceService

    s = spec(quantization="int8", speculative=NGRAM)
    run = local_spec(s, {})
    assert run.warnings == ()
    runner = LocalRunner(InferenceService(metadata={"name": "chat"}, spec=run.spec), str(tmp_path), 1, None)
    argv = runner._engine_argv(8123)
    assert argv[argv.index("engine") + 1:] == engine_args(s, "127.0.0.1", 8123)
    config = engine_config(argv[argv.index("engine") + 1:])
    assert config.quantization == "int8" and spec_config.parse(config.speculative_config).prompt_lookup_max == 3


def _vllm_source(relative: str) -> ast.Module:
    root = os.environ.get("FLOODWAY_VLLM_CACHE", os.path.expanduser("~/.cache/floodway/vllm"))
    image_version = RUNTIMES["vllm"].image.rsplit(":v", 1)[1]
    found = glob.glob(f"{root}/{image_version}/lib/python3*/site-packages/vllm/{relative}")
    if not found:
        pytest.skip(f"vLLM {image_version} is not built: run bash e2e/vllm/build.sh")
    with open(found[0]) as f:
        return ast.parse(f.read())


def _literal(tree: ast.Module, name: str) -> set[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    raise AssertionError(f"{name} not found in vLLM's source")


def test_vllm_knows_every_value_we_pass_it():
    # The image's version of vLLM (the CPU build of it, e2e/vllm/build.sh), read from its source.
    methods = _literal(_vllm_source("model_executor/layers/quantization/__init__.py"), "QuantizationMethods")
    passed = set(RUNTIMES["vllm"].quantizations) - {"auto"}
    assert passed <= methods, passed - methods
    assert "gguf" not in methods  # why the spec refuses gguf for vllm
    tree = _vllm_source("config/speculative.py")
    assert set(RUNTIMES["vllm"].speculative_methods) <= _literal(tree, "SpeculativeMethod")
    config = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "SpeculativeConfig")
    keys = {n.target.id for n in config.body if isinstance(n, ast.AnnAssign)}
    assert set(SpeculativeSpec.model_fields) <= keys, set(SpeculativeSpec.model_fields) - keys
