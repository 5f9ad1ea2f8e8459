"""A tool venv in the cache outlives the environment it was made over: CI deleted the clone whose site-packages
the checkov venv overlaid, and the next clone's run found checkov unable to import urllib3 (pip had skipped it
as already there). Here two stand-in environments hold one distribution, `probe`, as the only thing pip needs, so
nothing is downloaded."""

import shutil
import subprocess
from pathlib import Path

from floodway.operator.toolvenv import OVERLAY, ensure_tool, overlay_stamp


def environment(root: Path, version: str) -> Path:
    """A site-packages holding an importable `probe` with its metadata, as pip sees an installed package."""
    root.mkdir(parents=True)
    (root / "probe.py").write_text(f"VERSION = {version!r}\n")
    meta = root / f"probe-{version}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: probe\nVersion: {version}\n")
    return root


def probe_version(python: str) -> str:
    return subprocess.run([python, "-P", "-c", "import probe; print(probe.VERSION)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_stamp_changes_with_the_place_and_with_what_it_holds(tmp_path):
    a = environment(tmp_path / "a", "1.0")
    assert overlay_stamp(a) == overlay_stamp(a)
    assert overlay_stamp(a) != overlay_stamp(environment(tmp_path / "b", "1.0"))
    (a / "other-2.0.dist-info").mkdir()
    assert "other-2.0.dist-info" in overlay_stamp(a)
    assert overlay_stamp(tmp_path / "gone") == f"{tmp_path / 'gone'}\n"


def test_a_venv_made_over_a_deleted_environment_follows_the_next_caller(tmp_path):
    venv, logs = tmp_path / "venv", []
    first = environment(tmp_path / "clone-1", "1.0")
    python = ensure_tool(venv, "probe", "python", logs.append, base=first)
    assert probe_version(python) == "1.0"
    assert ensure_tool(venv, "probe", "python", logs.append, base=first) == python
    assert len(logs) == 1, "an unchanged environment must not reinstall"

    shutil.rmtree(first)
    second = environment(tmp_path / "clone-2", "1.1")
    assert ensure_tool(venv, "probe", "python", logs.append, base=second) == python
    assert "made over another environment" in logs[-1]
    assert probe_version(python) == "1.1"
    overlay = next(venv.glob(f"lib/python*/site-packages/{OVERLAY}"))
    assert overlay.read_text().strip() == str(second)
