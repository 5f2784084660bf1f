"""A command of one options object: Typer reads the flags from the dataclass's fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer
from typer.testing import CliRunner

from controller.cli import options
from controller.cli.run import RunOptions, run


@dataclass(frozen=True)
class Greeting:
    name: Annotated[str, typer.Argument(metavar="NAME")]
    loud: Annotated[bool, typer.Option("--loud")] = False
    times: Annotated[int, typer.Option(min=1)] = 1


def test_the_fields_become_the_commands_arguments_and_flags() -> None:
    got: list[Greeting] = []
    app = typer.Typer()

    @app.command()
    @options.command(Greeting)
    def greet(o: Greeting) -> None:
        got.append(o)

    assert CliRunner().invoke(app, ["ada", "--loud", "--times", "2"]).exit_code == 0
    assert got == [Greeting("ada", loud=True, times=2)]
    refused = CliRunner().invoke(app, ["ada", "--times", "0"])
    assert refused.exit_code == 2 and got == [Greeting("ada", loud=True, times=2)]  # Typer's own checks still apply


def test_cubicle_run_takes_one_options_object() -> None:
    assert list(run.__signature__.parameters) == [f for f in RunOptions.__dataclass_fields__]  # type: ignore[attr-defined]
