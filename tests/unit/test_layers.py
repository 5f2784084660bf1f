"""The package's layering: no module imports one above it, and no two modules import each other in a cycle."""

from __future__ import annotations

import pytest

from tests.unit.imports import imports, modules

LAYERS: list[set[str]] = [
    {"errors", "config", "events", "protocol", "output", "terminal", "usage", "owners", "scripted"},
    {"engine", "images", "channel", "store", "model", "repos", "display"},
    {"sandbox", "tools", "agent"},
    {"runtime"},
    {"feed", "recorder", "live", "sessions"},
    {"api", "cli", "__main__", "testing"},
]
"""Bottom to top. The agent loop and its seams sit below the runtime that assembles them, which
sits below the sessions that run it, below the entry points. A new module takes its place here."""


def layer(module: str) -> int:
    for index, members in enumerate(LAYERS):
        if module in members:
            return index
    raise AssertionError(f"controller/{module}.py has no layer: add it to LAYERS in {__file__}.")


@pytest.mark.parametrize("module", modules())
def test_no_module_imports_one_above_it(module: str) -> None:
    above = sorted(name for name in imports(module) if layer(name) > layer(module))
    assert above == [], f"{module} (layer {layer(module)}) imports {above} from above it"


def test_there_are_no_import_cycles() -> None:
    graph = {module: imports(module) for module in modules()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, "import cycle: " + " -> ".join([*path[path.index(module) :], module])
        if module not in done:
            for name in sorted(graph[module]):
                visit(name, [*path, module])
            done.add(module)

    for module in graph:
        visit(module, [])


def test_the_import_reader_sees_function_level_imports() -> None:
    """The CLI imports the API and the store inside functions; a reader that missed them would miss cycles too."""
    assert {"api", "store", "runtime", "engine"} <= imports("cli")
