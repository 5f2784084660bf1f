"""``cubicle mcp REPO``: the sandbox's six tools served to another agent over MCP (stdio), as one recorded session.

stdout carries the protocol and nothing else; Cubicle's own lines go to stderr, which MCP
clients keep in their logs. The session is registered like a ``cubicle run`` (pinned
repository, environment, workspace layer) before the server answers, so a bad repository,
a missing image or a stopped Docker engine ends the process with a message and exit code 2
or 4 instead of a server whose every call fails. When the client closes stdin (or a
SIGTERM/SIGHUP/SIGINT arrives) the layer is checkpointed, the session's end recorded and the
container removed; the changes stay for ``cubicle changes`` and ``cubicle apply``.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.text import Text

from .. import __version__
from . import options, terminal
from .app import EXIT_INFRA, EXIT_OK, app, err_console, load_settings
from .run import (
    STOP_SIGNALS,
    Asked,
    CommandTimeoutOption,
    CpusOption,
    DiskOption,
    ImageOption,
    InodesOption,
    MemoryOption,
    NetworkOption,
    RefOption,
    RepoArgument,
    RuntimeOption,
    SetupOption,
    _check_run_args,
    _exit_codes,
    _limits,
    environment_request,
    repo_of,
    sandbox_flags,
)

if TYPE_CHECKING:  # what serving runs is imported inside it: `cubicle --help` loads none of it
    import asyncio

    from ..config import Settings
    from ..server.runtime import Runtime
    from ..server.served import Serve, ServedTurn
    from ..wire.bodies import RemoteRepo
    from ..wire.limits import Limits

MCP_STOP_SIGNALS = (*STOP_SIGNALS, signal.SIGINT)
"""Each ends serving like the client closing stdin does; the exit code is then 128 + the signal."""
TASK = "Tool calls from an MCP client (cubicle mcp)"
MCP_HELP = (
    "Serve the agent's six tools (list_files, read_file, write_file, edit_file, search, run_command) over MCP on "
    "stdin/stdout, all running in one hardened container on REPO: for Claude Code, Claude Desktop or any MCP client.\n\n"
    "The tools, their arguments and their result text are the ones Cubicle's own agent gets; a failed call is an MCP "
    "tool error. Writes go to the session's layer, never to REPO: when the client disconnects the container is "
    "removed and the changes kept for `cubicle changes ID --diff` and `cubicle apply ID` (the session's id is printed "
    "on stderr). The repository's environment (devcontainer or .cubicle/environment.toml) is prepared before the "
    "first call runs.\n\n"
    "Exit codes: 0 the client disconnected · 2 usage/config error · 4 Docker, image or filesystem error, or the "
    "client's connection failed (the session's end is recorded) "
    "· 129 / 130 / 143 stopped by SIGHUP / SIGINT / SIGTERM (the session is ended and kept the same way)."
)


def _note(*parts: str | Text | tuple[str, str]) -> None:
    err_console.print(Text.assemble(("cubicle mcp:", "bold"), " ", *parts))


async def _serve(settings: Settings, repo: Path | RemoteRepo, limits: Limits, asked: Asked, signals: list[int]) -> bool:
    """Start the session, serve it until the client goes or a signal arrives, then end it and keep its changes."""
    import asyncio

    from ..server.sessions import NewSession, open_sessions

    calls = _served_over_stdio(signals)

    async def prepare(runtime: Runtime) -> None:
        await runtime.ensure_image(limits.network)

    try:
        # start: what a killed run or server left is swept; the session's lease is renewed until the end
        async with open_sessions(settings, prepare=prepare, start=True) as sessions:
            new = NewSession(
                repo, TASK, None, limits, prefix="mcp-", environment=asked.environment, network_asked=asked.network
            )
            record = await sessions.create(new, serve=calls)
            live = await sessions.prepared(record.id)  # a remote's files are fetched first (its error raised here)
            record = sessions.get(record.id)
            if live is None:  # cancelled while its files were fetched
                _note("session ", (record.id, "cyan"), " was cancelled before its first call")
                return True
            assert live.task is not None
            where = record.source.short() if record.source else record.repo
            _note("session ", (record.id, "cyan"), " on ", terminal.safe_text(where))
            await asyncio.wait([live.task])  # the served turn records its end whatever stops it
            served = live.served
            assert served is not None  # create served the turn
            _closing_note(record.id, served.calls, record.source is not None)
            return live.task.cancelled() or live.task.result() is None or served.connection_failed
    finally:
        _ignore_signals()


def _closing_note(session_id: str, calls: int, remote: bool) -> None:
    take = (  # a session on a git remote has no checkout to apply to
        ("push them with ", (f"cubicle push {session_id} --branch NAME", "bold"))
        if remote
        else ("apply them with ", (f"cubicle apply {session_id}", "bold"))
    )
    _note(
        f"{calls} tool calls; review the changes with ", (f"cubicle changes {session_id} --diff", "bold"), ", ", *take
    )


def _served_over_stdio(signals: list[int]) -> Serve:
    """The session's calls: the MCP SDK's server over stdin/stdout, until the client goes or a stop signal comes
    (appended to ``signals``); what ended it, for the session's record."""

    async def calls(turn: ServedTurn) -> str:
        import asyncio

        from ..server.mcpserver import serve_stdio  # the MCP SDK takes over a second to import: only here

        serving = asyncio.create_task(serve_stdio(turn, __version__))
        _on_signals(serving, signals)
        try:
            await serving
        except (asyncio.CancelledError, BaseExceptionGroup):
            if not signals:  # a signal stops the SDK's task group, whatever it was doing: that is the end
                raise
        # The handlers stay until everything is ended (see _ignore_signals): MCP clients close stdin, then send
        # SIGTERM if the server has not exited a moment later, and that must not cut the clean-up short.
        return f"stopped by {signal.Signals(signals[0]).name}" if signals else "the MCP client disconnected"

    return calls


