"""``cubicle run``: one turn on a repository, shown live and recorded as a session of this process.

The session starts where the API's do (``Sessions.register``: the record, the pinned
repository, the workspace layer); its events go to the session's recorder first and then
to the live view or ``--json``. At the turn's end the layer is checkpointed and the
changes reported; ``finish.after_turn`` then applies them, keeps them or asks.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from ..errors import (
    AuthError,
    ConfigError,
    ConflictError,
    CubicleError,
    ForbiddenRepoError,
    GitRefError,
    GitTooLargeError,
    GitTreeError,
    InvalidRequestError,
    LeaseLostError,
    RepoError,
    StoreError,
)
from . import options, terminal
from .app import EXIT_CONFLICT, EXIT_INFRA, EXIT_INTERRUPTED, EXIT_LIMIT, EXIT_OK, EXIT_USAGE, app, fail, load_settings

if TYPE_CHECKING:  # what the command runs is imported inside it: `cubicle --help` loads none of it
    from ..agent import scripted
    from ..agent.loop import TurnOutcome
    from ..config import Settings
    from ..server.live import LiveSession
    from ..server.runtime import Runtime
    from ..server.sessions import Sessions
    from ..wire.bodies import RemoteRepo
    from ..wire.envspec import EnvironmentRequest
    from ..wire.events import SessionFinished
    from ..wire.limits import Limits
    from ..wire.network import NetworkPolicy
    from .display import JsonSink, LiveSink
    from .finish import Ran

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals that end a run like Ctrl-C does; the exit code is then 128 + the signal (143, 129)."""
EXIT_CODES = {
    "end_turn": EXIT_OK,
    "max_steps": EXIT_LIMIT,
    "token_budget": EXIT_LIMIT,
    "timeout": EXIT_LIMIT,
    "too_many_entries": EXIT_LIMIT,
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
    "session's end recorded (a session_finished event with reason cancelled); the changes are kept.\n\n"
    "With --server URL the run happens on that `cubicle serve` (token: CUBICLE_API_TOKEN) and REPO is a path on "
    "the server: the same view, the same exit codes, Ctrl-C cancels the remote turn. The limit flags, --model, "
    "--network, --image and --setup are sent with the request (the server lowers limits to its maximums and "
    "allows only its images); --apply and --include-ignored apply through the API; --approve and --scenario are "
    "refused."
)
T = TypeVar("T")


def _network(text: str) -> str:
    """``--network LEVEL``: none, open or allow=HOST,...; a usage error that says which form is wrong.

    The text is checked here and kept as given: the limits parse it again, and the option's type stays a string
    so that `cubicle --help` need not import the policy's model."""
    from ..wire import network as networks

    try:
        networks.parse(text)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    return text


# The arguments `cubicle run` and `cubicle mcp` share, declared once.
RepoArgument = Annotated[
    str,
    typer.Argument(
        metavar="REPO",
        help="The repository (seen at /workspace; writes go to the session's layer): a directory, or an http(s) git "
        "URL the controller fetches (its changes then leave as a patch).",
    ),
]
RefOption = Annotated[
    str | None,
    typer.Option(
        "--ref", help="With a URL for REPO: the branch, tag or commit to work on (default: the remote's HEAD)."
    ),
]
CommandTimeoutOption = Annotated[
    int | None, typer.Option("--command-timeout", help="Longest a single command may run, in seconds.")
]
MemoryOption = Annotated[int | None, typer.Option("--memory", help="Sandbox memory in MiB.")]
CpusOption = Annotated[float | None, typer.Option("--cpus", help="Sandbox CPUs.")]
DiskOption = Annotated[
    int | None, typer.Option("--disk", help="Disk quota of the session's files in MiB (checkpoints included).")
]
InodesOption = Annotated[int | None, typer.Option("--inodes", help="Files and directories the session may hold.")]


def sandbox_flags(
    command_timeout: int | None,
    memory: int | None,
    cpus: float | None,
    disk: int | None,
    inodes: int | None,
    network: str | None,
    runtime: str | None = None,
) -> dict[str, Any]:
    """The sandbox's limits as `cubicle run` and `cubicle mcp` take them, by ``Limits`` field (None: not given)."""
    return {
        "command_timeout_s": command_timeout,
        "memory_mb": memory,
        "cpus": cpus,
        "disk_mb": disk,
        "inodes": inodes,
        "network": network,
        "runtime": runtime,
    }


RuntimeOption = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        help="The OCI runtime the sandbox runs under: runc (default), runsc (gVisor), or another the engine knows "
        "and the server allows (`cubicle doctor` lists them).",
    ),
]


