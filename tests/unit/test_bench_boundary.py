"""Benchmark, replay and load-generation code lives in engine/bench/ and operator/bench/: it imports the product, and
the product never imports it, so what ships (the engine and control-plane images) carries no measurement code and a
bench can change without touching a product module. One exception: the top-level CLI attaches the `floodway bench`
sub-app, so that the command stays where users find it.

Read from the source's AST, not by importing it; every import counts, including those inside functions (the lazy
kind a CLI command makes) and `importlib.import_module("...")` with a literal name."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"floodway.engine": ROOT / "engine", "floodway.operator": ROOT / "operator"}
BENCH = ("floodway.engine.bench", "floodway.operator.bench")
ALLOWED = {"floodway.operator.cli": "floodway.operator.bench.cli"}  # importer: the bench module it may import


def _within(target: str, module: str) -> bool:
    return target == module or target.startswith(module + ".")


def _is_bench(target: str) -> bool:
    return any(_within(target, b) for b in BENCH)


def _allowed(importer: str, target: str) -> bool:
    return importer in ALLOWED and _within(target, ALLOWED[importer])


def _product_modules() -> dict[str, Path]:
    mods = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if "bench" in parts[:-1]:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join((pkg, *parts))] = path
    return mods


def imported_names(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Every module name the code may import: `import a.b`, `from a import b` (as a.b and a), relative imports
    resolved against `module`, and importlib.import_module / __import__ called with a literal string."""
    package = module if is_package else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in ("import_module", "__import__"):
                names.add(node.args[0].value)
    return names


def bench_imports() -> set[tuple[str, str]]:
    found = set()
    for name, path in _product_modules().items():
        tree = ast.parse(path.read_text(), str(path))
        for target in imported_names(tree, name, path.name == "__init__.py"):
            if _is_bench(target):
                found.add((name, target))
    return found


def test_product_modules_import_no_bench_code():
    assert {(m, t) for m, t in bench_imports() if not _allowed(m, t)} == set()


def test_the_one_exception_is_still_needed():
    """The allowance goes when the CLI stops using it, so it cannot quietly cover something else."""
    used = {m for m, t in bench_imports() if _allowed(m, t)}
    assert used == set(ALLOWED)


def test_the_scan_sees_product_modules_and_skips_the_bench_folders():
    mods = _product_modules()
    assert {"floodway.engine.scheduler", "floodway.operator.gateway.routing", "floodway.operator.cli"} <= set(mods)
    assert not any(_is_bench(m) for m in mods)
    assert (ROOT / "engine" / "bench" / "__init__.py").is_file()
    assert (ROOT / "operator" / "bench" / "__init__.py").is_file()


@pytest.mark.parametrize("source, module, is_package, expected", [
    ("import floodway.engine.bench.runner", "floodway.engine.cli", False, True),
    ("from floodway.operator import bench", "floodway.operator.gateway.cli", False, True),
    ("from ..bench import loadgen", "floodway.operator.gateway.proxy", False, True),
    ("from . import bench", "floodway.engine", True, True),
    ("def f():\n    from floodway.engine.bench.serving import run", "floodway.engine.cli", False, True),
    ("import importlib\nimportlib.import_module('floodway.operator.bench.cli')", "floodway.operator.x", False, True),
    ("from floodway.operator.gateway import routing", "floodway.operator.cli", False, False),
    ("from .benchmarks import x", "floodway.engine.cli", False, False),
    ('"""Run `python -P -m floodway.engine.bench.runner`."""', "floodway.engine.cli", False, False),
])
def test_the_scan_catches_each_import_form(source, module, is_package, expected):
    names = imported_names(ast.parse(source), module, is_package)
    assert any(_is_bench(n) for n in names) is expected
