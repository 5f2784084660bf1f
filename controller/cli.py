"""The ``cubicle`` command line: run a task, serve the API, build the image, sweep orphans.

Exit codes of ``cubicle run``: 0 the agent finished its turn; 2 usage or configuration
error (bad flags, missing API key, ``--approve`` without a terminal); 3 a limit ended the turn
(steps, token budget, wall clock); 4 sandbox, Docker or model API failure; 130 interrupted
(Ctrl-C); 129 and 143 stopped by SIGHUP and SIGTERM (128 + the signal). Ctrl-C, SIGTERM and
SIGHUP all end the session the same way: the running command is killed, the container is
removed and the end is recorded (``session_finished`` with reason ``cancelled``).

Everything the model or the sandbox wrote reaches the terminal through ``controller.terminal``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import SecretStr, ValidationError
from rich.console import Console
from rich.text import Text

from . import __version__, engine, images, owners, scripted, terminal, usage
from .agent import TurnOutcome
from .config import Limits, Settings
from .conversation import Conversation
from .display import JsonSink, LiveSink, plural
from .errors import ConfigError, CubicleError
from .events import SessionFinished, SessionStarted
from .runtime import Runtime

EXIT_OK, EXIT_USAGE, EXIT_LIMIT, EXIT_INFRA, EXIT_INTERRUPTED = 0, 2, 3, 4, 130
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end a run like Ctrl-C does; the exit code is then 128 + the signal (143, 129)."""
EXIT_CODES = {
    "end_turn": EXIT_OK,
    "max_steps": EXIT_LIMIT,
    "token_budget": EXIT_LIMIT,
    "timeout": EXIT_LIMIT,
    "cancelled": EXIT_INTERRUPTED,
    "error": EXIT_INFRA,
}
RUN_HELP = (
    "Run TASK on the repository REPO; every tool call runs in a fresh hardened container.\n\n"
    "Exit codes: 0 the agent finished its turn · 2 usage/config error (e.g. no ANTHROPIC_API_KEY, "
    "--approve without a terminal) · 3 a limit was reached (steps, token budget, wall clock) "
    "· 4 sandbox, Docker or model API error · 130 interrupted with Ctrl-C "
    "· 143 / 129 stopped by SIGTERM / SIGHUP (128 + the signal).\n\n"
    "After Ctrl-C, SIGTERM or SIGHUP the running command is killed, the container removed and the "
    "session's end recorded (a session_finished event with reason cancelled)."
)
TOKEN_MIN_CHARS = 32
app = typer.Typer(
    name="cubicle",
    help="Run a coding agent on a repository; every tool call runs inside a hardened per-session container.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)
image_app = typer.Typer(help="Manage the sandbox image.", no_args_is_help=True)
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
    try:
        return Settings()
    except ValidationError as err:
        raise fail("invalid environment: " + usage.environment_problems(err), EXIT_USAGE) from None


@image_app.command("build")
def image_build(
    tag: Annotated[str | None, typer.Option(help="Image tag (default: CUBICLE_IMAGE).")] = None,
    base: Annotated[str | None, typer.Option(help="Base image (build argument BASE).")] = None,
) -> None:
    """Build the sandbox image (its Dockerfile ships in the package), showing progress."""
    settings = load_settings()
    target = tag or settings.image
    try:
        client = engine.connect(settings.docker_host)
        with err_console.status(f"building {target}") as status:

            def show(line: str) -> None:
                if line.startswith("Step "):
                    err_console.print(terminal.safe_text(line, "dim"))
                status.update(Text.assemble(f"building {target}: ", terminal.safe_text(line[:100])))

            image_id = images.build(client, target, base=base, on_line=show)
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    err_console.print(Text.assemble(("built", "green"), f" {target} {image_id[:19]}"))


@app.command()
def gc(
    everything: Annotated[bool, typer.Option("--all", help="Remove every Cubicle container, live or not.")] = False,
) -> None:
    """Remove sandbox containers whose controller process is gone."""
    settings = load_settings()
    try:
        result = owners.sweep(engine.connect(settings.docker_host), settings.instance, everything=everything)
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    for name in result.removed:
        print(f"removed {name}")
    print(f"{len(result.removed)} removed, {len(result.kept)} kept")


def _load_scenario(name: str) -> scripted.Scenario:
    """``--scenario``: a scenario file, or the name of one shipped in controller/scenarios."""
    shipped = sorted(path.stem for path in scripted.SCENARIOS_DIR.glob("*.json"))
    file = Path(name)
    if not file.is_file():
        if name not in shipped:
            raise ConfigError(
                f"--scenario {name}: no such file, and no shipped scenario has that name. "
                f"Give a scenario JSON file, or one of: {', '.join(shipped)}."
            )
        file = scripted.SCENARIOS_DIR / f"{name}.json"
    try:
        return scripted.Scenario.model_validate_json(file.read_bytes())
    except OSError as err:
        raise ConfigError(f"--scenario {name}: cannot read {file}: {err.strerror}.") from None
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'the file'}: {e['msg']}" for e in err.errors(include_url=False)[:3]
        )
        raise ConfigError(
            f"--scenario {name}: {file} is not a valid scenario ({problems}). "
            f"See {scripted.SCENARIOS_DIR / 'demo.json'} for the format."
        ) from None