NetworkOption = Annotated[
    str | None,
    typer.Option(
        "--network",
        parser=_network,
        metavar="LEVEL",
        help="The sandbox's network: none (default), allow=HOST[,HOST...] (only those, through a proxy), or open.",
    ),
]
ImageOption = Annotated[
    str | None,
    typer.Option(
        "--image",
        help="Run in this local image (the toolbox is added) instead of the repository's environment; "
        "it must be the default image or on CUBICLE_ALLOWED_IMAGES.",
    ),
]
SetupOption = Annotated[
    str | None,
    typer.Option(
        "--setup",
        help="The setup command, run once before the first tool call (instead of the repository's; '' for none).",
    ),
]


def environment_request(image: str | None, setup: str | None) -> EnvironmentRequest | None:
    """What ``--image`` and ``--setup`` ask over the repository's environment; None when neither was given."""
    from ..wire.envspec import EnvironmentRequest

    return EnvironmentRequest(image=image, setup=setup) if image is not None or setup is not None else None


def _load_scenario(name: str) -> scripted.Scenario:
    """``--scenario``: a scenario file, or the name of one shipped in controller/scenarios."""
    from pydantic import ValidationError

    from ..agent import scripted

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
    from pydantic import SecretStr

    from ..agent import scripted

    if scenario is None:
        yield settings
        return
    server = scripted.ScriptedServer([_load_scenario(scenario)])
    with scripted.serve_in_thread(server.app) as url:
        yield settings.model_copy(update={"base_url": url, "api_key": settings.api_key or SecretStr("scripted")})


async def _run_session(
    settings: Settings,
    repo: Path | RemoteRepo,
    task: str,
    limits: Limits,
    sink: Any,
    approve: bool,
    signals: list[int],
    asked: Asked,
) -> Ran:
    """The session, cancelled (like Ctrl-C cancels it) by the first SIGTERM or SIGHUP, which is appended to ``signals``."""
    return await _stoppable(_session(settings, repo, task, limits, sink, approve, asked), signals)


async def _stoppable(work: Awaitable[T], signals: list[int]) -> T:
    """``work``, cancelled (like Ctrl-C cancels it) by the first SIGTERM or SIGHUP, which is appended to ``signals``."""
    import asyncio

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
        return await work
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)


@dataclass(frozen=True)
class Asked:
    """What the flags asked of the environment: fields over the repository's definition, and whether --network was given."""

    environment: EnvironmentRequest | None = None
    network: bool = False


async def _session(
    settings: Settings,
    repo: Path | RemoteRepo,
    task: str,
    limits: Limits,
    view: JsonSink | LiveSink,
    approve: bool,
    asked: Asked,
) -> Ran:
    """One turn in a fresh container: a session of the API's database, begun and run by ``Sessions`` as the API's
    are (``server.live.LiveSession``), with the terminal as its view and, with --approve, its approver."""
    from ..agent.loop import TurnOutcome
    from ..server.sessions import NewSession
    from .display import LiveSink
    from .finish import Ran

    async with local_sessions(settings, limits.network) as sessions:
        approver = view.approve if approve and isinstance(view, LiveSink) else None
        new = NewSession(
            repo,
            task,
            settings.model,
            limits,
            prefix="cli-",
            environment=asked.environment,
            network_asked=asked.network,
            typed=True,
        )
        record = await sessions.create(new, view=view, approver=approver)
        live = await sessions.prepared(record.id)  # a remote's files are fetched first (its error raised here)
        record = sessions.get(record.id)
        if live is None:  # cancelled (from another terminal) while its files were fetched
            return Ran(record.id, Path(record.repo), TurnOutcome("cancelled", record.detail), record.source)
        return Ran(record.id, Path(record.repo), await _turn_of(live, record.id), record.source)


@contextlib.asynccontextmanager
async def local_sessions(settings: Settings, network: NetworkPolicy | None = None) -> AsyncIterator[Sessions]:
    """This machine's sessions for one turn the CLI drives: the model's key checked first (a usage error before
    Docker is even asked), the image with ``network``'s proxy ensured, what a killed run or server left swept.
    After it the turn's lease and container go, and the clients close, even when a second signal comes."""
    from ..server.sessions import open_sessions

    async def prepare(runtime: Runtime) -> None:
        runtime.check_model()
        if network is not None:
            await runtime.ensure_image(network)

    # start: what a killed run or server left is swept, its sessions interrupted, its containers gone
    async with open_sessions(settings, prepare=prepare, start=True) as sessions:
        yield sessions


