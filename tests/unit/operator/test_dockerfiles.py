"""Static checks of the Dockerfiles (building them needs a Docker engine: e2e/kind does)."""

import re

import pytest
from floodway.operator.crdgen.files import REPO_ROOT

pytestmark = pytest.mark.unit

DOCKER = REPO_ROOT / "docker"
IMAGES = ["engine", "engine-cpu", "operator"]


@pytest.mark.parametrize("name", IMAGES)
def test_copies_exist_user_is_not_root_and_context_is_small(name):
    text = (DOCKER / f"{name}.Dockerfile").read_text()
    for line in re.findall(r"^COPY (.+)$", text, re.M):
        for src in line.split()[:-1]:
            assert (REPO_ROOT / src).exists(), f"{name}: COPY {src} does not exist"
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("0", "root")
    ignore = [x for x in (DOCKER / f"{name}.Dockerfile.dockerignore").read_text().splitlines()
              if x and not x.startswith("#")]
    assert ignore[0] == "*" and "!operator" in ignore and ".venv" not in " ".join(ignore[1:])


def test_control_plane_image_has_no_torch():
    text = (DOCKER / "operator.Dockerfile").read_text()
    assert "[engine]" not in text and "'torch' not in sys.modules" in text
    assert '".[engine]"' in (DOCKER / "engine.Dockerfile").read_text()
    assert (DOCKER / "engine.Dockerfile").read_text().count("nvidia/cuda") == 1


def test_chart_default_images_match_the_dockerfiles():
    import yaml

    values = yaml.safe_load((REPO_ROOT / "charts" / "floodway" / "values.yaml").read_text())
    assert values["image"]["repository"] == "floodway/operator"
    assert values["engineImage"]["repository"] == "floodway/engine"
