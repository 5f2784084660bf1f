"""The package's own import graph, read from the source (function-level imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import controller

PACKAGE = Path(controller.__file__).parent


def modules() -> list[str]:
    """Every module of the package, by its short name (``sessions``, ``__main__``)."""
    return sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__")


def tree(module: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{module}.py").read_text())


def imports(module: str) -> set[str]:
    """The package modules that ``module`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("controller"):
            name = (node.module or "").removeprefix("controller").removeprefix(".")
            found |= {name.split(".")[0]} if name else {alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("controller.")}
    return {name for name in found if (PACKAGE / f"{name}.py").is_file()}


def reachable(start: str) -> set[str]:
    """``start`` and every module it imports, directly or not."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += imports(module)
    return seen
