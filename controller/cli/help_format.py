"""How ``--help`` shows arguments and flags: ``REPO TASK`` in the usage line, and nothing after a flag.

Typer 0.29 writes a required argument as ``{REPO}`` and gives every flag (``--help`` too) a ``<bool>``
placeholder, as if it took a value. ``Typer`` below makes every command and group of the app render
their parameters as click always did; a value's type (``<int>``, ``PATH``) stays.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption


class _Argument(TyperArgument):
    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.metavar or (self.name or "").upper()
        if not self.required and not name.startswith("["):
            name = f"[{name}]"
        if self.nargs != 1 and not name.endswith("..."):
            name += "..."
        return [name]


class _Flag(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        return None  # a flag takes no value


def _plain(params: list[Any]) -> list[Any]:
    """The same parameters, each shown as click shows it (they are re-classed: the subclasses add no state).

    Typed ``Any``: Typer 0.29 carries its own copy of click (``typer._click``), older releases use click's."""
    for param in params:
        if type(param) is TyperArgument:
            param.__class__ = _Argument
        elif type(param) is TyperOption and param.is_flag:
            param.__class__ = _Flag
    return params


class Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))


class Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain(super().get_params(ctx))


class Typer(typer.Typer):
    """``typer.Typer`` whose group and commands are the classes above."""

    def __init__(self, **options: Any) -> None:
        super().__init__(cls=Group, **options)

    # One keyword's default changes; restating Typer's two dozen parameters would only tie this to its version.
    def command(self, *args: Any, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:  # type: ignore[override]
        options.setdefault("cls", Command)
        return super().command(*args, **options)
