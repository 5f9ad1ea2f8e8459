"""One version for the package, the chart and the images; one lock for every install (images and users)."""

import re

import tomllib
import yaml
from floodway.operator.cli import app
from floodway.operator.crdgen.files import REPO_ROOT
from floodway.operator.render.images import DEFAULT_TAG, Images
from floodway.operator.version import __version__
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from typer.testing import CliRunner

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
DECLARED = PYPROJECT["project"]["version"]


def test_version_is_declared_once_and_the_rest_follow_it():
    # The installed metadata lags pyproject only until `make setup` reinstalls (pyproject.toml is its input).
    assert __version__ == DECLARED
    chart = yaml.safe_load((REPO_ROOT / "charts" / "floodway" / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == DECLARED
    assert DEFAULT_TAG == DECLARED and Images().engine.endswith(f":{DECLARED}")


def test_cli_prints_the_version():
    out = CliRunner().invoke(app, ["--version"])
    assert out.exit_code == 0 and out.output.strip() == DECLARED


def test_license_is_the_one_the_package_declares():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"  # an SPDX expression (PEP 639)
    text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text


def _lock() -> dict[str, Version]:
    pins = {}
    for line in (REPO_ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version and not re.search(r"[<>=!~;,\s]", version), f"not an exact pin: {line}"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_lock_pins_every_requirement_of_every_extra_within_its_range():
    # The lock is resolved for the images' platform: Linux x86_64, CPython 3.11 (`make lock`).
    env = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
           "python_version": "3.11", "python_full_version": "3.11.2", "implementation_name": "cpython"}
    project = PYPROJECT["project"]
    declared = [*project["dependencies"], *PYPROJECT["build-system"]["requires"],
                *(r for extra in project["optional-dependencies"].values() for r in extra)]
    pins = _lock()
    for text in declared:
        req = Requirement(text)
        if req.marker and not req.marker.evaluate(env):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in requirements.lock: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), f"lock has {name}=={pins[name]}, wants {req}"


def test_images_and_lock_agree_on_python_and_version():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "--python-version 3.11" in makefile and "-o requirements.lock" in makefile
    for dockerfile in (REPO_ROOT / "docker").glob("*.Dockerfile"):
        assert "sys.version_info[:2] == (3, 11)" in dockerfile.read_text(), dockerfile.name
    # build.sh tags the images with the version it reads from pyproject.toml with this expression.
    build = (REPO_ROOT / "e2e" / "images" / "build.sh").read_text()
    assert """version=$(sed -n 's/^version = "\\(.*\\)"$/\\1/p' "$repo/pyproject.toml")""" in build
    assert re.findall(r'^version = "(.*)"$', (REPO_ROOT / "pyproject.toml").read_text(), re.M) == [DECLARED]
