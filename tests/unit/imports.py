"""The package's own import graph, read from the source (function-level imports included).

Modules are named relative to the package (``sessions``, ``workspace.apply``); a subpackage is
its ``__init__``. The toolbox (``sandbox-image/``) is not part of the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import controller

PACKAGE = Path(controller.__file__).parent


def modules() -> list[str]:
    """Every module of the package, by dotted name relative to the package."""
    names = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts != ("__init__",):
            names.append(".".join(parts).removesuffix(".__init__"))
    return sorted(names)


def _path(module: str) -> Path | None:
    base = PACKAGE.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def tree(module: str) -> ast.Module:
    path = _path(module)
    assert path is not None, module
    return ast.parse(path.read_text())


def imports(module: str) -> set[str]:
    """The package modules that ``module`` imports, anywhere in it."""
    package = (
        module.split(".")
        if _path(module) == PACKAGE.joinpath(*module.split("."), "__init__.py")
        else module.split(".")[:-1]
    )
    found: set[str] = set()
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            prefix = ".".join([*base, *([node.module] if node.module else [])])
            found |= {prefix} | {f"{prefix}.{a.name}".lstrip(".") for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("controller"):
            prefix = (node.module or "").removeprefix("controller").removeprefix(".")
            found |= {prefix} | {f"{prefix}.{a.name}".lstrip(".") for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("controller.") for a in node.names if a.name.startswith("controller.")}
    return {name for name in found if name and _path(name) is not None and name != module}


def reachable(start: str) -> set[str]:
    """``start`` and every module it imports, directly or not."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += imports(module)
    return seen
