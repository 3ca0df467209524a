"""The GDN package's import graph: the backend registry is a leaf, and no two modules of lethe.kernels import each
other, directly or through others, at module level or inside a function (a lazy import is still a dependency: it
only moves the cycle's failure to the first call)."""

import ast
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[3] / "kernels"
PACKAGE = "lethe.kernels"


def _module_name(path: Path) -> str:
    rel = path.relative_to(KERNELS).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The lethe.kernels modules ``path`` imports anywhere in its body (``from . import x`` names module x when x
    is a module, else the package)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                root = ".".join(base + ([node.module] if node.module else []))
            else:
                root = node.module or ""
            targets = [f"{root}.{a.name}" if f"{root}.{a.name}" in modules else root for a in node.names]
        else:
            continue
        out.update(t for t in targets if t in modules and t != name)
    return out


def import_graph() -> dict[str, set[str]]:
    files = sorted(KERNELS.rglob("*.py"))
    modules = {_module_name(f) for f in files}
    return {_module_name(f): _imports(f, modules) for f in files}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a list of modules, first repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_backend_registry_is_a_leaf():
    """lethe.kernels.gdn.backends imports nothing of the package, so registering and looking up cannot cycle."""
    graph = import_graph()
    assert graph["lethe.kernels.gdn.backends"] == set()
    assert "lethe.kernels.gdn.backends" in graph["lethe.kernels.gdn.native.backend"]
    assert "lethe.kernels.gdn.autograd" not in graph["lethe.kernels.gdn.native.backend"]


def test_no_import_cycle_in_the_kernels_package():
    """No module of lethe.kernels reaches itself through its imports."""
    assert _cycle(import_graph()) is None


def test_the_cycle_finder_finds_a_planted_cycle():
    """The check above can fail: a planted a -> b -> a is reported."""
    assert _cycle({"a": {"b"}, "b": {"a"}, "c": set()}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
