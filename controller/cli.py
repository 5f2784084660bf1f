"""The ``cubicle`` command line: run a task, review and apply its changes, serve the API, build the image, sweep.

``cubicle run`` is a session like the API's: recorded in the same database (owned by this
process, so ``cubicle sessions`` lists it and a ``cubicle serve`` leaves it alone while it
runs), working in its own workspace layer. The checkout changes only when the changes are
applied: at the end of the run (``--apply``, or yes to the question on a terminal) or later
with ``cubicle apply ID``.

Exit codes of ``cubicle run``: 0 the agent finished its turn; 2 usage or configuration
error (bad flags, missing API key, ``--approve`` without a terminal, a root-owned repository);
3 a limit ended the turn (steps, token budget, wall clock); 4 sandbox, Docker, model API or
filesystem failure; 5 ``--apply`` met a conflict (the changes are kept, nothing was written),
or the repository overlaps one a running session uses; 130 interrupted (Ctrl-C); 129 and 143
stopped by SIGHUP and SIGTERM (128 + the signal). Ctrl-C, SIGTERM and SIGHUP all end the
session the same way: the running command is killed, the container is removed and the end
is recorded (``session_finished`` with reason ``cancelled``); the changes are kept.

The review commands (``changes``, ``apply``, ``revert``, ``rewind``, ``discard``,
``checkpoints``) work on any session, the API's too: 0 done; 2 usage (an unknown session,
checkpoint or apply); 5 a conflict (the paths are listed, nothing was written) or a turn is
running; 4 Docker or filesystem failure.

Everything the model or the sandbox wrote reaches the terminal through ``controller.terminal``
(file names and diffs through ``controller.review``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import signal
import sys
import termios
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import SecretStr, ValidationError
from rich.console import Console, Group, RenderableType
from rich.text import Text

from . import __version__, engine, images, owners, review, scripted, terminal, usage
from .agent import TurnOutcome
from .config import Limits, Settings
from .display import JsonSink, LiveSink, plural
from .errors import ConfigError, ConflictError, CubicleError, ForbiddenRepoError, NotFoundError, RepoError
from .events import Event, SessionFinished, SessionStarted
from .recorder import Recorder
from .runtime import Runtime
from .sessions import Sessions
from .store import SessionRecord, Store
from .workspace import ApplyResult, LayerMissingError
from .workspaces import ApplyConflictError, Workspaces, printable, record_changes, summarize

EXIT_OK, EXIT_USAGE, EXIT_LIMIT, EXIT_INFRA, EXIT_CONFLICT, EXIT_INTERRUPTED = 0, 2, 3, 4, 5, 130
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
    "Run TASK on the repository REPO; every tool call runs in a fresh hardened container, and every change the "
    "agent makes goes to the session's own layer until it is applied.\n\n"
    "At the end the changes are summarized, then applied (--apply, only after a turn the agent ended itself), kept "
    "(--no-apply), or, without either flag, asked about on a terminal and kept otherwise; review kept changes with "
    "`cubicle changes ID --diff` and apply them with `cubicle apply ID`.\n\n"
    "Exit codes: 0 the agent finished its turn · 2 usage/config error (e.g. no ANTHROPIC_API_KEY, "
    "--approve without a terminal, a root-owned repository) · 3 a limit was reached (steps, token budget, wall clock) "
    "· 4 sandbox, Docker, model API or filesystem error · 5 --apply met a conflict (changes kept, paths listed) "
    "· 130 interrupted with Ctrl-C · 143 / 129 stopped by SIGTERM / SIGHUP (128 + the signal).\n\n"
    "After Ctrl-C, SIGTERM or SIGHUP the running command is killed, the container removed and the "
    "session's end recorded (a session_finished event with reason cancelled); the changes are kept."
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
    """Remove sandbox containers and volumes whose controller process is gone, and the layers of purged sessions."""
    settings = load_settings()
    try:
        result = owners.sweep(engine.connect(settings.docker_host), settings.instance, everything=everything)
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    for name in result.removed:
        print(f"removed {name}")
    print(f"{len(result.removed)} removed, {len(result.kept)} kept")
    store = Store(settings.data_dir / "cubicle.db")
    try:
        layers = Workspaces(settings.data_dir).sweep(lambda session_id: store.get(session_id) is not None)
    finally:
        store.close()
    for session_id in layers:
        print(f"removed the workspace layer of purged session {terminal.safe(session_id)}")


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


@dataclass(frozen=True)
class Ran:
    """What a run leaves for the review after it: the session, its (pinned) checkout, how the turn ended."""

    session_id: str
    repo: Path
    outcome: TurnOutcome


async def _run_session(
    settings: Settings, repo: Path, task: str, limits: Limits, sink: Any, approve: bool, signals: list[int]
) -> Ran:
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


class Tee:
    """The run's events: committed by the session's recorder first (the API and ``cubicle sessions`` see them), then shown."""

    def __init__(self, recorder: Recorder, view: JsonSink | LiveSink) -> None:
        self.recorder = recorder
        self.view = view

    async def emit(self, event: Event) -> None:
        await self.recorder.emit(event)
        await self.view.emit(event)


async def _session(
    settings: Settings, repo: Path, task: str, limits: Limits, view: JsonSink | LiveSink, approve: bool
) -> Ran:
    """One turn in a fresh container, recorded in the API's database as a session of this process."""
    runtime = Runtime(settings)
    try:
        runtime.check_model()  # a missing key is a usage error before Docker is even asked
        await runtime.ensure_image()
        store = Store(settings.data_dir / "cubicle.db")
        try:
            sessions = Sessions(settings, store, runtime)
            record = await sessions.register(repo, task, settings.model, limits, prefix="cli-")
            return await _turn(sessions, record, view, approve)
        finally:
            store.close()
    finally:
        await runtime.close()