def _ignore_signals() -> None:
    """Once all is ended, a stop signal changes nothing: ignore it rather than die of it (the default), with the
    signals blocked while the loop's handlers go so that none arrives in between."""
    import asyncio

    loop = asyncio.get_running_loop()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, MCP_STOP_SIGNALS)
    try:
        for signum in MCP_STOP_SIGNALS:
            loop.remove_signal_handler(signum)
            signal.signal(signum, signal.SIG_IGN)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _on_signals(serving: asyncio.Task[None], signals: list[int]) -> None:
    """SIGTERM, SIGHUP and SIGINT stop serving (once); ending the session after that is not cut short."""
    import asyncio

    loop = asyncio.get_running_loop()

    def stop(signum: int) -> None:
        if not signals:
            signals.append(signum)
            serving.cancel()

    for signum in MCP_STOP_SIGNALS:
        loop.add_signal_handler(signum, stop, signum)


@dataclass(frozen=True)
class McpOptions:
    """What `cubicle mcp` was given, as Typer reads it from these fields."""

    repo: RepoArgument
    ref: RefOption = None
    command_timeout: CommandTimeoutOption = None
    memory: MemoryOption = None
    cpus: CpusOption = None
    disk: DiskOption = None
    inodes: InodesOption = None
    network: NetworkOption = None
    runtime: RuntimeOption = None
    image: ImageOption = None
    setup: SetupOption = None


@app.command(help=MCP_HELP)
@options.command(McpOptions)
def mcp(o: McpOptions) -> None:
    import asyncio

    repo = repo_of(o.repo, o.ref)
    _check_run_args(repo, approve=False, json_events=False)
    settings = load_settings()
    flags = sandbox_flags(o.command_timeout, o.memory, o.cpus, o.disk, o.inodes, o.network, o.runtime)
    limits = _limits(settings, flags)
    request = environment_request(o.image, o.setup)
    signals: list[int] = []
    with _exit_codes(signals):
        failed = asyncio.run(_serve(settings, repo, limits, Asked(request, o.network is not None), signals))
    raise typer.Exit(128 + signals[0] if signals else EXIT_INFRA if failed else EXIT_OK)
