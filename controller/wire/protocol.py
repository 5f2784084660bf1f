"""The wire between the controller and the toolbox, typed in both directions.

A request is ``{"id", "op", "args"}``: one model per operation, ``op`` its discriminator,
``args`` its argument model and ``result`` (a class attribute) the model its answer must
fit. ``REQUESTS`` is the one table of operations; everything else (the op names, the tools'
schemas, how answers are validated) is derived from it. A response is
``{"id", "ok", "result" | "error"}``; a command asked for live output sends ``{"id", "output"}`` lines (``Progress``)
before it.

Every model rejects unknown keys, so a toolbox and a controller that drifted apart fail
loudly instead of silently dropping fields. The tools' argument models double as their
input schemas, so what the model is told and what is validated can never disagree; the
fields only the toolbox sees (the resolved timeout, the output cap) live in subclasses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

MAX_PATH = 4096
MAX_CONTENT = 10 * 1024 * 1024
MAX_COMMAND = 256 * 1024
DEFAULT_COMMAND_TIMEOUT_S = 60
"""What the toolbox falls back to when a run_command names no timeout (the controller always names one)."""
DEFAULT_COMMAND_OUTPUT = 1 << 20
"""Bytes of each of stdout and stderr a command keeps when the request names no cap."""
DEFAULT_SEARCH_OUTPUT = 64 * 1024
"""Bytes of matches a search keeps when the request names no cap."""
KILL_GRACE_S = 2.0
"""Between the toolbox's SIGTERM and SIGKILL of a command that outlived its timeout."""


class Strict(BaseModel):
    """Base of every wire model: unknown keys are an error."""

    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- arguments


class ListFilesArgs(Strict):
    path: str = Field(".", max_length=MAX_PATH, description="Directory to list, relative to the repository root.")
    depth: int = Field(2, ge=1, le=10, description="How many levels to descend (1 = only the directory itself).")


class ReadFileArgs(Strict):
    path: str = Field(max_length=MAX_PATH, description="File to read, relative to the repository root.")
    offset: int = Field(1, ge=1, description="First line to show (1-based).")
    limit: int = Field(2000, ge=1, le=5000, description="Number of lines to show.")


class WriteFileArgs(Strict):
    path: str = Field(
        max_length=MAX_PATH, description="File to create or overwrite; missing parent directories are created."
    )
    content: str = Field(max_length=MAX_CONTENT, description="The complete new content of the file.")


class EditFileArgs(Strict):
    path: str = Field(max_length=MAX_PATH, description="File to edit.")
    old_string: str = Field(
        max_length=MAX_CONTENT,
        description="Exact text to replace, including whitespace; must be unique unless replace_all.",
    )
    new_string: str = Field(max_length=MAX_CONTENT, description="Text to put in its place.")
    replace_all: bool = Field(False, description="Replace every occurrence instead of requiring exactly one.")


class SearchArgs(Strict):
    pattern: str = Field(min_length=1, max_length=4096, description="Regular expression (ripgrep syntax).")
    path: str = Field(".", max_length=MAX_PATH, description="File or directory to search in.")
    glob: str | None = Field(None, max_length=1024, description="Only search files matching this glob, e.g. '*.py'.")


class RunCommandArgs(Strict):
    command: str = Field(
        min_length=1, max_length=MAX_COMMAND, description="Shell command, run with `bash -lc` in the repository root."
    )
    timeout_s: int | None = Field(
        None, ge=1, le=86400, description="Seconds before the command is killed; capped by the session's limit."
    )


class SearchOptions(SearchArgs):
    """A search as the toolbox gets it: the model's arguments plus the output cap."""

    max_output: int = Field(DEFAULT_SEARCH_OUTPUT, ge=1, le=1 << 30)


class RunCommandOptions(RunCommandArgs):
    """A command as the toolbox gets it: the timeout resolved against the session's limits, and the output cap."""

    timeout_s: int = Field(DEFAULT_COMMAND_TIMEOUT_S, ge=1, le=86400)
    max_output: int = Field(DEFAULT_COMMAND_OUTPUT, ge=1, le=1 << 30)
    live_output: int = Field(
        0, ge=0, le=1 << 30, description="Bytes of output sent while the command runs (``Progress`` lines); 0: none."
    )


class PingArgs(Strict):
    pass


class CancelArgs(Strict):
    """Stop the command started by request ``id`` now; that request then answers with what it captured."""

    id: int


