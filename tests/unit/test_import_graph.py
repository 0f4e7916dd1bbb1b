"""oncelog's import graph, read from the source with ``ast``: no import circles, and the
layering rule of DESIGN.md (nothing below ``oncelog.broker`` imports it; ``client`` and
``spark`` never do). Every import counts: module level, inside functions and under
``TYPE_CHECKING`` (a circle of type-only imports is still a circle in the design)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import oncelog

ROOT = Path(oncelog.__file__).parent
BROKER = "oncelog.broker"
# Packages below the broker (DESIGN.md, "Layers and who may call whom") and beside it.
MUST_NOT_IMPORT_BROKER = (
    "oncelog.storage",
    "oncelog.records",
    "oncelog.protocol",
    "oncelog.coordinator",
    "oncelog.cluster",
    "oncelog.client",
    "oncelog.spark",
)


def module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".")
    base = package[: len(package) - node.level + (1 if _is_package(module) else 0)]
    return ".".join(base + ([node.module] if node.module else []))


_PACKAGES: set[str] = set()


def _is_package(module: str) -> bool:
    return module in _PACKAGES


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The oncelog modules ``module`` imports. ``from pkg import sub`` of a submodule is an
    import of ``pkg.sub`` (its package's ``__init__`` runs first either way, as for every
    submodule import, so that is not counted as an import of the package)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            if base not in modules:
                continue
            names_a_module = [f"{base}.{a.name}" in modules for a in node.names]
            for alias, is_module in zip(node.names, names_a_module, strict=True):
                if is_module:
                    yield f"{base}.{alias.name}"
            if not all(names_a_module):
                yield base


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    _PACKAGES.update(m for m, p in modules.items() if p.name == "__init__.py")
    return {
        module: {target for target in imports_of(module, path, modules) if target != module}
        for module, path in modules.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles() -> None:
    assert circles(import_graph()) == []


def test_nothing_below_the_broker_imports_it() -> None:
    offenders = sorted(
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        if module.startswith(MUST_NOT_IMPORT_BROKER)
        for target in targets
        if target == BROKER or target.startswith(BROKER + ".")
    )
    assert offenders == []
