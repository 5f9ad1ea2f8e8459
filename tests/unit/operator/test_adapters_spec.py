"""spec.adapters and overflow.models: the rules, and the engine flags rendered for our engine and for vLLM."""

import pytest
from floodway.operator.render.engine import engine_args
from floodway.operator.spec import InferenceServiceSpec
from pydantic import ValidationError

ADAPTERS = [{"name": "support", "source": "org/support-lora"}, {"name": "legal", "source": "adapters/legal"}]


def _spec(**kw) -> InferenceServiceSpec:
    return InferenceServiceSpec.model_validate({"model": "base", **kw})


def test_our_engine_repeats_lora_modules_and_vllm_takes_one_list():
    ours = engine_args(_spec(adapters=ADAPTERS), "0.0.0.0", 8000)
    i = ours.index("--enable-lora")
    assert ours[i:] == ["--enable-lora", "--max-loras", "2", "--lora-modules", "support=org/support-lora",
                        "--lora-modules", "legal=adapters/legal"]
    vllm = engine_args(_spec(adapters=ADAPTERS, engine={"runtime": "vllm"}), "0.0.0.0", 8000)
    i = vllm.index("--enable-lora")
    assert vllm[i:i + 6] == ["--enable-lora", "--max-loras", "2", "--lora-modules", "support=org/support-lora",
                             "legal=adapters/legal"]
    assert "--enable-lora" not in engine_args(_spec(), "0.0.0.0", 8000)


def test_adapters_come_from_the_model_claim_when_the_model_does():
    spec = _spec(adapters=ADAPTERS[1:], storage={"modelClaim": {"name": "weights", "path": "base"}})
    assert spec.adapter_sources() == [("legal", "/models/adapters/legal")]


def test_adapter_rules():
    for adapters, kw, msg in ((ADAPTERS + ADAPTERS[:1], {}, "unique"),
                              ([{"name": "base", "source": "x"}], {}, "served model name"),
                              ([{"name": "s", "source": "x"}], {"servedModelName": "s"}, "served model name"),
                              (ADAPTERS, {"engine": {"runtime": "sglang"}}, "floodway / vllm"),
                              ([{"name": "bad name", "source": "x"}], {}, "pattern")):
        with pytest.raises(ValidationError, match=msg):
            _spec(adapters=adapters, **kw)


def test_our_engine_parses_the_rendered_flags():
    import typer
    import typer.main
    from floodway.engine.server import cli

    app = typer.Typer()
    cli.register(app)
    args = engine_args(_spec(adapters=ADAPTERS), "127.0.0.1", 9000)
    params = typer.main.get_command(app).make_context("engine", args).params
    assert params["enable_lora"] and params["max_loras"] == 2
    assert params["lora_modules"] == ["support=org/support-lora", "legal=adapters/legal"]
