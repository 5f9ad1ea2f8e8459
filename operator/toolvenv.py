"""Command-line tools whose pins conflict with ours (guidellm, checkov), each in a virtual environment of its own
under the cache, created on first use.

Each venv sees the calling environment's packages through a .pth file, so what both need (torch and
transformers for guidellm) is shared instead of downloaded again, while the tool's own pins, installed in its
site-packages, take precedence. The cache outlives the environment that created the venv (a CI clone is
deleted, another one calls next), and pip skipped whatever that environment held, so the overlay is stamped
with the packages it showed: when the caller's differ, the .pth is repointed and pip fills in what is now
missing."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

CACHE = Path(os.environ.get("FLOODWAY_CACHE", Path.home() / ".cache" / "floodway"))
OVERLAY = "floodway-overlay.pth"
STAMP = "floodway-overlay.stamp"


def overlay_stamp(purelib: Path) -> str:
    """Where the overlay points and which distributions it holds there: what pip's choices depended on."""
    dists = sorted(p.name for p in purelib.glob("*.dist-info")) if purelib.is_dir() else []
    return "\n".join([str(purelib), *dists]) + "\n"


def ensure_tool(venv: Path, requirement: str, exe: str, log=print,
                base: Path = Path(sysconfig.get_paths()["purelib"])) -> str:
    """Returns the path of `exe` in venv, creating the venv and pip-installing requirement over an overlay of
    `base` (the calling environment's site-packages) if the venv is missing or was made over another one."""
    path, stamp_file, stamp = venv / "bin" / exe, venv / STAMP, overlay_stamp(base)
    if path.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return str(path)
    py = venv / "bin" / "python"
    if not py.exists():
        log(f"installing {requirement} into {venv} (once)")
        subprocess.run([sys.executable, "-P", "-m", "venv", str(venv)], check=True)
    else:
        log(f"{venv} was made over another environment: pointing it at {base} and completing {requirement}")
    purelib = subprocess.run([str(py), "-P", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, OVERLAY).write_text(f"{base}\n")
    subprocess.run([str(py), "-P", "-m", "pip", "install", "-q", requirement], check=True)
    stamp_file.write_text(stamp)
    return str(path)
