"""Every name true: no two modules or public classes of one name, every exception in ``errors.py``'s drawn tree,
and the architecture page naming the packages and modules there are."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import controller
from controller import errors

PACKAGE = Path(controller.__file__).parent
PAGE = PACKAGE.parent / "docs" / "architecture.md"
NUMBERS = {"four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.stem not in ("__init__", "__main__"))


def _packages() -> list[Path]:
    return sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def _public_classes() -> list[tuple[str, str]]:
    """Each module-level public class of the package: (its name, its module's path)."""
    found = []
    for path in _modules() + sorted(PACKAGE.rglob("__init__.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found.append((node.name, str(path.relative_to(PACKAGE))))
    return found


def test_no_two_modules_share_a_name() -> None:
    twice = {name: n for name, n in Counter(p.stem for p in _modules()).items() if n > 1}
    assert twice == {}, "rename one side: a reader cannot tell the modules apart by their name"


def test_no_two_public_classes_share_a_name() -> None:
    where: dict[str, list[str]] = {}
    for name, module in _public_classes():
        where.setdefault(name, []).append(module)
    assert {name: places for name, places in where.items() if len(places) > 1} == {}


def test_every_exception_is_in_the_errors_module() -> None:
    outside = []
    for path in _modules() + sorted(PACKAGE.rglob("__init__.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                continue
            if any(ast.unparse(base).endswith(("Error", "Exception")) for base in node.bases):
                outside.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert [found for found in outside if not found.startswith("errors.py:")] == []


def test_the_drawn_tree_is_the_exception_tree() -> None:
    """Each class of ``errors.py`` is drawn once, under its own base."""
    drawn: dict[str, str] = {}
    parents: list[str] = []
    for line in (errors.__doc__ or "").splitlines():
        match = re.search(r"\b([A-Z]\w*Error)\b", line)
        if match is None or not re.match(r"^ {4}[│├└ ─]*[A-Z]", line):
            continue
        depth = (match.start() - 4) // 4
        del parents[depth:]
        assert match.group(1) not in drawn, f"{match.group(1)} is drawn twice"
        drawn[match.group(1)] = parents[-1] if parents else ""
        parents.append(match.group(1))
    classes = {
        name: next((b.__name__ for b in value.__bases__ if issubclass(b, errors.CubicleError)), "")
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.CubicleError)
    }
    assert drawn == classes


def _rows() -> dict[str, str]:
    """The architecture page's table: each first cell's backticked name (``wire/``, ``errors.py``) with its row."""
    rows = {}
    for line in PAGE.read_text().splitlines():
        cells = line.split("|")
        if len(cells) >= 4 and "`" in cells[1]:
            for name in re.findall(r"`([\w.]+/?)`", cells[1]):
                rows[name] = cells[2]
    return rows


def test_the_architecture_page_counts_the_packages_and_root_modules() -> None:
    said = re.search(
        r"`controller/` is the package: (\w+) packages by layer and (\w+) modules at its root", PAGE.read_text()
    )
    assert said is not None
    roots = [p for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
    assert (NUMBERS[said.group(1)], NUMBERS[said.group(2)]) == (len(_packages()), len(roots))


def test_the_architecture_page_names_every_package_and_root_module() -> None:
    rows = set(_rows())
    assert rows == {f"{p.name}/" for p in _packages()} | {p.name for p in PACKAGE.glob("*.py") if p.stem != "__init__"}


def test_the_architecture_page_names_every_module_in_its_package_s_row() -> None:
    rows = _rows()
    unnamed = [
        f"{package.name}/{module.stem}"
        for package in _packages()
        for module in sorted(package.glob("*.py"))
        if module.stem != "__init__" and f"`{module.stem}`" not in rows[f"{package.name}/"]
    ]
    assert unnamed == []


def test_the_workspace_docstring_names_every_module_of_the_workspace() -> None:
    import controller.workspace

    listed = {line.split()[0] for line in (controller.workspace.__doc__ or "").splitlines() if line.startswith("    ")}
    modules = {p.stem for p in (PACKAGE / "workspace").glob("*.py") if p.stem != "__init__"}
    assert modules <= listed
