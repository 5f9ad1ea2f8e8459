import pytest
from floodway.operator.cli import app
from typer.testing import CliRunner


@pytest.mark.parametrize("flags,words", [
    (["--block-size", "0"], "block_size must be a positive integer"),
    (["--dtype", "float8"], "dtype must be one of"),
    (["--gpu-memory-utilization", "1.5"], "gpu_memory_utilization"),
    (["--max-body-bytes", "10"], "max_body_bytes"),
    (["--drain-timeout", "-1"], "drain_timeout_s"),
    (["--step-delay-ms", "-5"], "step_delay_ms must be an integer >= 0"),
])
def test_bad_engine_flags_exit_2_naming_the_setting_before_loading_anything(flags, words):
    result = CliRunner().invoke(app, ["engine", *flags])
    assert result.exit_code == 2
    assert words in " ".join(result.output.split())  # rich may wrap the message


def test_bench_serve_rejects_bad_settings_before_installing_anything(tmp_path):
    result = CliRunner().invoke(app, ["bench", "serve", "--sweep-size", "1", "--venv", str(tmp_path / "v")])
    assert result.exit_code == 2 and "sweep_size" in " ".join(result.output.split())
    assert not (tmp_path / "v").exists()


def _engine_command():
    import typer

    return typer.main.get_command(app).commands["engine"]


def test_engine_flags_are_the_engine_config_fields():
    import dataclasses

    from floodway.engine.config import EngineConfig

    ctx = _engine_command().make_context("engine", [])
    for f in dataclasses.fields(EngineConfig):
        assert ctx.params[f.name] == f.default  # one declaration: the flag's default is the field's


def test_the_operators_engine_args_parse_as_engine_flags():
    from floodway.operator.render.engine import engine_args
    from floodway.operator.spec import InferenceServiceSpec

    spec = InferenceServiceSpec.model_validate({"model": "m", "engine": {
        "maxNumSeqs": 3, "maxModelLen": 1024, "enablePrefixCaching": False, "extraArgs": ["--step-delay-ms", "7"]}})
    params = _engine_command().make_context("engine", engine_args(spec, "127.0.0.1", 9000)).params
    assert (params["model"], params["port"], params["max_num_seqs"], params["max_model_len"]) == ("m", 9000, 3, 1024)
    assert params["enable_prefix_caching"] is False and params["step_delay_ms"] == 7