async def _turn(sessions: Sessions, record: SessionRecord, view: JsonSink | LiveSink, approve: bool) -> Ran:
    """The session's first turn; at its end the layer is checkpointed and its changes reported (``changes``)."""
    recorder = await sessions.recorder(record)
    sink = Tee(recorder, view)
    sandbox = sessions.runtime.sandbox(Path(record.repo), record.id, record.limits)

    async def settle(outcome: TurnOutcome) -> None:
        await record_changes(sessions.workspaces, record.id, sink)

    agent = sessions.runtime.agent(
        session_id=record.id, model=record.model, sandbox=sandbox, sink=sink, limits=record.limits,
        approver=view.approve if approve and isinstance(view, LiveSink) else None,
        save_transcript=recorder.save_transcript, on_turn_end=settle,
    )  # fmt: skip
    await sink.emit(SessionStarted(session_id=record.id, repo=record.repo, task=record.task, model=record.model))
    warm = asyncio.create_task(sandbox.start())  # the container starts while the model writes its first reply
    warm.add_done_callback(lambda t: t.cancelled() or t.exception())
    try:
        recorder.convo.add_user_text(record.task)
        return Ran(record.id, Path(record.repo), await agent.run_turn(recorder.convo))
    finally:
        await asyncio.shield(sandbox.stop())
        stored = sessions.store.get(record.id)
        if stored is not None and stored.status == "running":  # stopped before the turn could record its end
            sessions.store.update(record.id, status="cancelled", finish_reason="cancelled", detail="stopped at start")


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
    except (ConfigError, RepoError, ForbiddenRepoError) as err:
        raise fail(err, EXIT_USAGE) from None
    except ConflictError as err:  # the repository overlaps one a running session uses
        raise fail(err, EXIT_CONFLICT) from None
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
    apply: Annotated[
        bool | None,
        typer.Option(
            "--apply/--no-apply",
            help="After a turn the agent ended itself, apply the changes to REPO without asking (--apply), or keep "
            "them for review (--no-apply). Without either: ask on a terminal, keep them otherwise.",
        ),
    ] = None,
    include_ignored: Annotated[
        bool, typer.Option("--include-ignored", help="Also apply paths the repository's ignore rules match.")
    ] = False,
) -> None:
    _check_run_args(repo, approve, json_events)
    settings = load_settings().model_copy(update={"model": model} if model else {})
    limits = _limits(settings, {"max_steps": max_steps, "token_budget": token_budget, "wall_clock_s": timeout,
                                "command_timeout_s": command_timeout, "memory_mb": memory, "cpus": cpus, "network": network or None})  # fmt: skip
    console = terminal.console(stderr=json_events)
    signals: list[int] = []
    with _exit_codes(signals), _scripted_endpoint(settings, scenario) as effective, _view(json_events, console) as sink:
        ran = asyncio.run(_run_session(effective, repo, task, limits, sink, approve, signals))
    if not json_events and sink.finished is not None:
        console.print(_summary(ran.outcome, sink.finished, signals))
    code = 128 + signals[0] if signals else EXIT_CODES[ran.outcome.reason]
    choice = Choice(apply, include_ignored, interactive=sys.stdin.isatty() and not json_events)
    raise typer.Exit(_after_turn(settings, ran, choice, sink, console, bool(signals)) or code)


