"""The tools the model sees: each is data (name, prompt-like description, argument model) plus a renderer.

``execute`` is the one place where a tool call becomes a result for the model. An
unknown tool, invalid arguments, a declined approval, a failed operation and a
timeout all come back as ``is_error`` text the model can act on; only a sandbox
that cannot start at all raises.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..sandbox.sandboxes import Sandbox
from ..wire.limits import Limits
from ..wire.protocol import (
    KILL_GRACE_S,
    Call,
    CommandResult,
    EditFile,
    EditFileArgs,
    EditResult,
    Failure,
    ListFiles,
    ListFilesArgs,
    ListResult,
    Outcome,
    OutputFeed,
    ReadFile,
    ReadFileArgs,
    ReadResult,
    RunCommand,
    RunCommandArgs,
    Search,
    SearchArgs,
    SearchResult,
    Stream,
    Strict,
    WriteFile,
    WriteFileArgs,
    WriteResult,
)
from .model import INVALID_INPUT
from .output import truncate_middle

Approver = Callable[[str, dict[str, Any]], Awaitable[bool]]
"""Asked before a tool that changes things runs; False declines the call."""

DEADLINE_MARGIN_S = 10.0


@dataclass(frozen=True)
class Tool:
    """A tool: the toolbox operation it runs, the arguments the model gives it, and how its result reads.

    ``args`` is the model's half of the request's argument model (a run_command's request adds the
    resolved timeout and the output cap), so the schema the model sees is generated from the same
    model the toolbox request is built from.
    """

    request: type[Call]
    args: type[Strict]
    description: str
    read_only: bool
    render: Callable[[Any], str]

    @property
    def name(self) -> str:
        return self.request.op_name()

    def definition(self) -> dict[str, Any]:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        return {"name": self.name, "description": self.description, "input_schema": schema}


@dataclass(frozen=True)
class ToolOutcome:
    """A finished call: ``text`` is the full output (up to the event cap), ``model_text`` what the model gets."""

    text: str
    model_text: str
    is_error: bool
    duration_s: float
    exit_code: int | None = None


# --------------------------------------------------------------------------- renderers


def _render_list(result: ListResult) -> str:
    if not result.entries:
        return "(empty directory)"
    lines = [
        f"{e.type:<7} {e.size if e.type == 'file' else '':>9}  {e.path}{'/' if e.type == 'dir' else ''}"
        for e in result.entries
    ]
    if result.truncated:
        lines.append(f"(listing stopped at {len(result.entries)} entries; list a subdirectory or use a smaller depth)")
    return "\n".join(lines)


def _render_read(result: ReadResult) -> str:
    if result.lines == 0:
        return "(empty file)" if result.size == 0 else "(no lines in that range)"
    text = result.content
    if result.truncated:
        last = result.first_line + result.lines - 1
        text += f"\n(showing lines {result.first_line}-{last}; read on with offset={last + 1})"
    return text


def _render_write(result: WriteResult) -> str:
    return f"Wrote {result.bytes_written} bytes to {result.path}."


def _render_edit(result: EditResult) -> str:
    return f"Edited {result.path}: {result.replacements} replacement{'s' if result.replacements != 1 else ''}."


def _render_search(result: SearchResult) -> str:
    text = result.matches.text or "No matches."
    if result.errors:
        text += f"\n(some paths could not be searched: {result.errors[-500:]})"
    if result.timed_out:
        text += "\n(search timed out; narrow the path or glob)"
    return text


def _stream(name: str, stream: Stream) -> str:
    if not stream.total_bytes:
        return ""
    return f"<{name}>\n{stream.text.rstrip(chr(10))}\n</{name}>\n"


def _render_command(result: CommandResult) -> str:
    head = f"exit code {result.exit_code} after {result.duration_s:.1f}s"
    if result.timed_out:
        head = f"timed out after {result.duration_s:.1f}s; the command and its children were killed (exit code {result.exit_code})"
    if result.cancelled:
        head = f"cancelled after {result.duration_s:.1f}s: the turn was stopped, so the command and its children were killed (exit code {result.exit_code})"
    return head + "\n" + _stream("stdout", result.stdout) + _stream("stderr", result.stderr)


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            ListFiles,
            ListFilesArgs,
            "List files and directories under a path in the repository, with type and size in bytes. "
            "Descends `depth` levels (default 2); .git is shown but not entered. At most 1000 entries.",
            read_only=True,
            render=_render_list,
        ),
        Tool(
            ReadFile,
            ReadFileArgs,
            "Read a text file. Lines come back numbered (`number<TAB>text`); the numbers are not part of the file. "
            "Shows up to `limit` lines from line `offset`; long lines are cut. Use offset to page through big files.",
            read_only=True,
            render=_render_read,
        ),
        Tool(
            WriteFile,
            WriteFileArgs,
            "Create or overwrite a file with the complete `content`; parent directories are created. "
            "For a small change to an existing file prefer edit_file.",
            read_only=False,
            render=_render_write,
        ),
        Tool(
            EditFile,
            EditFileArgs,
            "Replace the exact text `old_string` with `new_string` in a file. old_string must match the file exactly, "
            "whitespace included, and be unique unless replace_all is true; include a few surrounding lines to make it unique. "
            "Read the file first.",
            read_only=False,
            render=_render_edit,
        ),
        Tool(
            Search,
            SearchArgs,
            "Search file contents with ripgrep (regular expression). Returns `path:line:text` matches, at most 100 per file; "
            "respects .gitignore. Narrow with path and glob.",
            read_only=True,
            render=_render_search,
        ),
        Tool(
            RunCommand,
            RunCommandArgs,
            "Run a shell command with `bash -lc` in the repository root inside an isolated Linux container and return "
            "exit code, stdout and stderr (long output is cut in the middle). The command is killed at its timeout. "
            "Background processes are stopped when the command returns, so start a server and its client in the same "
            "command. There is usually no network.",
            read_only=False,
            render=_render_command,
        ),
    )
}


def definitions() -> list[dict[str, Any]]:
    return [tool.definition() for tool in TOOLS.values()]


def is_read_only(name: str) -> bool:
    tool = TOOLS.get(name)
    return tool is not None and tool.read_only


# --------------------------------------------------------------------------- execution


def _invalid_arguments(name: str, err: ValidationError) -> str:
    problems = []
    for item in err.errors():
        field = ".".join(str(p) for p in item["loc"]) or "(arguments)"
        if item["type"] == "extra_forbidden":
            problems.append(f"{field}: not an argument of {name}")
        else:
            problems.append(f"{field}: {item['msg']}")
    allowed = ", ".join(TOOLS[name].args.model_fields)
    return f"Invalid arguments for {name}: " + "; ".join(problems) + f". Its arguments are: {allowed}."


def _request(tool: Tool, args: Strict, limits: Limits, live: bool) -> tuple[Call, float]:
    """The toolbox request for the model's ``args`` under ``limits`` (a command's output sent as it runs if
    ``live``), and the controller's deadline for it."""
    added: dict[str, Any] = {}
    deadline = float(limits.op_timeout_s)
    if isinstance(args, RunCommandArgs):
        timeout = min(args.timeout_s or limits.default_command_timeout_s, limits.command_timeout_s)
        live_output = limits.live_output_bytes if live else 0
        added = {"timeout_s": timeout, "max_output": limits.event_output_chars, "live_output": live_output}
        deadline = timeout + KILL_GRACE_S + DEADLINE_MARGIN_S
    elif isinstance(args, SearchArgs):
        added = {"max_output": limits.event_output_chars}
    return tool.request.model_validate({"args": {**args.model_dump(), **added}}), deadline


