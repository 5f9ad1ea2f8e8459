"""The kind and minikube end-to-end runs (real images, real pods): e2e/kind/run.sh and e2e/minikube/run.sh.
They need a running Docker engine and skip without one, saying so. Each builds images and a cluster (tens of
minutes), so they also wait for FLOODWAY_E2E=1."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def missing_docker_engine() -> str | None:
    if shutil.which("docker") is None:
        return "no Docker engine: the docker CLI is not installed (kind and minikube need a running Docker engine)"
    if subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode != 0:
        return "no Docker engine: `docker info` failed (kind and minikube need a running Docker engine)"
    return None


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("tool", ["kind", "minikube"])
def test_end_to_end(tool):
    reason = missing_docker_engine()
    if reason:
        pytest.skip(reason)
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    if os.environ.get("FLOODWAY_E2E") != "1":
        pytest.skip("set FLOODWAY_E2E=1 to run (builds images and a cluster: tens of minutes)")
    done = subprocess.run(["bash", str(REPO / "e2e" / tool / "run.sh")], capture_output=True, text=True,
                          timeout=3500)
    assert done.returncode == 0, f"{tool} e2e failed:\n{(done.stdout + done.stderr)[-6000:]}"
    assert f"{tool} e2e passed" in done.stderr