# --------------------------------------------------------------------------- results


class Entry(Strict):
    path: str
    type: Literal["dir", "file", "symlink", "other", "unknown"]
    size: int


class ListResult(Strict):
    entries: list[Entry]
    truncated: bool


class ReadResult(Strict):
    content: str
    first_line: int
    lines: int
    truncated: bool
    size: int


class WriteResult(Strict):
    path: str
    bytes_written: int


class EditResult(Strict):
    path: str
    replacements: int


class Stream(Strict):
    """A bounded capture: ``text`` holds a head and tail of ``total_bytes`` when ``truncated``."""

    text: str
    total_bytes: int
    truncated: bool


class SearchResult(Strict):
    matches: Stream
    exit_code: int
    timed_out: bool
    errors: str = ""


class CommandResult(Strict):
    exit_code: int
    stdout: Stream
    stderr: Stream
    timed_out: bool
    duration_s: float
    cancelled: bool = False


class PingResult(Strict):
    pid: int
    uid: int


class CancelResult(Strict):
    cancelled: bool = Field(description="False when no command of that request was running any more.")


# --------------------------------------------------------------------------- requests


class Call(Strict):
    """One request to the toolbox. The channel sets ``id``; subclasses fix ``op``, ``args`` and ``result``."""

    id: int = 0
    op: str
    args: Strict
    result: ClassVar[type[Strict]]
    interruptible: ClassVar[bool] = False
    """A cancelled caller asks the toolbox to stop it and still gets its (partial) answer."""

    @classmethod
    def op_name(cls) -> str:
        default = cls.model_fields["op"].default
        assert isinstance(default, str), f"{cls.__name__} has no fixed op"
        return default


class ListFiles(Call):
    op: Literal["list_files"] = "list_files"
    args: ListFilesArgs
    result = ListResult


class ReadFile(Call):
    op: Literal["read_file"] = "read_file"
    args: ReadFileArgs
    result = ReadResult


class WriteFile(Call):
    op: Literal["write_file"] = "write_file"
    args: WriteFileArgs
    result = WriteResult


class EditFile(Call):
    op: Literal["edit_file"] = "edit_file"
    args: EditFileArgs
    result = EditResult


class Search(Call):
    op: Literal["search"] = "search"
    args: SearchOptions
    result = SearchResult


class RunCommand(Call):
    op: Literal["run_command"] = "run_command"
    args: RunCommandOptions
    result = CommandResult
    interruptible = True


class Ping(Call):
    op: Literal["ping"] = "ping"
    args: PingArgs = Field(default_factory=PingArgs)
    result = PingResult


class Cancel(Call):
    op: Literal["cancel"] = "cancel"
    args: CancelArgs
    result = CancelResult


REQUESTS: tuple[type[Call], ...] = (ListFiles, ReadFile, WriteFile, EditFile, Search, RunCommand, Ping, Cancel)
"""Every operation the toolbox answers, named once."""
OPS: dict[str, type[Call]] = {request.op_name(): request for request in REQUESTS}
_CALL_ADAPTER: TypeAdapter[Call] = TypeAdapter(
    Annotated[Union[REQUESTS], Field(discriminator="op")]  # type: ignore[arg-type]  # noqa: UP007 - built from the table
)
"""Parses any request by its ``op``: the union of REQUESTS, so the table stays the only list."""


def call(op: str, **args: Any) -> Call:
    """The typed request for ``op`` with ``args``; raises pydantic's ValidationError for a bad op or argument."""
    return _CALL_ADAPTER.validate_python({"op": op, "args": args})


# --------------------------------------------------------------------------- envelope


class Failure(Strict):
    """A failed operation: ``kind`` is stable, ``message`` is written for the model."""

    kind: str
    message: str


class Response(Strict):
    id: int | None
    ok: bool
    result: dict[str, Any] | None = None
    error: Failure | None = None


class Piece(Strict):
    """Output a running command printed since the last piece: stdout and stderr as they came, never a character
    split; ``truncated`` on the last piece when the request's ``live_output`` ran out."""

    text: str
    truncated: bool = False


OutputFeed = Callable[[str, bool], None]
"""Takes a running command's output as it comes (``Progress``): its text, and whether it was cut off there."""


class Progress(Strict):
    """A line before a request's answer: a piece of its command's output (``{"id", "output"}``)."""

    id: int
    output: Piece


Outcome = Strict | Failure
"""What a sandbox call returns: the op's result model, or a Failure."""