@contextlib.contextmanager
def _scripted_endpoint(settings: Settings, scenario: str | None) -> Iterator[Settings]:
    """With --scenario, serve it locally and point the SDK at it (a real HTTP round trip, no API key needed)."""
    if scenario is None:
        yield settings
        return
    server = scripted.ScriptedServer([_load_scenario(scenario)])
    with scripted.serve_in_thread(server.app) as url:
        yield settings.model_copy(update={"base_url": url, "api_key": settings.api_key or SecretStr("scripted")})


async def _run_session(
    settings: Settings, repo: Path, task: str, limits: Limits, sink: Any, approve: bool, signals: list[int]
) -> TurnOutcome:
    """The session, cancelled (like Ctrl-C cancels it) by the first SIGTERM or SIGHUP, which is appended to ``signals``."""
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None

    def stop(signum: int) -> None:
        if not signals:
            signals.append(signum)
            if not main.cancelling():  # already ending (Ctrl-C): a second cancel would cut its cleanup short
                main.cancel()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, stop, signum)
    try:
        return await _session(settings, repo, task, limits, sink, approve)
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)


async def _session(settings: Settings, repo: Path, task: str, limits: Limits, sink: Any, approve: bool) -> TurnOutcome:
    """One turn in a fresh container, assembled by the same Runtime as the API's sessions."""
    runtime = Runtime(settings)
    runtime.check_model()  # a missing key is a usage error before Docker is even asked
    await runtime.ensure_image()
    session_id = "cli-" + secrets.token_hex(6)
    sandbox = runtime.sandbox(repo, session_id, limits)
    approver = sink.approve if approve and isinstance(sink, LiveSink) else None
    agent = runtime.agent(
        session_id=session_id, model=settings.model, sandbox=sandbox, sink=sink, limits=limits, approver=approver
    )
    await sink.emit(SessionStarted(session_id=session_id, repo=str(repo), task=task, model=settings.model))
    warm = asyncio.create_task(sandbox.start())  # the container starts while the model writes its first reply
    warm.add_done_callback(lambda t: t.cancelled() or t.exception())
    try:
        convo = Conversation()
        convo.add_user_text(task)
        return await agent.run_turn(convo)
    finally:
        await asyncio.shield(sandbox.stop())
        await runtime.close()


