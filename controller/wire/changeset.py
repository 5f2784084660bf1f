"""A session's changes as the API, the client and the review see them: each path with its kind and disposition,
and what an apply, a revert or a conflict reports. The workspace makes them; nothing here reads a layer."""

from __future__ import annotations

import hashlib
import os
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class FileType(StrEnum):
    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    FIFO = "fifo"
    SOCKET = "socket"
    DEVICE = "device"


class Kind(StrEnum):
    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"


class Disposition(StrEnum):
    APPLY = "apply"  # applied by default
    IGNORED = "ignored"  # the checkout's ignore rules at the start, or a tool's in a new directory; applied when asked
    DISCARDED = "discarded"  # under a .git (any case, any depth): never applied
    UNSAFE = "unsafe"  # a device, FIFO, socket, escaping symlink or oversized file: never applied
    ENVIRONMENT = "environment"  # under a path the environment's setup made (a virtualenv, say): never applied
    # the environment's own definition (.devcontainer/, .cubicle/), a path git runs or reads, a CI definition
    # (.github/workflows/, .gitlab-ci.yml, ...): applied only when forced by name; ``reason`` says which
    TRUSTED = "trusted"
    BUILD_INPUT = "build_input"  # in a build context the Dockerfile copies whole: applied only with --build-inputs


HOW_TO_APPLY = {
    Disposition.TRUSTED: "cubicle apply {sid} {path} --force {path}",
    Disposition.IGNORED: "cubicle apply {sid} {path} --include-ignored",
    Disposition.BUILD_INPUT: "cubicle apply {sid} {path} --build-inputs",
}
"""How to apply a held-back change deliberately, by its disposition (``sid`` and ``path`` as shell words); the
others are never applied. What both patches (the review's piped one and the server's ``format=patch``) print."""


class Change(BaseModel):
    """One path the agent changed. ``path`` holds the agent's bytes (non-UTF-8 as surrogates): escape it to display."""

    model_config = ConfigDict(extra="forbid")

    path: str
    kind: Kind
    type: FileType  # what the layer holds there; for a deletion, what the checkout held
    previous: FileType | None = None  # what the checkout held; None when added
    disposition: Disposition = Disposition.APPLY
    reason: str = ""  # why the disposition is not "apply"
    mode: int = 0  # permission bits in the layer, setuid/setgid/sticky included (apply strips them)
    previous_mode: int | None = None  # the checkout's permission bits, when it held an entry of the same type
    size: int = 0
    binary: bool = False
    diff: str | None = None  # bounded unified diff for text files; None for binary or oversized ones
    target: str | None = None  # a symlink's target
    renamed_from: str | None = None  # a deleted path with identical content, when cheaply found
    id: str = Field(
        "",
        description="The change's stable id, made of its real path's bytes (``change_id``): what a client selects "
        "it by (an apply's ``ids``), whatever its name prints as.",
    )

    @model_validator(mode="after")
    def _named(self) -> Change:
        """A change made from its real path gets its id here; a listing read back keeps the id it was sent."""
        if not self.id:
            self.id = change_id(self.path)
        return self


def change_id(path: str) -> str:
    """A change's id: 128 bits of the SHA-256 of its real path's bytes, in hex. Two names that print alike (the
    agent's bytes escaped) have different ids; no agent can find two paths with one id (it would need 2^64 tries),
    and a selection refuses an id that two changes share all the same."""
    return hashlib.sha256(os.fsencode(path)).hexdigest()[:32]


class Changes(list[Change]):
    """What ``scan`` found, sorted by path; ``truncated_at`` is the layer's ``names`` limit when the layer holds
    more entries than that: the walk stopped there, so the list is partial and the layer is never applied.
    ``unlisted`` counts changes the walk found and judged but a bounded listing (``listed``) left out, and
    ``unlisted_applied`` those of them an apply writes (disposition ``apply``)."""

    truncated_at: int | None = None
    unlisted: int = 0
    unlisted_applied: int = 0


class Conflict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    reason: str


class ApplyResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    applied: list[str] = Field([], fail_fast=True)  # paths written (or removed) in the checkout
    conflicts: list[Conflict] = Field([], fail_fast=True)  # when not empty, nothing was written
    skipped: list[Change] = Field([], fail_fast=True)  # discarded, unsafe, and (unless included) ignored changes
    record: int | None = None  # the apply's number, for revert
    more_applied: int = 0  # paths written past those ``applied`` lists (see ``bounded``)
    more_skipped: int = 0  # changes skipped past those ``skipped`` lists
    left: int | None = None  # changes a plain apply would still write after this one (some paths were named)

    def bounded(self, most: int) -> ApplyResult:
        """This result with at most ``most`` paths in each list, the rest counted: what an apply of a whole
        flood of files returns to the controller (the apply record on disk keeps every path)."""
        return self.model_copy(
            update={
                "applied": self.applied[:most],
                "more_applied": self.more_applied + max(0, len(self.applied) - most),
                "skipped": self.skipped[:most],
                "more_skipped": self.more_skipped + max(0, len(self.skipped) - most),
            }
        )


class RevertResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    record: int  # the apply that was (or would have been) reverted
    reverted: list[str] = Field([], fail_fast=True)  # a client reads a hostile answer to its first bad item
    conflicts: list[Conflict] = Field([], fail_fast=True)  # when not empty, nothing was written
    more_reverted: int = 0  # paths restored past those ``reverted`` lists (see ``bounded``)

    def bounded(self, most: int) -> RevertResult:
        """This result with at most ``most`` paths in ``reverted``, the rest counted."""
        more = self.more_reverted + max(0, len(self.reverted) - most)
        return self.model_copy(update={"reverted": self.reverted[:most], "more_reverted": more})


class Checkpoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn: int = Field(description="Rewinding to this number returns the files to the end of that turn.")
    created_at: float
