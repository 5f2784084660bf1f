"""The package's layering: each module imports only modules of its own layer or below, and nothing imports in a cycle.

A new module must be placed in a layer here; that placement is the design decision.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import controller

PACKAGE = Path(controller.__file__).parent
LAYERS: list[set[str]] = [
    {"errors", "config", "events", "output", "protocol", "terminal", "owners", "context", "network", "accesslog"},
    {
        "usage",
        "channel",
        "engine",
        "images",
        "repos",
        "model",
        "webui",
        "anthropic_model",
        "store",
        "display",
        "conversation",
        "workspace",
        "environment",
        "disks",
        "runtimes",
    },
    {"sandbox", "egress", "scripted", "compactor", "workspaces", "review", "api_models"},
    {"setups", "environments", "client", "kubernetes"},
    {"tools"},
    {"agent"},
    {"runtime"},
    {"testing", "feed", "recorder", "live", "sessions"},
    {"api", "mcpserver"},
    {"cli", "__main__"},
]
LAYER_OF = {name: level for level, names in enumerate(LAYERS) for name in names}


def modules() -> dict[str, set[str]]:
    """Each module of the package (dotted, e.g. ``workspace.apply``) and the package modules it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[0] == "sandbox_image":
            continue  # the toolbox runs inside the container and imports nothing of ours
        package = parts[:-1]
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        targets = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - (node.level - 1)]
                names = [node.module] if node.module else [alias.name for alias in node.names]
                targets |= {".".join((*base, n)) for n in names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("controller."):
                targets.add(node.module.split(".", 1)[1])  # type: ignore[union-attr]
    graph.pop("", None)
    known = set(graph)
    return {name: {t for t in targets if t in known and t != name} for name, targets in graph.items()}


def imports() -> dict[str, set[str]]:
    """The same graph between top-level units: a subpackage (``workspace``) is one unit of one layer."""
    units: dict[str, set[str]] = {}
    for name, targets in modules().items():
        unit = name.split(".")[0]
        units.setdefault(unit, set()).update(t.split(".")[0] for t in targets)
    for unit, targets in units.items():
        targets.discard(unit)
    return units


def test_every_module_has_a_layer() -> None:
    assert set(imports()) - set(LAYER_OF) == set(), "place the new module in LAYERS"


def test_no_module_imports_one_above_it() -> None:
    upward = [
        f"{source} (layer {LAYER_OF[source]}) imports {target} (layer {LAYER_OF[target]})"
        for source, targets in imports().items()
        for target in targets
        if LAYER_OF.get(target, -1) > LAYER_OF.get(source, -1)
    ]
    assert upward == []


def test_no_import_cycles() -> None:
    try:
        tuple(TopologicalSorter(imports()).static_order())
        tuple(TopologicalSorter(modules()).static_order())
    except CycleError as err:
        raise AssertionError(f"import cycle: {' -> '.join(err.args[1])}") from None
