"""Static checks of the Dockerfiles (e2e/images/build.sh builds them for real; the node tier runs them)."""

import re

import pytest
from floodway.operator.crdgen.files import REPO_ROOT

DOCKER = REPO_ROOT / "docker"
IMAGES = ["engine", "operator"]


@pytest.mark.parametrize("name", IMAGES)
def test_copies_exist_user_is_not_root_and_context_is_small(name):
    text = (DOCKER / f"{name}.Dockerfile").read_text()
    ignore = [x for x in (DOCKER / f"{name}.Dockerfile.dockerignore").read_text().splitlines()
              if x and not x.startswith("#")]
    assert ignore[0] == "*" and ".venv" not in " ".join(ignore[1:])
    for line in re.findall(r"^COPY (?!--from)(.+)$", text, re.M):
        for src in line.split()[:-1]:
            assert (REPO_ROOT / src).exists(), f"{name}: COPY {src} does not exist"
            assert f"!{src}" in ignore, f"{name}: COPY {src} is not in the build context"
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users == ["1000:1000"]


def _runs(text: str) -> list[str]:
    """The RUN instructions, continuation lines joined."""
    return re.findall(r"^RUN ((?:.*\\\n)*.*)$", text, re.M)


@pytest.mark.parametrize("name", IMAGES)
def test_base_is_an_argument_and_every_pip_install_is_pinned_by_the_lock(name):
    text = (DOCKER / f"{name}.Dockerfile").read_text()
    assert text.index("ARG BASE_IMAGE=") < text.index("FROM ")
    assert set(re.findall(r"^FROM (\S+)", text, re.M)) == {"${BASE_IMAGE}"}
    pip_runs = [r for r in _runs(text) if re.search(r"pip (install|download)", r)]
    assert len(pip_runs) == 2
    for run in pip_runs:
        # PIP_CONSTRAINT rather than -c: it also pins the isolated build environment (setuptools, wheel).
        assert "export PIP_CONSTRAINT=/src/requirements.lock" in run
        # Wheels stay in a BuildKit cache mount and the CA bundle in a secret: neither ends up in a layer.
        assert "--mount=type=cache,id=floodway-wheels,target=/wheels" in run and "--mount=type=secret,id=ca" in run
        assert "pip download --dest /wheels" in run
        assert re.findall(r"PIP_CERT=[^;\s]+", run) == ["PIP_CERT=/run/secrets/ca"]
        installs = re.findall(r"(?:PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels )?pip install[^&]*", run)
        assert installs and all("/wheels" in i for i in installs), installs
    assert "SSL_CERT_FILE" not in text and "PIP_NO_CACHE_DIR" not in text


def test_engine_image_runs_as_non_root_with_writable_volumes_only():
    text = (DOCKER / "engine.Dockerfile").read_text()
    assert 'VOLUME ["/cache", "/tmp"]' in text and "HOME=/cache" in text and "HF_HOME=/cache/" in text
    assert "[*p['dependencies'], *p['optional-dependencies']['engine']]" in text
    assert 'if [ "$VARIANT" = cpu ]; then pip uninstall -y triton; fi' in text


def test_control_plane_image_has_no_torch():
    text = (DOCKER / "operator.Dockerfile").read_text()
    assert "write('\\n'.join(p['dependencies']))" in text and "optional-dependencies" not in text
    assert "u.find_spec('torch') is None" in text


def test_chart_default_images_match_the_dockerfiles():
    import yaml

    values = yaml.safe_load((REPO_ROOT / "charts" / "floodway" / "values.yaml").read_text())
    assert values["image"]["repository"] == "floodway/operator"
    assert values["engineImage"]["repository"] == "floodway/engine"
