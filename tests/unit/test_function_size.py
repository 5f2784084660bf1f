"""Functions stay small: none in the package longer than 40 lines or taking more than 8 parameters.

A command with many flags takes one options object (``cli.options``); a constructor with many settings takes
the group they belong to (``sandbox.sandboxes.Deployment``, ``environment.build.ImageOptions``). The one exception
is named here with its reason.
"""

from __future__ import annotations

import ast

from tests.unit.imports import PACKAGE

MAX_LINES = 40
MAX_PARAMETERS = 8
PUBLIC_SIGNATURES = {"testing/container.py:CubicleContainer.__init__"}
"""Documented keyword arguments of a public class (the testcontainers one): grouping them would break its callers."""


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for parent in ast.walk(tree):
            for node in ast.iter_child_nodes(parent):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    owner = f"{parent.name}." if isinstance(parent, ast.ClassDef) else ""
                    found.append((f"{path.relative_to(PACKAGE)}:{owner}{node.name}", node))
    return found


def test_no_function_is_longer_than_forty_lines() -> None:
    long = {name: node.end_lineno - node.lineno + 1 for name, node in _functions()}  # type: ignore[operator]
    assert {name: lines for name, lines in long.items() if lines > MAX_LINES} == {}


def test_no_function_takes_more_than_eight_parameters() -> None:
    many = {}
    for name, node in _functions():
        args = node.args
        named = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg not in ("self", "cls")]
        count = len(named) + (args.vararg is not None) + (args.kwarg is not None)
        if count > MAX_PARAMETERS and name not in PUBLIC_SIGNATURES:
            many[name] = count
    assert many == {}