def _outcome(text: str, is_error: bool, limits: Limits, started: float, exit_code: int | None = None) -> ToolOutcome:
    full = truncate_middle(text, limits.event_output_chars)
    model_text = truncate_middle(full, limits.model_output_chars)
    return ToolOutcome(full, model_text, is_error, time.monotonic() - started, exit_code)


async def execute(
    name: str,
    raw_input: Any,
    sandbox: Sandbox,
    limits: Limits,
    approver: Approver | None = None,
    on_output: OutputFeed | None = None,
) -> ToolOutcome:
    """Run one tool call; every problem becomes an ``is_error`` outcome with text for the model. A command's output
    goes to ``on_output`` as it comes (when the session's limits show any live)."""
    started = time.monotonic()
    tool = TOOLS.get(name)
    if tool is None:
        return _outcome(f"Unknown tool {name!r}. The tools are: {', '.join(TOOLS)}.", True, limits, started)
    args = _arguments(name, tool, raw_input)
    if isinstance(args, str):
        return _outcome(args, True, limits, started)
    if approver is not None and not tool.read_only:
        if not await approver(name, args.model_dump()):
            return _outcome(
                f"The user declined this {name} call. Do not retry it unchanged; ask the user how to proceed or try another way.",
                True,
                limits,
                started,
            )
        started = time.monotonic()  # the duration is the call's, not the time the user took to answer
    live = on_output is not None and limits.live_output_bytes > 0 and isinstance(args, RunCommandArgs)
    request, deadline = _request(tool, args, limits, live)
    result = await sandbox.call(request, deadline, on_output if live else None)
    return _answered(tool, result, limits, started)


def _answered(tool: Tool, result: Outcome, limits: Limits, started: float) -> ToolOutcome:
    """The sandbox's answer as the call's outcome: a failure's message, or the result rendered for the model
    (an error when a command timed out or was cancelled)."""
    if isinstance(result, Failure):
        return _outcome(result.message, True, limits, started)
    if isinstance(result, CommandResult):
        failed = result.timed_out or result.cancelled
        return _outcome(tool.render(result), failed, limits, started, result.exit_code)
    return _outcome(tool.render(result), False, limits, started)


def _arguments(name: str, tool: Tool, raw_input: Any) -> Strict | str:
    """The call's arguments, or the text that tells the model why its input is not valid ones."""
    if isinstance(raw_input, dict) and INVALID_INPUT in raw_input:
        return f"The input of this {name} call could not be read ({raw_input[INVALID_INPUT]}). Send the call again with complete, valid JSON arguments."
    try:
        return tool.args.model_validate(raw_input if isinstance(raw_input, dict) else {"": raw_input})
    except ValidationError as err:
        return _invalid_arguments(name, err)