def _check_run_args(repo: Path, approve: bool, json_events: bool) -> None:
    """Usage errors that need no settings, found before anything starts."""
    if not repo.exists():
        raise fail(f"REPO {repo} does not exist; give the path of the repository's directory.", EXIT_USAGE)
    if not repo.is_dir():
        raise fail(f"REPO {repo} is a file, not a directory; give the repository's directory.", EXIT_USAGE)
    if approve and json_events:
        raise fail("--approve needs the live terminal view; drop --json.", EXIT_USAGE)
    if approve and not sys.stdin.isatty():
        raise fail(
            "--approve asks y/n before each change, so it needs a terminal on stdin; run it in a terminal, "
            "or drop --approve.",
            EXIT_USAGE,
        )


def _limits(settings: Settings, flags: dict[str, Any]) -> Limits:
    """The session's limits: the settings' defaults with the flags that were given on top."""
    given = {name: value for name, value in flags.items() if value is not None}
    try:
        return Limits.model_validate({**settings.limits.model_dump(), **given})
    except ValidationError as err:
        raise fail(usage.limit_problems(err, given), EXIT_USAGE) from None


@contextlib.contextmanager
def _view(json_events: bool, console: Console) -> Iterator[JsonSink | LiveSink]:
    """Where the run's events go: one JSON line each, or the live terminal view."""
    if json_events:
        yield JsonSink()
    else:
        with LiveSink(console) as sink:
            yield sink


@contextlib.contextmanager
def _exit_codes(signals: list[int]) -> Iterator[None]:
    """Whatever ends a run before its turn does becomes its exit code and a one-line message."""
    try:
        yield
    except ConfigError as err:
        raise fail(err, EXIT_USAGE) from None
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None
    except asyncio.CancelledError:  # a signal arrived before the agent's turn began
        if not signals:
            raise
        raise fail(f"stopped by {signal.Signals(signals[0]).name}", 128 + signals[0]) from None


def _summary(outcome: TurnOutcome, finished: SessionFinished, signals: list[int]) -> Text:
    """The last line of the live view: why the turn ended, steps and tokens."""
    summary = Text.assemble(
        (outcome.reason, "green" if outcome.reason == "end_turn" else "yellow"),
        f" · {plural(finished.steps, 'step')} · {plural(finished.usage.total, 'token')}",
    )
    if outcome.detail:
        summary.append(" · ").append_text(terminal.safe_text(outcome.detail))
    if signals:
        summary.append(f" · stopped by {signal.Signals(signals[0]).name}")
    return summary


