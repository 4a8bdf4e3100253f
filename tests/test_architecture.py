"""The shape of the code: packages import only downwards and no modules import each other in a circle.

The import graph is read with :mod:`ast`, so it sees every import a module holds — the ones inside
functions and under ``TYPE_CHECKING`` too — without running any of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The packages in layer order: each may import only the ones before it.
LAYERS = ["streams", "workers", "chat", "helix_site"]


def _modules() -> dict[str, Path]:
    modules = {}
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The module names an import statement in ``module`` names (a ``from`` import's names may be
    submodules or attributes: both are listed, the caller keeps the ones that are modules)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, base] if base else package)
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph() -> dict[str, set[str]]:
    """Each first-party module → the first-party modules it imports."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = _imported(node, name, path.name == "__init__.py")
            submodules = [n for n in names[:-1] if n in modules] if isinstance(node, ast.ImportFrom) else []
            for target in submodules or names:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_in_a_circle() -> None:
    assert cycles(import_graph()) == []


@pytest.mark.parametrize("layer", LAYERS)
def test_packages_import_only_the_layers_below(layer: str) -> None:
    above = LAYERS[LAYERS.index(layer) + 1 :]
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.split(".")[0] == layer
        for target in targets
        if target.split(".")[0] in above
    )
    assert upward == []


#: Within the Django app: each part may not import the parts named after it (the state layer is
#: below the HTTP edge and the services that build it; the bottom layer names none of them).
CHAT_PARTS = {
    "chat.state": ("chat.http", "chat.services", "chat.admin", "chat.tasks", "chat.urls"),
    "chat.ai_sdk": ("chat.http", "chat.services", "chat.admin", "chat.urls"),
}


@pytest.mark.parametrize("part", sorted(CHAT_PARTS))
def test_the_apps_lower_parts_do_not_import_its_edge(part: str) -> None:
    upward = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module == part or module.startswith(part + ".")
        for target in targets
        if any(target == top or target.startswith(top + ".") for top in CHAT_PARTS[part])
    )
    assert upward == []


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("directory", ["tests", "tooling"])
def test_tests_and_their_tooling_do_not_import_the_benchmarks(directory: str) -> None:
    """Benchmarks may change or go at any time; what tests need from processes lives in ``tooling``."""
    offenders = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / directory).rglob("*.py")
        if "node_modules" not in path.parts and "bench" in _top_level_imports(path)
    )
    assert offenders == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    source = ast.parse("def f():\n    from .base import X\n    import streams.sse\n")
    names = {
        name
        for node in ast.walk(source)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in _imported(node, "streams.backends.redis", is_package=False)
    }
    assert {"streams.backends.base", "streams.sse"} <= names
