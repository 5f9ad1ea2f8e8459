"""Command-line tools whose pins conflict with ours (guidellm, checkov), each in a virtual environment of its own
under the cache, created on first use.

Each venv sees the calling environment's packages through a .pth file, so what both need (torch and
transformers for guidellm) is shared instead of downloaded again, while the tool's own pins, installed in its
site-packages, take precedence."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

CACHE = Path(os.environ.get("FLOODWAY_CACHE", Path.home() / ".cache" / "floodway"))


def ensure_tool(venv: Path, requirement: str, exe: str, log=print) -> str:
    """Returns the path of `exe` in venv, first creating the venv and pip-installing requirement if needed."""
    path = venv / "bin" / exe
    if path.exists():
        return str(path)
    log(f"installing {requirement} into {venv} (once)")
    subprocess.run([sys.executable, "-P", "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-P", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "floodway-overlay.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-P", "-m", "pip", "install", "-q", requirement], check=True)
    return str(path)