async def _turn_of(live: LiveSession, session_id: str) -> TurnOutcome:
    """The run's turn, awaited: a cancel of this run (Ctrl-C, a signal) cancels the turn, which records its end. A
    turn stopped because another controller took the session over (this run's lease ran out while it was paused or
    cut off) is a conflict; one whose end could not even be recorded, a store failure."""
    import asyncio

    assert live.task is not None  # create begins the turn
    try:
        outcome = await live.task
    except asyncio.CancelledError:
        if not live.lost:
            raise
        outcome = None
    if outcome is not None:
        return outcome
    if live.lost:
        raise LeaseLostError(
            f"Session {session_id} was taken over by another controller (this run's lease ran out); this run "
            "stopped and wrote nothing more.",
            hint="Follow the session where it runs now (`cubicle sessions`).",
        )
    raise StoreError(live.failure or f"The turn of session {session_id} failed.")


def repo_of(text: str, ref: str | None, apply: bool | None = None) -> Path | RemoteRepo:
    """REPO as the session's source: a URL (``scheme://``) is a git remote, anything else a directory. ``--ref``
    belongs to a URL only, ``--apply`` to a directory only. A URL's spelling is judged where it is fetched
    (``wire.gitremote``)."""
    from pydantic import ValidationError

    from ..wire.bodies import RemoteRepo

    if "://" not in text:
        if ref is not None:
            raise fail("--ref names a commit of a git URL; REPO is a directory here, so drop --ref.", EXIT_USAGE)
        return Path(text)
    if apply:
        raise fail(
            "--apply writes into a checkout, and a session on a URL has none: drop --apply, then take its patch "
            "(cubicle changes ID --patch) or push it (cubicle push ID --branch NAME).",
            EXIT_USAGE,
        )
    try:
        return RemoteRepo(url=text, ref=ref)
    except ValidationError as err:
        problem = err.errors()[0]
        raise fail(f"{'--ref' if problem['loc'][0] == 'ref' else 'REPO'}: {problem['msg']}.", EXIT_USAGE) from None


def _check_run_args(repo: Path | RemoteRepo, approve: bool, json_events: bool) -> None:
    """Usage errors that need no settings, found before anything starts."""
    if not isinstance(repo, Path):  # a remote: its URL is judged where it is fetched
        pass
    elif not repo.exists():
        raise fail(f"REPO {repo} does not exist; give the path of the repository's directory.", EXIT_USAGE)
    elif not repo.is_dir():
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
    from pydantic import ValidationError

    from ..wire.limits import Limits
    from . import usage

    given = {name: value for name, value in flags.items() if value is not None}
    try:
        return Limits.model_validate({**settings.limits.model_dump(), **given})
    except ValidationError as err:
        raise fail(usage.limit_problems(err, given), EXIT_USAGE) from None


@contextlib.contextmanager
def _view(json_events: bool, console: Console) -> Iterator[JsonSink | LiveSink]:
    """Where the run's events go: one JSON line each, or the live terminal view."""
    from .display import JsonSink, LiveSink

    if json_events:
        yield JsonSink()
    else:
        with LiveSink(console) as sink:
            yield sink


@contextlib.contextmanager
def _exit_codes(signals: list[int]) -> Iterator[None]:
    """Whatever ends a run before its turn does becomes its exit code and a one-line message."""
    import asyncio

    try:
        yield
    except (ConfigError, RepoError, ForbiddenRepoError, AuthError, InvalidRequestError) as err:
        raise fail(err, EXIT_USAGE) from None
    except (GitRefError, GitTooLargeError, GitTreeError) as err:  # what a URL's ref or tree is: as --server's 422
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
    from .display import plural

    summary = Text.assemble(
        (outcome.reason, "green" if outcome.reason == "end_turn" else "yellow"),
        f" · {plural(finished.steps, 'step')} · {plural(finished.usage.total, 'token')}",
    )
    if outcome.detail:
        summary.append(" · ").append_text(terminal.safe_text(outcome.detail))
    if signals:
        summary.append(f" · stopped by {signal.Signals(signals[0]).name}")
    return summary


ApproveOption = Annotated[
    bool,
    typer.Option(
        "--approve",
        help="Show each write_file, edit_file and run_command whole and ask y/n before it runs (needs a terminal).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON event per line instead of the live view.")]
ScenarioOption = Annotated[
    str | None, typer.Option(help="Drive the turn with a scripted model scenario (offline demo).")
]
ApplyOption = Annotated[
    bool | None,
    typer.Option(
        "--apply/--no-apply",
        help="After a turn the agent ended itself, apply the changes to REPO without asking (--apply), or keep "
        "them for review (--no-apply). Without either: ask on a terminal, keep them otherwise.",
    ),
]
IncludeIgnoredOption = Annotated[
    bool, typer.Option("--include-ignored", help="Also apply paths the repository's ignore rules match.")
]
"""The options `cubicle run` and `cubicle continue` share: a turn's view, approval and apply."""


