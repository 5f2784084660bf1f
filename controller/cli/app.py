"""The ``cubicle`` Typer app and what every command shares: settings, exit codes, the error line, the sessions."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.text import Text

from .. import __version__
from ..errors import (
    AuthError,
    ConfigError,
    ConflictError,
    CubicleError,
    GitPushRejectedError,
    GitPushRequestError,
    InvalidRequestError,
    LayerMissingError,
    NotFoundError,
    RepoError,
)
from . import help_format, terminal

if TYPE_CHECKING:
    from ..config import Settings
    from ..server.sessions import Sessions

EXIT_OK, EXIT_USAGE, EXIT_LIMIT, EXIT_INFRA, EXIT_CONFLICT, EXIT_INTERRUPTED = 0, 2, 3, 4, 5, 130
app = help_format.Typer(
    name="cubicle",
    help="Run a coding agent on a repository; every tool call runs inside a hardened per-session container.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
image_app = help_format.Typer(help="Manage the sandbox image.", no_args_is_help=True)
app.add_typer(image_app, name="image")
err_console = terminal.console(stderr=True)


def fail(error: CubicleError | str, code: int) -> typer.Exit:
    """Print ``error:`` and the message (which may quote the model or the sandbox: shown terminal-safe)."""
    err_console.print(Text.assemble(("error:", "bold red"), " ", terminal.safe_text(str(error))))
    return typer.Exit(code)


def _version(value: bool) -> None:
    if value:
        print(f"cubicle {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """Run a coding agent on a repository; every tool call runs inside a hardened per-session container."""


def load_settings() -> Settings:
    """Settings from the environment; a bad variable is a usage error that names it, not a traceback."""
    from pydantic import ValidationError

    from ..config import Settings
    from . import usage

    try:
        return Settings()
    except ValidationError as err:
        raise fail("invalid environment: " + usage.environment_problems(err), EXIT_USAGE) from None


T = TypeVar("T")


def with_sessions(settings: Settings, op: Callable[[Sessions], Awaitable[T]]) -> T:
    """Run one command on the sessions of the database, as the API would (no turn is started)."""
    import asyncio

    from ..server.sessions import open_sessions

    async def go() -> T:
        # closing stops the leases' tending, if the command started it; a small layer is listed here, not in a child
        async with open_sessions(settings, one_shot=True) as sessions:
            return await op(sessions)

    return asyncio.run(go())


@contextlib.contextmanager
def review_errors() -> Iterator[None]:
    """2 unknown session, checkpoint or apply, a request refused (or a server that refuses the token) · 5 conflict, a
    turn is running, or a branch a push would overwrite · 4 Docker, filesystem or git failure."""
    from ..errors import ApplyConflictError
    from . import review
    from .display import plural

    try:
        yield
    except ApplyConflictError as err:
        err_console.print(
            Text.assemble(
                ("conflict:", "bold red"),
                f" nothing was written; the checkout changed under "
                f"{plural(len(err.conflicts), 'path')} since the session saw it:",
            )
        )
        err_console.print(review.conflict_list(err.conflicts))
        err_console.print("Look at them, then repeat with --force PATH for each one to overwrite, or leave them.")
        raise typer.Exit(EXIT_CONFLICT) from None
    except (NotFoundError, LayerMissingError, ConfigError, RepoError, AuthError, InvalidRequestError) as err:
        raise fail(err, EXIT_USAGE) from None
    except GitPushRequestError as err:  # a branch name or message refused before anything was sent
        raise fail(err, EXIT_USAGE) from None
    except (ConflictError, GitPushRejectedError) as err:  # the branch exists or moved: --force-with-lease
        raise fail(err, EXIT_CONFLICT) from None
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    except OSError as err:
        raise fail(f"the workspace layer could not be read or written: {err}", EXIT_INFRA) from None
    except KeyboardInterrupt:  # an apply already begun finishes first (it runs in a thread), so none is left half done
        raise fail("interrupted", EXIT_INTERRUPTED) from None
