from floodway.operator.cli import app
from typer.testing import CliRunner


def test_gateway_rejects_a_bad_config_with_a_clear_error(tmp_path):
    bad = tmp_path / "gw.yaml"
    bad.write_text("backends: {static: [http://127.0.0.1:1]}\nbogus: 1\n")
    result = CliRunner().invoke(app, ["gateway", "--config", str(bad)])
    assert result.exit_code == 2 and "bogus" in result.output
    missing = CliRunner().invoke(app, ["gateway", "--config", str(tmp_path / "none.yaml")])
    assert missing.exit_code == 2 and "cannot read" in missing.output


def test_bench_gateway_rejects_bad_arguments():
    result = CliRunner().invoke(app, ["bench", "gateway", "--rate", "0"])
    assert result.exit_code == 2 and "must be > 0" in result.output


def test_bench_prediction_rejects_bad_arguments():
    for args in (["--rate", "0"], ["--ttft-slo-ms", "0"], ["--requests", "0"]):
        result = CliRunner().invoke(app, ["bench", "prediction", *args])
        assert result.exit_code == 2 and "must be" in result.output, args
