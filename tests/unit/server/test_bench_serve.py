import pytest
from floodway.engine.bench.guidellm import SweepSpec, guidellm_argv, guidellm_env


def _spec(**kw) -> SweepSpec:
    return SweepSpec(**{"target": "http://127.0.0.1:8000", "model": "m", "tokenizer": "/tok", **kw})


def test_argv_runs_a_bounded_sweep_with_slo_goodput():
    argv = guidellm_argv("guidellm", _spec(seconds=10, sweep_size=4, slo_ttft_ms=500, slo_tpot_ms=50,
                                           json_path="/tmp/r.json"))
    flags = dict(zip(argv[2::2], argv[3::2], strict=False))
    assert argv[:2] == ["guidellm", "run"]
    assert flags["--profile"] == "kind=sweep,sweep_size=4,max_concurrency=16"
    assert flags["--constraint"] == "kind=max_duration,seconds=10"
    assert flags["--metrics"] == "kind=generative,slo.ttft_ms=500,slo.tpot_ms=50"
    assert "target=http://127.0.0.1:8000,model=m" in flags["--backend"]
    assert flags["--tokenizer"] == "kind=huggingface_auto,model=/tok"
    assert "kind=json,path=/tmp/r.json" in argv


@pytest.mark.parametrize("kw,field", [
    ({"endpoint": "/v1/embeddings"}, "endpoint"), ({"sweep_size": 1}, "sweep_size"), ({"seconds": 0}, "seconds"),
    ({"output_tokens": 0}, "output_tokens"), ({"slo_ttft_ms": -1}, "slo_ttft_ms"),
])
def test_bad_settings_are_rejected_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        _spec(**kw).validate()


def test_guidellm_runs_offline_without_the_working_directory_on_sys_path():
    env = guidellm_env()
    assert env["PYTHONSAFEPATH"] == "1" and env["HF_HUB_OFFLINE"] == "1"