@app.command(help=RUN_HELP)
def run(
    repo: Annotated[Path, typer.Argument(help="The repository to work on (mounted at /workspace).")],
    task: Annotated[str, typer.Argument(help="What the agent should do.")],
    model: Annotated[str | None, typer.Option(help="Model id (default: CUBICLE_MODEL).")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Model requests before stopping.")] = None,
    token_budget: Annotated[int | None, typer.Option(help="Input + output tokens for the session.")] = None,
    timeout: Annotated[int | None, typer.Option(help="Wall-clock seconds for the turn.")] = None,
    command_timeout: Annotated[int | None, typer.Option(help="Longest a single command may run, in seconds.")] = None,
    memory: Annotated[int | None, typer.Option(help="Sandbox memory in MiB.")] = None,
    cpus: Annotated[float | None, typer.Option(help="Sandbox CPUs.")] = None,
    network: Annotated[bool, typer.Option("--network/--no-network", help="Give the sandbox a network.")] = False,
    approve: Annotated[
        bool,
        typer.Option(
            "--approve",
            help="Show each write_file, edit_file and run_command whole and ask y/n before it runs (needs a terminal).",
        ),
    ] = False,
    json_events: Annotated[
        bool, typer.Option("--json", help="Print one JSON event per line instead of the live view.")
    ] = False,
    scenario: Annotated[
        str | None, typer.Option(help="Drive the run with a scripted model scenario (offline demo).")
    ] = None,
) -> None:
    _check_run_args(repo, approve, json_events)
    settings = load_settings().model_copy(update={"model": model} if model else {})
    limits = _limits(settings, {"max_steps": max_steps, "token_budget": token_budget, "wall_clock_s": timeout,
                                "command_timeout_s": command_timeout, "memory_mb": memory, "cpus": cpus, "network": network or None})  # fmt: skip
    console = terminal.console(stderr=json_events)
    signals: list[int] = []
    with _exit_codes(signals), _scripted_endpoint(settings, scenario) as effective, _view(json_events, console) as sink:
        outcome = asyncio.run(_run_session(effective, repo.resolve(), task, limits, sink, approve, signals))
    if not json_events and sink.finished is not None:
        console.print(_summary(outcome, sink.finished, signals))
    raise typer.Exit(128 + signals[0] if signals else EXIT_CODES[outcome.reason])


def _warn(message: str) -> None:
    err_console.print(Text.assemble(("warning:", "yellow"), " ", terminal.safe_text(message)))


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default: CUBICLE_HOST, 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: CUBICLE_PORT, 8750).")] = None,
) -> None:
    """Serve the HTTP API (/v1) with uvicorn."""
    import uvicorn

    from .api import create_app

    settings = load_settings()
    bind = host or settings.host
    if settings.api_token is None and not _is_loopback(bind):
        raise fail(
            f"Refusing to serve on {bind} without CUBICLE_API_TOKEN: the API can start containers on this host. "
            "Set a token, or bind 127.0.0.1.",
            EXIT_USAGE,
        )
    if settings.api_token is not None and len(settings.api_token.get_secret_value()) < TOKEN_MIN_CHARS:
        _warn(
            f"CUBICLE_API_TOKEN has only {len(settings.api_token.get_secret_value())} characters; use at least "
            f"{TOKEN_MIN_CHARS} random ones, e.g. from `python -c 'import secrets; print(secrets.token_urlsafe(32))'`."
        )
    for root in settings.repo_roots:
        if not root.is_dir():
            what = "is not a directory" if root.exists() else "does not exist"
            raise fail(
                f"CUBICLE_REPO_ROOTS: {root} {what}; list directories that exist "
                '(comma-separated, or a JSON list such as ["/srv/repos"]).',
                EXIT_USAGE,
            )
    if not settings.repo_roots:
        _warn("CUBICLE_REPO_ROOTS is empty, so every session will be refused.")
    uvicorn.run(create_app(settings), host=bind, port=port or settings.port, log_level="info")


@app.command()
def sessions(limit: Annotated[int, typer.Option(help="How many, newest first.")] = 20) -> None:
    """List the API's sessions from its database."""
    from rich.table import Table

    from .store import Store

    settings = load_settings()
    store = Store(settings.data_dir / "cubicle.db")
    records, total = store.page(limit, 0)
    store.close()
    table = Table("id", "status", "finish", "steps", "tokens", "repo", "task", title=plural(total, "session"))
    for r in records:
        cells = (r.id, r.status, r.finish_reason or "", str(r.steps), f"{r.usage.total:,}", r.repo, r.task[:40])
        table.add_row(*(terminal.safe_text(cell) for cell in cells))
    terminal.console().print(table)


@app.command("scripted-server")
def scripted_server(
    scenarios: Annotated[list[str], typer.Argument(help="Scenario files (or names shipped in controller/scenarios).")],
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = 8123,
) -> None:
    """Serve a scripted Anthropic-compatible model for tests and offline demos."""
    scripted.run(scenarios, host, port)


def main() -> None:
    """Console-script entry point.

    The process ends with ``os._exit`` once the command has returned and the output is flushed:
    by then the container is gone and nothing is left to finalize, and tearing down the interpreter's
    modules can take most of a second on a busy machine, which Ctrl-C at a prompt must not wait for.
    """
    handler = logging.StreamHandler()
    handler.setFormatter(terminal.SafeFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    try:
        app()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        if not isinstance(done.code, int | None):
            err_console.print(terminal.safe_text(str(done.code)))
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
