"""No import cycles among the package modules, counting every import: top level, inside
functions and under TYPE_CHECKING alike (a lazy import hides a cycle, it does not remove it).

Read from the sources with `ast` (nothing is imported), so the check needs nothing outside
the repository. An edge to a package from its own descendants is left out: Python imports
the parent package first anyway, so a child's `from . import x` is no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("kafka_format", "storage", "protocol", "broker", "client", "pipeline")


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path, known: set[str], root: Path = ROOT) -> set[str]:
    """The known modules `path` imports anywhere in its body."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                out.add(target)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    files = [p for package in packages for p in sorted((root / package).rglob("*.py"))]
    known = {module_name(p, root) for p in files}
    return {module_name(p, root): imported(p, known, root) for p in files}


def test_the_package_code_has_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (each line one circle of modules):\n" + "\n".join(
        " ".join(component) for component in found)


def test_the_check_sees_lazy_and_type_checking_imports(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import left\n")  # a child of its package: no cycle
    (package / "sub" / "left.py").write_text("def f():\n    from . import right\n")
    (package / "sub" / "right.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .left import f\n")
    (package / "top.py").write_text("import pkg.sub.left\nfrom .sub import right\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.top"] == {"pkg.sub.left", "pkg.sub", "pkg.sub.right"}
    assert cycles(graph) == [["pkg.sub.left", "pkg.sub.right"]]
