"""Maps the repo's top-level folders to floodway.engine and floodway.operator (metadata is in pyproject.toml), and
builds our CPU kernels.

The repo root is never an import root: a package named `operator` there would shadow the standard library. The
kernel is optional: where it does not build (no C compiler, not x86-64 with GCC or Clang) the install goes on and
the engine uses torch's kernels instead (engine/kernels/cpu_quant_matmul.py, cpu_lora.py).
"""

from setuptools import Extension, find_packages, setup

ROOTS = {"floodway.engine": "engine", "floodway.operator": "operator"}
packages = [
    f"{name}.{sub}" if sub else name
    for name, folder in ROOTS.items()
    for sub in ["", *find_packages(folder)]
]
SOURCES = [f"engine/kernels/cpu_{name}.c" for name in ("module", "quant_matmul", "norm", "rope", "lora", "attention")]
cpu = Extension("floodway.engine.kernels._cpu", SOURCES, depends=["engine/kernels/cpu.h"],
                extra_compile_args=["-O3", "-fopenmp"], extra_link_args=["-fopenmp"], optional=True)
setup(packages=packages, package_dir=ROOTS, ext_modules=[cpu])
