"""The documentation: a front-page README, and reference tables generated from the code (``docs/hooks``)."""

from __future__ import annotations

import importlib.util
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

from controller.config import Settings
from controller.wire import events

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference_hook", ROOT / "docs" / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_reference_names_every_setting_from_the_code() -> None:
    page = _hook().on_page_markdown("<!-- cubicle:settings -->\n<!-- cubicle:limits -->\n<!-- cubicle:context -->")
    for name, field in Settings.model_fields.items():
        assert f"CUBICLE_{name.upper()}" in page or field.validation_alias is not None, name
    assert "CUBICLE_LIMITS__NAMES" in page and "CUBICLE_CONTEXT__WINDOW" in page and "<!--" not in page


def test_the_events_and_routes_references_come_from_the_code() -> None:
    hook = _hook()
    events = hook.on_page_markdown("<!-- cubicle:events -->")
    kinds = {str(model.model_fields["type"].default) for model in _event_models()}
    assert all(f"`{kind}`" in events for kind in kinds)
    assert "`POST /v1/sessions/{session_id}/apply`" in hook.on_page_markdown("<!-- cubicle:routes -->")


def _event_models() -> list[Any]:
    return list(typing.get_args(typing.get_args(events.Event)[0]))  # Annotated[Union[...], discriminator]


def test_the_readme_is_a_front_page() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_readme_names_the_machine_check() -> None:
    assert "`cubicle doctor`" in (ROOT / "README.md").read_text()  # issue 36: it was once missing
