"""The module import graph of floodway.operator and floodway.engine has no cycles, so every layer can be read
(and imported) from the bottom up: the spec below the policies it configures, the policies below the shells.

The graph is built from the source's AST, not by importing it. Module-level imports count, including those under
`if TYPE_CHECKING:` (a type-only cycle is still a tangle of meanings); imports inside functions do not, as they
are the deliberate way to load a heavy or optional module (torch, a CLI's subcommand) only when called."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"floodway.operator": ROOT / "operator", "floodway.engine": ROOT / "engine"}


def module_files() -> dict[str, Path]:
    mods = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join((pkg, *parts))] = path
    return mods


def _top_level_imports(tree: ast.Module):
    """Import nodes outside function bodies (module level, class bodies, if/try blocks)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    mods = module_files()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in _top_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base
                                                                                                     else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                # `from pkg import mod` names a module where one exists, else the package that holds the name.
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n], _ = 1, path.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        state[n], _ = 2, path.pop()
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_graph_is_built_from_real_imports():
    graph = import_graph()
    assert "floodway.operator.spec.models" in graph and "floodway.engine.scheduler" in graph
    assert "floodway.operator.spec.base" in graph["floodway.operator.spec.models"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_spec_sits_at_the_bottom():
    """The API types import nothing from the code they configure."""
    graph = import_graph()
    above = ("autoscaler", "gateway", "simulator", "controller", "render", "local", "planner")
    for name, deps in graph.items():
        if name.startswith("floodway.operator.spec"):
            bad = sorted(d for d in deps if d.startswith(tuple(f"floodway.operator.{p}" for p in above)))
            assert not bad, f"{name} imports {bad}"
