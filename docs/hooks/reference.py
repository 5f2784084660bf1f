"""MkDocs hook: the reference pages' tables, generated from the code at build time (never committed).

A page holds a marker comment where a table goes: ``<!-- cubicle:settings -->`` (every ``Settings`` field with
its variable, default, bounds and description), ``<!-- cubicle:limits -->`` (the per-session ``Limits``, with
the server's maximums), ``<!-- cubicle:context -->`` (the context policy), ``<!-- cubicle:events -->`` (the
event union) and ``<!-- cubicle:routes -->`` (the HTTP API's routes, from the app's OpenAPI document).
"""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import AliasChoices, BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

MARKER = re.compile(r"<!-- cubicle:([a-z]+) -->")


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda m: TABLES[m.group(1)](), markdown)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "see below"
    if value is None or value == "" or value == () or value == []:
        return "unset"
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    text = str(value.get_secret_value() if hasattr(value, "get_secret_value") else value)
    home = os.path.expanduser("~")
    return f"`{text.replace(home, '~')}`"


def _bounds(field: FieldInfo) -> str:
    parts = []
    for item in field.metadata:
        for name, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(item, name, None)
            if value is not None:
                parts.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value}")
    return ", ".join(parts)


def _variables(name: str, field: FieldInfo, prefix: str) -> str:
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        names = [c for c in alias.choices if isinstance(c, str) and c.isupper()]
        return " or ".join(f"`{n}`" for n in names)
    return f"`{prefix}{name.upper()}`"


def _table(model: type[BaseModel], prefix: str, ceiling: BaseModel | None = None) -> str:
    head = "| variable | default | bounds | meaning |\n|---|---|---|---|\n"
    rows = []
    for name, field in model.model_fields.items():
        bounds = _bounds(field)
        if ceiling is not None:
            bounds = f"{bounds}; the server's maximum `{getattr(ceiling, name)}`".lstrip("; ")
        rows.append(
            f"| {_variables(name, field, prefix)} | {_default(field)} | {_cell(bounds)} | {_cell(field.description or '')} |"
        )
    return head + "\n".join(rows) + "\n"


def settings() -> str:
    from controller.config import Settings

    return _table(Settings, "CUBICLE_")


def limits() -> str:
    from controller.config import Settings
    from controller.wire.limits import Limits

    ceiling = Settings.model_fields["max_limits"].default_factory()  # type: ignore[call-arg,misc]
    return _table(Limits, "CUBICLE_LIMITS__", ceiling)


def context() -> str:
    from controller.wire.policies import ContextPolicy

    return _table(ContextPolicy, "CUBICLE_CONTEXT__")


def backend() -> str:
    from controller.config import DockerBackendConfig, KubernetesBackendConfig

    def kinds(model: type[BaseModel]) -> str:
        return _table(model, "CUBICLE_BACKEND__").split("\n", 2)[2]

    head = "| variable | default | bounds | meaning |\n|---|---|---|---|\n"
    return (
        head
        + kinds(DockerBackendConfig)
        + kinds(KubernetesBackendConfig).replace("| required |", "| `kubernetes` |", 1)
    )


def events() -> str:
    import typing

    from controller.wire import events as module

    union = typing.get_args(typing.get_args(module.Event)[0])
    rows = []
    for model in union:
        kind = model.model_fields["type"].default
        fields = ", ".join(f"`{n}`" for n in model.model_fields if n not in ("type", "session_id", "seq", "ts"))
        rows.append(f"| `{kind}` | {_cell((model.__doc__ or '').strip().split(chr(10))[0])} | {fields} |")
    return "| type | what | fields |\n|---|---|---|\n" + "\n".join(rows) + "\n"


def routes() -> str:
    from controller.config import Settings
    from controller.server.api import create_app

    spec = create_app(Settings(api_token="docs", data_dir="/nonexistent")).openapi()
    rows = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            codes = ", ".join(sorted(op.get("responses", {})))
            rows.append(f"| `{method.upper()} {path}` | {_cell(op.get('summary', ''))} | {codes} |")
    return "| route | what | statuses |\n|---|---|---|\n" + "\n".join(rows) + "\n"


TABLES = {
    "settings": settings,
    "limits": limits,
    "context": context,
    "backend": backend,
    "events": events,
    "routes": routes,
}
