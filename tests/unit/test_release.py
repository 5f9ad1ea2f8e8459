"""One version for the package, the chart and the images; one lock for every install (images and users)."""

import pytest
import tomllib
import yaml
from floodway.operator.cli import app
from floodway.operator.crdgen.files import REPO_ROOT
from floodway.operator.render.images import DEFAULT_TAG, Images
from floodway.operator.version import __version__
from typer.testing import CliRunner

pytestmark = pytest.mark.unit

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
    assert PYPROJECT["project"]["license"] == {"text": "Apache-2.0"}
    text = (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