@dataclass(frozen=True)
class Choice:
    """What to do with a run's changes: apply (True), keep (False) or ask (None, on a terminal only)."""

    apply: bool | None
    include_ignored: bool
    interactive: bool


def _after_turn(settings: Settings, ran: Ran, choice: Choice, view: Any, console: Console, stopped: bool) -> int | None:
    """Show what the turn changed, then apply, keep or ask; an exit code that replaces the turn's, or None."""
    session_id = ran.session_id
    with _review_errors():
        changes = _with_sessions(settings, lambda s: s.changes(session_id, diff=True))
    console.print(review.change_list(changes, review.MAX_LISTED))
    if not summarize(changes).files:
        return None
    wanted = choice.apply
    if wanted and (ran.outcome.reason != "end_turn" or stopped):
        console.print(Text(f"Not applied: the turn ended with {ran.outcome.reason}, not end_turn.", "yellow"))
        wanted = False
    elif wanted is None and choice.interactive and not stopped:
        wanted = _ask_apply(console, ran)
    if not wanted:
        console.print(review.how_to_apply(session_id))
        return None
    return _apply_after_run(settings, ran, choice.include_ignored, view, console)


def _ask_apply(console: Console, ran: Ran) -> bool:
    """Ask y/n on the terminal (what was typed before the question does not answer it); Ctrl-C keeps the changes."""
    with contextlib.suppress(termios.error, OSError):
        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
    question = Text.assemble("Apply these changes to ", review.path_text(str(ran.repo), "bold"), "? [y/N] ")
    while True:
        try:
            answer = console.input(question).strip().lower()
        except EOFError:
            console.print()
            return False
        except KeyboardInterrupt:
            console.print()
            console.print(review.how_to_apply(ran.session_id))
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if answer in ("y", "yes"):
            return True
        if answer in ("", "n", "no"):
            return False
        console.print("Please answer y or n.", style="yellow")


def _apply_after_run(settings: Settings, ran: Ran, include_ignored: bool, view: Any, console: Console) -> int | None:
    """Apply the run's changes; with --json the ``applied`` event follows the run's events on stdout."""

    async def apply(sessions: Sessions) -> ApplyResult:
        result = await sessions.apply(ran.session_id, include_ignored=include_ignored)
        if isinstance(view, JsonSink):
            for event in sessions.store.events_after(ran.session_id, view.seq):
                await view.emit(event)
        return result

    try:
        with _review_errors():
            result = _with_sessions(settings, apply)
    except typer.Exit as done:
        if done.exit_code == EXIT_CONFLICT:
            console.print(review.how_to_apply(ran.session_id))
        raise
    console.print(_applied_line(ran.session_id, ran.repo, result))
    return None


# ----------------------------------------------------------------------------- reviewing a session's changes

T = TypeVar("T")
SessionArg = Annotated[str, typer.Argument(metavar="ID", help="The session (`cubicle sessions` lists them).")]
ForceOpt = Annotated[
    list[str] | None,
    typer.Option("--force", metavar="PATH", help="Overwrite PATH even though the checkout changed there (repeatable)."),
]


def _with_sessions(settings: Settings, op: Callable[[Sessions], Awaitable[T]]) -> T:
    """Run one command on the sessions of the database, as the API would (no turn is started)."""

    async def go() -> T:
        store = Store(settings.data_dir / "cubicle.db")
        runtime = Runtime(settings)
        try:
            return await op(Sessions(settings, store, runtime))
        finally:
            await runtime.close()
            store.close()

    return asyncio.run(go())


@contextlib.contextmanager
def _review_errors() -> Iterator[None]:
    """2 unknown session, checkpoint or apply · 5 conflict, or a turn is running · 4 Docker or filesystem failure."""
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
    except (NotFoundError, LayerMissingError, ConfigError, RepoError) as err:
        raise fail(err, EXIT_USAGE) from None
    except ConflictError as err:
        raise fail(err, EXIT_CONFLICT) from None
    except CubicleError as err:
        raise fail(err, EXIT_INFRA) from None
    except OSError as err:
        raise fail(f"the workspace layer could not be read or written: {err}", EXIT_INFRA) from None


