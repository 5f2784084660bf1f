"""The wire between the controller and the toolbox, as pydantic models.

A request is ``{"id", "op", "args"}``; a response is ``{"id", "ok", "result" | "error"}``.
Every model rejects unknown keys, so a toolbox and a controller that drifted apart fail
loudly instead of silently dropping fields. The argument models double as the tools'
input schemas, so what the model is told and what is validated can never disagree.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Op = Literal["list_files", "read_file", "write_file", "edit_file", "search", "run_command", "ping", "cancel"]

MAX_PATH = 4096
MAX_CONTENT = 10 * 1024 * 1024
MAX_COMMAND = 256 * 1024


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


ARGS: dict[str, type[Strict]] = {
    "list_files": ListFilesArgs,
    "read_file": ReadFileArgs,
    "write_file": WriteFileArgs,
    "edit_file": EditFileArgs,
    "search": SearchArgs,
    "run_command": RunCommandArgs,
}


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


class CancelArgs(Strict):
    """Stop the command started by request ``id`` now; that request then answers with what it captured."""

    id: int


class PingResult(Strict):
    pid: int
    uid: int


class CancelResult(Strict):
    cancelled: bool = Field(description="False when no command of that request was running any more.")


RESULTS: dict[str, type[Strict]] = {
    "list_files": ListResult,
    "read_file": ReadResult,
    "write_file": WriteResult,
    "edit_file": EditResult,
    "search": SearchResult,
    "run_command": CommandResult,
    "ping": PingResult,
    "cancel": CancelResult,
}


# --------------------------------------------------------------------------- envelope


class Request(Strict):
    id: int
    op: Op
    args: dict[str, Any]


class Failure(Strict):
    """A failed operation: ``kind`` is stable, ``message`` is written for the model."""

    kind: str
    message: str


class Response(Strict):
    id: int | None
    ok: bool
    result: dict[str, Any] | None = None
    error: Failure | None = None


Outcome = Strict | Failure
"""What a sandbox call returns: the op's result model, or a Failure."""
