"""`floodway up` refuses what the API server refuses, with the same message, before starting anything."""

import subprocess

import pytest
import yaml

BASE = {"apiVersion": "serving.floodway.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": "bad"},
        "spec": {"model": "floodway/tiny-llama", "resources": {"gpus": 0}}}


@pytest.mark.parametrize("change, message", [
    ({"replicas": {"min": 3, "max": 1}}, "replicas.min must be less than or equal to replicas.max"),
    ({"slo": {"ttftMs": 0}}, "spec.slo.ttftMs"),
    ({"engine": {"runtime": "tgi"}}, "spec.engine.runtime"),
    ({"overflow": {"enabled": True}}, "overflow.baseURL and overflow.apiKeySecretRef are required"),
    ({"engine": {"maxModelLen": 0}}, "spec.engine.maxModelLen"),
    ({"resources": {"gpus": -1}}, "spec.resources.gpus"),
    ({"engine": {"runtime": "vllm"}}, "runs the floodway runtime only"),
    ({"overflow": {"enabled": True, "baseURL": "https://api.example.com/v1",
                   "apiKeySecretRef": {"name": "team-key", "key": "api-key"}}}, "FLOODWAY_SECRET_TEAM_KEY_API_KEY"),
    # the planner's fit check, as the operator's FitsGPU condition: weights alone exceed a 10 MiB GPU
    ({"resources": {"gpus": 1, "gpuMemoryGiB": 0.01}}, "cannot fit its GPUs"),
])
def test_rejected_with_the_field_named(tmp_path, floodway_cmd, change, message):
    doc = {**BASE, "spec": {**BASE["spec"], **change}}
    path = tmp_path / "isvc.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run([*floodway_cmd, "up", str(path), "--workdir", str(tmp_path / "w")], capture_output=True,
                         text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr
    assert not (tmp_path / "w").exists()  # nothing was started, not even its log folder made


def test_missing_file(tmp_path, floodway_cmd):
    out = subprocess.run([*floodway_cmd, "up", str(tmp_path / "none.yaml")], capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)})
    assert out.returncode == 2 and "cannot read" in out.stderr
    assert not list(tmp_path.glob("floodway-up-*"))  # no log folder left behind for a run that never started


def test_cluster_only_fields_are_named_before_anything_starts(tmp_path, floodway_cmd):
    # the fit check refuses this spec right after the warnings, so nothing starts
    doc = {**BASE, "spec": {**BASE["spec"], "resources": {"gpus": 1, "gpuMemoryGiB": 0.01, "nodeSelector": {"a": "b"}},
                            "storage": {"cacheClaim": {"name": "cache"}}}}
    path = tmp_path / "isvc.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run([*floodway_cmd, "up", str(path), "--workdir", str(tmp_path / "w")], capture_output=True,
                         text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning: spec.")]
    assert [w.split(":")[1].strip() for w in warnings] == ["spec.resources.nodeSelector", "spec.storage.cacheClaim"]
    assert out.returncode == 2 and "cannot fit its GPUs" in out.stderr
