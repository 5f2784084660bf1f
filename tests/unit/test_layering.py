"""The package's layering: packages by layer, each importing only its own layer or those below, and no cycle.

The package is a few packages (``wire``, ``workspace``, ``sandbox``, ``testing``, ``environment``, ``agent``,
``server``, ``cli``) and a few modules at its root (``errors``, ``config``, ``answers``, the ``client``).
A new package or root module must be placed in a layer here; that placement is the design decision.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import controller

PACKAGE = Path(controller.__file__).parent
LAYERS: list[set[str]] = [
    {"errors"},
    {"wire"},  # what crosses the API and the toolbox channel: client-safe
    {"config"},
    {"answers"},  # what the client reads of a server, bounded
    {"client"},
    {"workspace"},  # the session's layer over the checkout, its quota filesystem, apply and revert
    {"sandbox"},  # where tool calls run: the Sandbox protocol, the channel, the Docker backend
    {"testing"},
    {"environment", "agent"},  # neither imports the other
    {"server"},
    {"cli"},
    {"__main__"},
]
ROOT_MODULES = {"__init__", "__main__", "errors", "config", "answers", "client"}
LAYER_OF = {name: level for level, names in enumerate(LAYERS) for name in names}


def modules() -> dict[str, set[str]]:
    """Each module of the package (dotted, e.g. ``workspace.apply``) and the package modules it imports."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
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


def test_the_root_holds_only_the_packages_and_a_few_modules() -> None:
    modules = {path.stem for path in PACKAGE.glob("*.py")}
    assert modules == ROOT_MODULES, "a new module belongs in one of the packages"


def test_no_two_packages_import_each_other() -> None:
    graph = imports()
    pairs = sorted({tuple(sorted((a, b))) for a, targets in graph.items() for b in targets if a in graph.get(b, ())})
    assert pairs == []


def test_no_two_names_differ_by_one_letter_added() -> None:
    """``runtime`` beside ``runtimes``, ``workspace`` beside ``workspaces``: a reader cannot tell which is which."""
    names = {p.stem for p in PACKAGE.rglob("*.py")} | {
        p.name for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists()
    }
    pairs = [
        (a, b)
        for a in names
        for b in names
        if len(b) == len(a) + 1 and any(b[:i] + b[i + 1 :] == a for i in range(len(b)))
    ]
    assert pairs == []
