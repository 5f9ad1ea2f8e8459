"""`floodway render -f`: the dry run prints exactly what render() gives the operator, for every service in a file,
and refuses what the API server would refuse."""

import yaml
from floodway.operator.cli import app
from floodway.operator.render import Images, Owner, render
from floodway.operator.spec import parse
from typer.testing import CliRunner

DOCS = [{"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService",
         "metadata": {"name": "a", "namespace": "team"},
         "spec": {"model": "tiny", "resources": {"gpus": 0}, "storage": {"modelClaim": {"name": "models"}}}},
        {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": "b"},
         "spec": {"model": "floodway/tiny-llama", "replicas": {"min": 1, "max": 3, "count": 2},
                  "autoscaling": {"mode": "external"}}}]


def run(tmp_path, docs, *args):
    path = tmp_path / "svc.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return CliRunner().invoke(app, ["render", "-f", str(path), *args])


def test_prints_what_the_operator_would_apply(tmp_path):
    out = run(tmp_path, DOCS, "--operator-namespace", "fw")
    assert out.exit_code == 0, out.output
    printed = [d for d in yaml.safe_load_all(out.stdout) if d]
    expected = [o for d in DOCS for o in render(parse(d).spec, Owner(d["metadata"]["name"],
                                                                    d["metadata"].get("namespace", "default")),
                                                Images.from_env(), None, "fw")]
    assert printed == expected
    engine_b = next(o for o in printed if o["kind"] == "Deployment" and o["metadata"]["name"] == "b-engine")
    assert engine_b["spec"]["replicas"] == 2  # replicas.count, as HPA would have set it
    assert "FitsGPU" in out.stderr


def test_refuses_an_invalid_service_naming_the_field(tmp_path):
    bad = [{**DOCS[0], "spec": {"model": "m", "resources": {"gpus": 3}}}]
    out = run(tmp_path, bad)
    assert out.exit_code == 1 and "resources.gpus > 1 needs tensor parallelism" in out.stderr
    assert out.stdout == ""
