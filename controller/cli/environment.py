"""``cubicle env show`` and ``cubicle env build``: a repository's environment, as sessions would resolve and build it.

Exit codes: 0 done · 2 the definition is invalid or unsafe, or REPO is not a directory (the
message names the file and key) · 4 the build failed (its last lines are shown), its base image
is not on the engine, or Docker failed · 130 Ctrl-C.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from ..errors import ConfigError, CubicleError, RepoError
from . import help_format, terminal
from .app import EXIT_INFRA, EXIT_INTERRUPTED, EXIT_USAGE, app, err_console, fail, load_settings

if TYPE_CHECKING:
    from ..wire.envspec import Environment

env_app = help_format.Typer(help="Show and build a repository's environment (its image, setup and network).")
app.add_typer(env_app, name="env", no_args_is_help=True)

RepoArgument = Annotated[Path, typer.Argument(metavar="REPO", help="The repository (default: the current directory).")]
ImageOption = Annotated[
    str | None, typer.Option(help="A local image to add the toolbox to, instead of the repository's definition.")
]
DockerfileOption = Annotated[
    str | None, typer.Option(help="A Dockerfile in the repository (repo-relative), instead of the definition's.")
]


def _resolve(repo: Path, image: str | None, dockerfile: str | None) -> Environment:
    from ..environment import Overrides, load, override

    if not repo.is_dir():
        raise RepoError(f"{repo} is not a directory.")
    return override(load(repo), Overrides(image=image, dockerfile=dockerfile))


def _warn(env: Environment) -> None:
    err_console.print(Text.assemble(("environment:", "bold"), " ", terminal.safe_text(env.source)))
    if env.detected:
        err_console.print(Text.assemble(("detected:", "bold"), " ", terminal.safe_text(env.detected)))
    for warning in env.warnings:
        err_console.print(Text.assemble(("warning:", "yellow"), " ", terminal.safe_text(warning)))


@env_app.command("show")
def env_show(repo: RepoArgument = Path("."), image: ImageOption = None, dockerfile: DockerfileOption = None) -> None:
    """Print the environment REPO defines (after the flags), as JSON, with its definition hash; warnings on stderr."""
    from ..environment import definition_hash

    try:
        env = _resolve(repo, image, dockerfile)
        digest = definition_hash(env, repo)
    except (RepoError, ConfigError) as err:
        raise fail(err, EXIT_USAGE) from None
    _warn(env)
    # ASCII JSON: whatever the repository wrote reaches the terminal escaped.
    print(json.dumps({**env.model_dump(mode="json"), "definition_hash": digest}, indent=2, ensure_ascii=True))


@env_app.command("build")
def env_build(repo: RepoArgument = Path("."), image: ImageOption = None, dockerfile: DockerfileOption = None) -> None:
    """Build REPO's environment image (or find it built), showing progress; prints the image's tag."""
    import asyncio

    from ..environment.preparation import Environments
    from ..sandbox.backends import open_backend

    settings = load_settings()
    try:
        env = _resolve(repo, image, dockerfile)
        _warn(env)
        client = open_backend(settings).builder()
        with err_console.status("resolving the environment") as status:

            def show(line: str) -> None:
                if line.startswith(("Step ", "cubicle: ")):
                    err_console.print(terminal.safe_text(line, "dim"))
                status.update(Text.assemble("building: ", terminal.safe_text(line[:100])))

            environments = Environments(settings, lambda directory: None)  # builds only: no setup tree to clear
            found = asyncio.run(environments.build(client, env, repo, f"env-{secrets.token_hex(4)}", show))
    except (RepoError, ConfigError) as err:
        raise fail(err, EXIT_USAGE) from None
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None
    what = "the sandbox image (default environment)" if found.default else "built" if found.built else "reused"
    err_console.print(Text.assemble(("ready:", "green"), f" {what}"))
    print(found.tag)
