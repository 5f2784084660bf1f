"""Load controller/sandbox_image/toolbox.py (the sandbox's toolbox) as a module, so unit tests can exercise its pure parts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

PATH = Path(__file__).resolve().parent.parent / "controller" / "sandbox_image" / "toolbox.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cubicle_toolbox", PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
