"""The ``cubicle`` command line: run a task, serve the API, build the image, sweep orphans."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from . import images, owners
from .config import Settings
from .errors import CubicleError

EXIT_OK, EXIT_USAGE, EXIT_LIMIT, EXIT_INFRA, EXIT_INTERRUPTED = 0, 2, 3, 4, 130

app = typer.Typer(
    name="cubicle",
    help="Run a coding agent on a repository; every tool call runs inside a hardened per-session container.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
image_app = typer.Typer(help="Manage the sandbox image.", no_args_is_help=True)
app.add_typer(image_app, name="image")
err_console = Console(stderr=True)


def fail(error: CubicleError | str, code: int) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {error}", highlight=False)
    return typer.Exit(code)


@image_app.command("build")
def image_build(
    tag: Annotated[str | None, typer.Option(help="Image tag (default: CUBICLE_IMAGE).")] = None,
    base: Annotated[str | None, typer.Option(help="Base image (build argument BASE).")] = None,
) -> None:
    """Build the sandbox image from Dockerfile.sandbox, showing progress."""
    settings = Settings()
    target = tag or settings.image
    try:
        client = images.connect()
        with err_console.status(f"building {target}") as status:

            def show(line: str) -> None:
                if line.startswith("Step "):
                    err_console.print(line, style="dim", markup=False, highlight=False)
                status.update(f"building {target}: {line[:100]}")

            image_id = images.build(client, target, base=base, on_line=show)
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    err_console.print(f"[green]built[/] {target} {image_id[:19]}")


@app.command()
def gc(
    everything: Annotated[bool, typer.Option("--all", help="Remove every Cubicle container, live or not.")] = False,
) -> None:
    """Remove sandbox containers whose controller process is gone."""
    settings = Settings()
    try:
        result = owners.sweep(images.connect(), settings.instance, everything=everything)
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    for name in result.removed:
        print(f"removed {name}")
    print(f"{len(result.removed)} removed, {len(result.kept)} kept")


def main() -> None:
    """Console-script entry point."""
    sys.exit(app())