def _review(op: Callable[[Sessions], Awaitable[T]]) -> T:
    settings = load_settings()
    with _review_errors():
        return _with_sessions(settings, op)


def _applied_line(session_id: str, repo: Path, result: ApplyResult) -> RenderableType:
    rows = [
        Text.assemble(
            ("applied", "green"), f" {plural(len(result.applied), 'path')} to ", review.path_text(str(repo)),
            f" (apply {result.record}; undo it with `cubicle revert {session_id}`)" if result.record else "",
        )
    ]  # fmt: skip
    rows.extend(Text.assemble("  ", review.path_text(path)) for path in result.applied)
    if result.skipped:
        rows.append(Text(f"{plural(len(result.skipped), 'path')} held back:", "yellow"))
        rows.extend(review.change_row(change) for change in result.skipped)
    return Group(*rows)


@app.command()
def changes(
    session_id: SessionArg,
    diff: Annotated[bool, typer.Option("--diff", help="Show each text file's unified diff.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the changes as a JSON list (ASCII).")] = False,
) -> None:
    """Show what a session changed in its workspace layer; the checkout has none of it until applied."""
    found = _review(lambda s: s.changes(session_id, diff=True))
    if json_out:
        shown = [
            printable(c).model_dump(mode="json", exclude_none=True, exclude=None if diff else {"diff"}) for c in found
        ]
        print(json.dumps(shown, ensure_ascii=True, indent=2))
        return
    out = terminal.console()
    out.print(review.change_list(found))
    for change in found if diff else ():
        out.print(review.diff_view(change))


@app.command("apply")
def apply_command(
    session_id: SessionArg,
    force: ForceOpt = None,
    include_ignored: Annotated[
        bool, typer.Option("--include-ignored", help="Also apply paths the repository's ignore rules match.")
    ] = False,
) -> None:
    """Copy a session's changes into its checkout (all or nothing: a conflict writes nothing, exit 5)."""

    async def apply(sessions: Sessions) -> tuple[ApplyResult, Path]:
        return await sessions.apply(session_id, force, include_ignored), Path(sessions.get(session_id).repo)

    result, repo = _review(apply)
    terminal.console().print(_applied_line(session_id, repo, result))


@app.command()
def revert(session_id: SessionArg, force: ForceOpt = None) -> None:
    """Restore the checkout, byte for byte, to how it was before the session's newest apply not yet reverted."""
    result = _review(lambda s: s.revert(session_id, force))
    out = terminal.console()
    out.print(
        Text.assemble(("reverted", "green"), f" apply {result.record}: {plural(len(result.reverted), 'path')} restored")
    )
    for path in result.reverted:
        out.print(Text.assemble("  ", review.path_text(path)))


@app.command()
def discard(session_id: SessionArg) -> None:
    """Drop a session's workspace layer and checkpoints; what was applied stays in the checkout."""
    _review(lambda s: s.discard(session_id))
    terminal.console().print(Text.assemble(("discarded", "green"), f" the changes of {session_id}"))


@app.command()
def rewind(
    session_id: SessionArg,
    turn: Annotated[int, typer.Argument(min=1, help="The checkpoint (end of that turn) to return the files to.")],
) -> None:
    """Return a session's files to how they were at the end of turn TURN (the checkout is untouched)."""
    _review(lambda s: s.rewind(session_id, turn))
    terminal.console().print(
        Text.assemble(("rewound", "green"), f" {session_id} to the end of turn {turn}; later changes are gone")
    )


@app.command()
def checkpoints(session_id: SessionArg) -> None:
    """List a session's checkpoints, one per turn (`cubicle rewind ID TURN` returns to one)."""
    found = _review(lambda s: s.checkpoints(session_id))
    out = terminal.console()
    for point in found:
        out.print(f"turn {point.turn}  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(point.created_at))}")
    if not found:
        out.print("no checkpoints yet")


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
    """List the sessions (the API's and `cubicle run`'s) from the database, newest first."""
    from rich.table import Table

    from .store import Store

    settings = load_settings()
    store = Store(settings.data_dir / "cubicle.db")
    records, total = store.page(limit, 0)
    store.close()
    table = Table("status", "finish", "steps", "tokens", "repo", "task", title=plural(total, "session"))
    # The id is what every other command takes, so it is never cut short.
    table.add_column("id", no_wrap=True, min_width=max((len(r.id) for r in records), default=2))
    table.columns.insert(0, table.columns.pop())
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
