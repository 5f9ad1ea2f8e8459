"""Maps the repo's top-level folders to floodway.engine and floodway.operator (metadata is in pyproject.toml).

The repo root is never an import root: a package named `operator` there would shadow the standard library.
"""

from setuptools import find_packages, setup

ROOTS = {"floodway.engine": "engine", "floodway.operator": "operator"}
packages = [
    f"{name}.{sub}" if sub else name
    for name, folder in ROOTS.items()
    for sub in ["", *find_packages(folder)]
]
setup(packages=packages, package_dir=ROOTS)
