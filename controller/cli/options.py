"""A command that takes one options object: Typer is given the signature the options' fields make.

Typer reads a command's parameters from its signature and annotations; ``command(Options)`` builds both from a
dataclass whose fields are annotated like Typer parameters (``Annotated[type, typer.Option(...)]``), so a command
with twenty flags is a function of one typed argument rather than of twenty.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

Opts = TypeVar("Opts")


def command(options: type[Opts]) -> Callable[[Callable[[Opts], None]], Callable[..., None]]:
    """Decorate ``fn(options)``: the result takes the options' fields as keyword arguments, as Typer calls it."""
    hints = typing.get_type_hints(options, include_extras=True)
    fields = dataclasses.fields(options)  # type: ignore[arg-type]
    parameters = [
        inspect.Parameter(
            field.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=hints[field.name],
            default=inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default,
        )
        for field in fields
    ]

    def wrap(fn: Callable[[Opts], None]) -> Callable[..., None]:
        @functools.wraps(fn)
        def typed(**values: Any) -> None:
            fn(options(**values))

        del typed.__wrapped__  # Typer must see the generated signature, not ``fn``'s
        typed.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        typed.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
        return typed

    return wrap