@dataclass(frozen=True)
class RunOptions:
    """What `cubicle run` was given: its arguments and flags, as Typer reads them from these fields."""

    repo: RepoArgument
    task: Annotated[str, typer.Argument(metavar="TASK", help="What the agent should do.")]
    ref: RefOption = None
    model: Annotated[str | None, typer.Option(help="Model id (default: CUBICLE_MODEL).")] = None
    max_steps: Annotated[int | None, typer.Option(help="Model requests before stopping.")] = None
    token_budget: Annotated[int | None, typer.Option(help="Input + output tokens for the session.")] = None
    timeout: Annotated[int | None, typer.Option(help="Wall-clock seconds for the turn.")] = None
    command_timeout: CommandTimeoutOption = None
    memory: MemoryOption = None
    cpus: CpusOption = None
    disk: DiskOption = None
    inodes: InodesOption = None
    network: NetworkOption = None
    runtime: RuntimeOption = None
    approve: ApproveOption = False
    json_events: JsonOption = False
    scenario: ScenarioOption = None
    apply: ApplyOption = None
    include_ignored: IncludeIgnoredOption = False
    image: ImageOption = None
    setup: SetupOption = None
    server: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Run on this `cubicle serve` instead (token: CUBICLE_API_TOKEN); REPO is then a path on the server "
            "or a URL it fetches. "
            "--approve and --scenario are refused; the other flags are sent with the request.",
        ),
    ] = None


@app.command(help=RUN_HELP)
@options.command(RunOptions)
def run(o: RunOptions) -> None:
    import asyncio

    from .finish import Choice, LocalReview, after_turn
    from .remote import refuse_local_only

    flags = {
        "max_steps": o.max_steps,
        "token_budget": o.token_budget,
        "wall_clock_s": o.timeout,
        **sandbox_flags(o.command_timeout, o.memory, o.cpus, o.disk, o.inodes, o.network, o.runtime),
    }
    repo = repo_of(o.repo, o.ref, o.apply)
    if o.server is not None:
        refuse_local_only(o.approve, o.scenario)
        _run_remote(o.server, o, flags, repo)
        return
    _check_run_args(repo, o.approve, o.json_events)
    settings = load_settings().model_copy(update={"model": o.model} if o.model else {})
    limits = _limits(settings, flags)
    console = terminal.console(stderr=o.json_events)
    signals: list[int] = []
    with (
        _exit_codes(signals),
        _scripted_endpoint(settings, o.scenario) as effective,
        _view(o.json_events, console) as sink,
    ):
        asked = Asked(environment_request(o.image, o.setup), o.network is not None)
        ran = asyncio.run(_run_session(effective, repo, o.task, limits, sink, o.approve, signals, asked))
    if not o.json_events and sink.finished is not None:
        console.print(_summary(ran.outcome, sink.finished, signals))
    code = 128 + signals[0] if signals else EXIT_CODES[ran.outcome.reason]
    choice = Choice(o.apply, o.include_ignored, interactive=sys.stdin.isatty() and not o.json_events)
    raise typer.Exit(
        after_turn(LocalReview(settings, ran.session_id), ran, choice, sink, console, bool(signals)) or code
    )


def _run_remote(url: str, o: RunOptions, flags: dict[str, Any], repo: Path | RemoteRepo) -> None:
    """``--server``: the run on a remote ``cubicle serve``, shown and ended like a local one."""
    import asyncio

    from pydantic import ValidationError

    from ..wire.limits import Limits
    from . import usage
    from .finish import Choice, Ran, after_turn
    from .remote import Remote, RemoteReview, api_token, ended, run_remote

    given = {name: value for name, value in flags.items() if value is not None}
    try:
        checked = Limits.model_validate({**Limits().model_dump(), **given}).model_dump(mode="json")
    except ValidationError as err:
        raise fail(usage.limit_problems(err, given), EXIT_USAGE) from None
    environment = environment_request(o.image, o.setup)
    token = api_token()
    sent = str(repo) if isinstance(repo, Path) else repo
    remote = Remote(url, token, sent, o.task, o.model, {name: checked[name] for name in given}, environment)
    console = terminal.console(stderr=o.json_events)
    signals: list[int] = []
    with _exit_codes(signals), _view(o.json_events, console) as sink:
        done = asyncio.run(_stoppable(run_remote(remote, sink), signals))
    outcome = ended(done)
    if not o.json_events and done.finished is not None:
        console.print(_summary(outcome, done.finished, signals))
    code = 128 + signals[0] if signals else EXIT_CODES[outcome.reason]
    choice = Choice(o.apply, o.include_ignored, interactive=sys.stdin.isatty() and not o.json_events)
    ran = Ran(done.session_id, Path(done.repo), outcome, done.source)
    with _exit_codes(signals):
        replaced = after_turn(RemoteReview(url, token, done.session_id), ran, choice, sink, console, bool(signals))
    raise typer.Exit(replaced or code)
