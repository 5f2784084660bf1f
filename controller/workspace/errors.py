"""The workspace layer's exceptions, under Cubicle's one root.

    CubicleError
    └── WorkspaceError                       the layer cannot do what was asked
        ├── UnsafePathError(PermissionError) a path walks through a symlink, a non-directory or ``..``
        ├── LayerMissingError(LookupError)   no layer (or checkpoint, or apply) with that name
        ├── LayerInUseError                  an operation that rewrites the layer needs the sandbox stopped
        ├── RepoChangedError                 the repository path no longer leads where the session began
        └── TooManyEntriesError              the layer holds more names than the session's ``names`` limit

Conflicts are not errors: ``apply`` and ``revert`` return them as values, because the
person reviewing decides what to do about each path.
"""

from __future__ import annotations

from ..errors import CubicleError, EntryLimitError


class WorkspaceError(CubicleError):
    """The workspace layer cannot do what was asked."""


class UnsafePathError(WorkspaceError, PermissionError):
    """A path would leave its root or pass through a symlink; nothing was written through it."""

    hint = "The path is reported and skipped; nothing outside the checkout was touched."


class LayerMissingError(WorkspaceError, LookupError):
    """The session's layer, checkpoint or apply record does not exist."""


class LayerInUseError(WorkspaceError):
    """The overlay is still mounted, so its upper directory must not be rewritten."""

    hint = "Stop the session's sandbox (the volume is unmounted when its last container stops), then retry."


class RepoChangedError(WorkspaceError):
    """The repository path was moved, replaced or symlinked since the session began."""

    hint = "Start a new session on the repository's real path; this one's changes stay reviewable in its layer."


class TooManyEntriesError(WorkspaceError):
    """The layer holds more names than the session may create: no checkpoint, apply or patch of it is made."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(
            f"The workspace holds more than {limit:,} entries (files, directories and links, each hard link counted "
            "by its name), the session's limit (names), or a directory deeper than 256 levels: it is neither "
            "checkpointed nor applied."
        )

    def __reduce__(self) -> tuple[type[TooManyEntriesError], tuple[int]]:
        return type(self), (self.limit,)  # raised in a walk's child process, raised again here

    hint = EntryLimitError.hint
