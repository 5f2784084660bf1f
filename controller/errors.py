"""The exception tree. Tool failures are values for the model; only these raise.

    CubicleError
    ├── ConfigError(ValueError)            bad settings, flags or missing API key
    ├── AuthError(PermissionError)         the API refused the bearer token (a client's 401)
    ├── InvalidRequestError(ValueError)    the API refused a request's body or query (a client's 422 or 413)
    │   └── AmbiguousNameError              a name given reads as more than one change (a real and a printed one, look-alikes)
    ├── UnreachableError(ConnectionError)  no Cubicle API answers at the URL (a client's)
    ├── AnswerTooLargeError                a server's answer, or one of its events, past what the client reads
    ├── MalformedAnswerError               a server's answer, or one of its events, that is not what the API sends
    ├── AnswerTooSlowError(TimeoutError)   a server's answer, or one of its events, slower than the client's deadlines
    ├── NotFoundError(LookupError)         no such session
    ├── ConflictError                      a turn is already running
    │   ├── LeaseLostError                  another controller took the session over (its lease had expired)
    │   └── ApplyConflictError              the checkout changed under paths an apply or revert would write
    ├── CapacityError                      too many sessions at once
    ├── RepoError(ValueError)              a repo path that is malformed or does not exist
    │   ├── DefinitionError                 the repo's environment definition is invalid or unsafe
    │   └── RemoteURLError                  a git remote URL Cubicle never takes (scheme, spelling), or no such host
    ├── ForbiddenRepoError(PermissionError) a repo outside the allowed roots, or a system path
    │   ├── ImageNotAllowedError            an image the server does not allow, or a build the repo does not ask
    │   └── RemoteRefusedError              a git remote outside CUBICLE_GIT_REMOTES, or at a private address
    ├── RefusedError                       the API's guards turned a request away (401, 403) before any route
    ├── ModelError                         the model API failed after retries
    │   └── ContextOverflowError            the prompt is larger than the model's context window
    ├── StoreError                         the session database cannot be written
    │   ├── DatabaseUnavailableError        the PostgreSQL server does not answer (reconnected at the next call)
    │   └── QuotaFullError                  the session's disk quota is used up
    ├── SandboxError(RuntimeError)         Docker or the toolbox failed
    │   ├── DockerUnavailableError          no engine answers
    │   ├── ImageMissingError(LookupError)  the sandbox image (or an environment's base image) is not present
    │   │   └── ImagePullError               an environment's image could not be pulled (unknown, unreachable, refused)
    │   ├── SetupError                      the environment could not be prepared; its output's last lines say why
    │   │   └── EnvironmentBuildError        an environment image did not build
    │   ├── DiskError                       a layer's own filesystem (its disk quota) could not be made or mounted
    │   └── ToolboxGoneError                the toolbox stopped answering; the sandbox restarts
    └── WorkspaceError                     the workspace layer cannot do what was asked
        ├── UnsafePathError(PermissionError) a path walks through a symlink, a non-directory or ``..``
        ├── LayerMissingError(LookupError)  no layer (or checkpoint, or apply) with that name
        ├── LayerInUseError                 an operation that rewrites the layer needs the sandbox stopped
        ├── RepoChangedError                the repository path no longer leads where the session began
        ├── TooManyEntriesError             the layer holds more names than the session's ``names`` limit
        ├── ApplyTooLargeError              an apply would write more than its bounds allow
        ├── PatchTooLargeError              a session's patch would be larger than a patch may be
        ├── WalkMemoryError                 a walk of a layer needed more memory than a walk may have
        │   └── WalkTimeoutError             a walk of a layer took longer than a walk may
        └── GitError                        a git command on a controller-made repository failed (its words, redacted)
            ├── GitRemoteError(ConnectionError) a remote unreachable, too slow, redirecting, or without the repository
            ├── GitAuthError(PermissionError)   a remote refused the credentials (the host is named, never a secret)
            ├── GitRefError(LookupError)        no branch, tag or commit of that name in the mirror
            ├── GitTooLargeError                a fetch or a tree past its size bound (the size is named)
            ├── GitTreeError                    a commit's tree holds a name that is unsafe on this host
            └── GitPushError                    a session's changes could not be pushed as a branch (nothing lost)
                ├── GitPushRequestError(ValueError) a branch name or author refused before anything was sent
                └── GitPushRejectedError         the remote refused the branch: it exists, moved, or a rule declined

Each class carries ``hint``: what the person reading the error should do next. Conflicts of an apply or
revert are values, not errors: the person reviewing decides what to do about each path, which
``ApplyConflictError`` carries to the API and the client.
"""

from __future__ import annotations

from typing import Any


class CubicleError(Exception):
    """Root of every error Cubicle raises on purpose."""

    hint: str = ""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base} {self.hint}".strip() if self.hint else base


class ConfigError(CubicleError, ValueError):
    """Settings, flags or environment are wrong or missing."""


class AuthError(CubicleError, PermissionError):
    """The API answered 401: the bearer token is missing or wrong."""

    hint = "Set CUBICLE_API_TOKEN (or pass token=) to the server's token."


class InvalidRequestError(CubicleError, ValueError):
    """The API refused the request as invalid (422, or 413 for a body too large); ``errors`` has its details."""

    def __init__(self, message: str, errors: list[dict[str, object]] | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.errors = errors or []


class AmbiguousNameError(InvalidRequestError):
    """A given name reads as more than one change (a real name and another's printed one, or two names that look
    alike: ``wire.lookalike``): nothing is done."""

    hint = (
        "Select the one you mean by its id (`cubicle apply ID --id CHANGE_ID`, the API's `ids`); "
        "`cubicle changes ID --json` lists each change's id."
    )


class UnreachableError(CubicleError, ConnectionError):
    """No Cubicle API answers at the client's URL (refused, unresolvable, or the connection keeps dropping)."""

    hint = "Check the URL and that `cubicle serve` runs there."


class AnswerTooLargeError(CubicleError):
    """A server sent an answer, or an event, larger than the client reads (``controller.answers``), or compressed."""

    hint = "Check that the URL is a Cubicle server you trust, reached over https (a plain http path can be tampered)."


class MalformedAnswerError(CubicleError):
    """A server sent an answer, or an event, that is not JSON or not the API's model of it (``controller.answers``)."""

    hint = AnswerTooLargeError.hint


class AnswerTooSlowError(CubicleError, TimeoutError):
    """A server sent an answer, or one event of its stream, too slowly to be whole within the client's deadline
    (``controller.answers.Deadlines``): a drip of a byte at a time would otherwise hold the client for ever."""

    hint = AnswerTooLargeError.hint


class NotFoundError(CubicleError, LookupError):
    """A session or resource does not exist."""


class ConflictError(CubicleError):
    """The request conflicts with the session's state (a turn is running)."""


class LeaseLostError(ConflictError):
    """This controller's lease on a session ended (it was paused, partitioned or slow) and another took it over:
    it may write nothing more of that session."""

    hint = "The session continues on the controller that holds it now; follow it, or send a follow-up, there."


class ApplyConflictError(ConflictError):
    """The checkout changed under paths the apply (or revert) would write; nothing was written. ``conflicts`` are
    the paths, each a ``wire.changeset.Conflict`` (a model this bottom layer does not import)."""

    def __init__(self, message: str, conflicts: list[Any]) -> None:
        super().__init__(message, hint="Review them, then force the paths to overwrite, or leave them.")
        self.conflicts = conflicts


class CapacityError(CubicleError):
    """The controller is running as many sessions as it may."""


class RepoError(CubicleError, ValueError):
    """The repository path is malformed, missing or not a directory."""


class DefinitionError(RepoError):
    """A repository's environment definition cannot be used: bad syntax, a wrong type, a path out of the repo."""

    hint = "Fix the file named above (see docs/guides/environments.md), or run `cubicle env show` to check it."


class RemoteURLError(RepoError):
    """A git remote URL that no setting makes acceptable: a scheme other than http(s), credentials in it, a spelling
    that parsers read differently (dot-segments, encoded slashes, numeric hosts), or a host that does not resolve.
    The message shows the URL without its credentials."""

    hint = (
        "Write it as https://HOST[:PORT]/PATH, with no query or fragment; credentials go in the server's "
        "credentials file (CUBICLE_GIT_CREDENTIALS), never in the URL."
    )


class ForbiddenRepoError(CubicleError, PermissionError):
    """The repository path is not one a session may use."""


class ImageNotAllowedError(ForbiddenRepoError):
    """A request named an image this server does not allow, or asked to build something the repository does not."""

    hint = "Use the repository's own environment, or ask the operator to add the image to CUBICLE_ALLOWED_IMAGES."


class RemoteRefusedError(ForbiddenRepoError):
    """A well-formed git remote this controller does not fetch: it matches no pattern of ``CUBICLE_GIT_REMOTES``, or
    its host resolves to a loopback, private or otherwise special address that no pattern names exactly."""

    hint = (
        "Ask the operator to add a pattern for it to CUBICLE_GIT_REMOTES; a host at a private address is reached "
        "only when a pattern names that host exactly (no *)."
    )


class RefusedError(CubicleError):
    """The API's guards turned a request away before any route: ``status_code`` (401 without credentials, 403 for
    a foreign origin) and a ``detail`` the caller can act on, with ``headers`` to answer with."""

    def __init__(self, status_code: int, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail
        self.headers = headers or {}


class ModelError(CubicleError):
    """The model API failed and retries did not help."""


class ContextOverflowError(ModelError):
    """The prompt does not fit the model's context window, even after compacting the context."""

    hint = "Lower CUBICLE_CONTEXT__WINDOW to the model's real window, or start a new session for the next step."


class StoreError(CubicleError):
    """The session database cannot be written (disk full, I/O error)."""

    hint = "Free space where CUBICLE_DATA_DIR lives; sessions that were running are recovered as interrupted."


class DatabaseUnavailableError(StoreError):
    """The PostgreSQL server of ``CUBICLE_DATABASE_URL`` does not answer, or dropped the connection."""

    hint = (
        "Check that the database server is up and reachable; Cubicle reconnects at the next request. Sessions "
        "whose lease could not be renewed meanwhile are taken over as interrupted."
    )


class QuotaFullError(StoreError):
    """The session's disk quota is used up, so the layer cannot take what the operation writes there."""

    def __init__(self, session_id: str, mb: int | None = None, inodes: int | None = None) -> None:
        size = f" ({mb} MiB, {inodes:,} files)" if mb is not None and inodes is not None else ""
        super().__init__(
            f"The disk quota of session {session_id}{size} is used up: its files, checkpoints and the backups an "
            "apply keeps all count. Nothing was written to the checkout.",
            hint=f"Rewind it to an earlier checkpoint (`cubicle rewind {session_id} N`), ask the agent in a follow-up "
            "to delete what it does not need, or discard the session.",
        )


class SandboxError(CubicleError, RuntimeError):
    """The container or the toolbox inside it failed."""


class DockerUnavailableError(SandboxError):
    """No Docker engine answers."""

    hint = "Start the Docker engine (e.g. `sudo systemctl start docker` or `dockerd &`) and check `docker info`."


class ImageMissingError(SandboxError, LookupError):
    """The sandbox image is not present on the engine."""


class ImagePullError(ImageMissingError):
    """The image an environment names is not on the engine and pulling it failed; the message names the registry."""


class SetupError(SandboxError):
    """The environment could not be prepared: its image did not build, or its setup command failed."""

    hint = "Fix the environment's definition (.devcontainer/ or .cubicle/) or the setup command, then start again."


class EnvironmentBuildError(SetupError):
    """Building an environment image failed: the repository's Dockerfile, or the toolbox layer on top of it."""

    hint = "Fix the Dockerfile or the image it names, then run `cubicle env build` to try again."


class DiskError(SandboxError):
    """A workspace layer's own filesystem (its disk quota) could not be made, mounted or unmounted."""

    hint = (
        "Disk quotas need loop devices and either root or the engine's privileged containers; "
        "CUBICLE_DISK_QUOTA=off runs sessions without one (the agent can then fill the host's disk)."
    )


class ToolboxGoneError(SandboxError):
    """The toolbox stopped answering or its stream ended; the next call gets a fresh container."""


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
    """The layer holds more names than the session may create (its ``names`` limit), or a directory deeper than a
    walk reads: a turn that finds it so ends (``too_many_entries``), and no checkpoint, apply or patch of it is made."""

    hint = (
        "Rewind the session to an earlier checkpoint or discard it; a follow-up may delete what is not needed. "
        "Its changes are listed up to the limit, but never applied."
    )

    def __init__(self, limit: int, message: str | None = None) -> None:
        self.limit = limit
        super().__init__(
            message
            or f"The workspace holds more than {limit:,} entries (files, directories and links, each hard link "
            "counted by its name), the session's limit (names), or a directory deeper than 256 levels: it is neither "
            "checkpointed nor applied."
        )

    def __reduce__(self) -> tuple[type[TooManyEntriesError], tuple[int, str]]:
        return type(self), (self.limit, self.args[0])  # raised in a walk's child process, raised again here


class ApplyTooLargeError(WorkspaceError):
    """An apply would write more than its bounds allow (``what`` says which: ``ENTRIES`` counts entries, the
    others bytes)."""

    ENTRIES = "new entries in the checkout"

    def __init__(self, what: str, total: int, limit: int) -> None:
        super().__init__(f"The apply would need {total:,} {what}, more than the {max(limit, 0):,} it may.")
        self.what = what
        self.total = total
        self.limit = limit

    def __reduce__(self) -> tuple[type[ApplyTooLargeError], tuple[str, int, int]]:
        return type(self), (self.what, self.total, self.limit)  # raised in a walk's child process, raised again here


class PatchTooLargeError(WorkspaceError):
    """A session's patch (``changes?format=patch``) would be larger than a patch may be; none is made."""

    hint = "Apply the changes with `cubicle apply ID` (a few paths at a time: `cubicle apply ID PATH`) instead."

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"The patch would hold more than {max(limit, 0):,} bytes (at least {size:,}), more than a patch may."
        )
        self.size = size
        self.limit = limit

    def __reduce__(self) -> tuple[type[PatchTooLargeError], tuple[int, int]]:
        return type(self), (self.size, self.limit)  # raised in a walk's child process, raised again here


class WalkMemoryError(WorkspaceError):
    """A walk of a layer needed more memory than a walk may have; the controller and other sessions are unharmed."""

    hint = (
        "The layer holds more than a walk can read within its memory (CUBICLE_WALK_MEMORY_MB): rewind the session "
        "to an earlier checkpoint or discard it."
    )


class WalkTimeoutError(WalkMemoryError):
    """A walk of a layer took longer than a walk may (CUBICLE_WALK_TIMEOUT_S); it was stopped."""

    hint = "Rewind the session to an earlier checkpoint or discard it; a layer this costly to read is never applied."


class GitError(WorkspaceError):
    """A git command the controller ran on one of its own repositories (a mirror, a tree's ``.git``) failed; the
    message carries the last of what git said, with every credential stripped (``workspace.gitrun.redact``)."""

    hint = "Check the repository URL and the ref; the controller's mirror is left as it was before the command."


class GitRemoteError(GitError, ConnectionError):
    """A remote did not answer within the connect timeout, took longer than a fetch may, redirected, or has no
    repository at that URL; nothing was left behind by a first fetch."""

    hint = "Check that the URL is right and its host reachable from the controller, then start the session again."


class GitAuthError(GitError, PermissionError):
    """A remote refused the credentials it was given (or asked for some and none matched); the message names the
    host, never the credential, and the credentials file was not changed."""

    hint = "Check the credentials file's line for that host (its user and token, its port), then try again."


class GitRefError(GitError, LookupError):
    """The ref asked for is neither a branch, a tag nor a commit of the mirror (after a fetch)."""

    hint = "Name a branch, a tag or a commit id the remote has (`git ls-remote URL` lists its branches and tags)."


class GitTooLargeError(GitError):
    """A fetch wrote more than it may under the mirror (it was stopped), or a commit's tree holds more than a
    checkout may; the message names the size and the bound."""

    hint = "Ask the operator to raise the bound, or use a smaller repository."


class GitTreeError(GitError):
    """A commit's tree holds a name git accepted but this host must not write (``..``, ``.git`` in any case, an
    absolute path, a NUL): no checkout of it is made."""

    hint = "Choose a commit without that path; nothing of this commit was written."


class GitPushError(GitError):
    """A session's changes could not be pushed as a branch (``workspace.gitpush``); the session's layer is as it
    was, so the push can be tried again, or the changes taken as a patch."""

    hint = "The session's changes are kept; fix what the message names and push again, or take them as a patch."


class GitPushRequestError(GitPushError, ValueError):
    """A push asked for a branch name the controller refuses (malformed for git, outside the allowed prefix, with
    a control character) or a commit author or message it will not write; nothing was sent to the remote."""

    hint = "Name a branch under the allowed prefix (cubicle/ unless the operator set another), made of plain words."


class GitPushRejectedError(GitPushError):
    """The remote refused the branch (``reason``): ``exists`` (a push never overwrites a branch unless asked),
    ``moved`` (it changed since the mirror fetched it, so a lease did not hold) or ``refused`` (a hook, a protected
    branch, a rule of the server's). The message names the host and the branch, never a credential."""

    REASONS = ("exists", "moved", "refused")

    def __init__(self, message: str, reason: str, host: str, branch: str) -> None:
        super().__init__(message, hint=_PUSH_HINTS.get(reason))
        self.reason = reason
        self.host = host
        self.branch = branch

    def __reduce__(self) -> tuple[type[GitPushRejectedError], tuple[str, str, str, str]]:
        return type(self), (self.args[0], self.reason, self.host, self.branch)


_PUSH_HINTS = {
    "exists": "Push to a new branch name, or ask to replace this one (force with lease) if it is the session's own.",
    "moved": "Someone pushed to the branch meanwhile: look at what they pushed before replacing it.",
    "refused": "The remote's own rules declined the branch (protected, or a hook's check): push another name.",
}
