"""The storage modules import one another without cycles (every import counts: module
level, under TYPE_CHECKING and inside functions), so that the Log sits above the
retention policy and the segment swap, never beside them."""

import ast
import pathlib

import storage

PACKAGE = pathlib.Path(storage.__file__).parent


def module_name(path: pathlib.Path) -> str:
    parts = ("storage", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: pathlib.Path, modules: set[str]) -> set[str]:
    """The storage modules `path` imports (a package's own __init__ excluded: it only re-exports)."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m not in (name, "storage")}


def test_storage_modules_import_each_other_without_cycles():
    paths = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: imports(path, set(paths)) for name, path in paths.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep, path + [dep])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []
