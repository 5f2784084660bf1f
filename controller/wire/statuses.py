"""The one table between errors and HTTP statuses: the server answers each error with its status, and the
client raises, for each status, the error it reads it as."""

from __future__ import annotations

from ..errors import (
    CapacityError,
    ConfigError,
    ConflictError,
    CubicleError,
    DatabaseUnavailableError,
    ForbiddenRepoError,
    GitError,
    GitPushRejectedError,
    GitPushRequestError,
    GitRefError,
    GitTooLargeError,
    GitTreeError,
    InvalidRequestError,
    ModelError,
    NotFoundError,
    PatchTooLargeError,
    RepoChangedError,
    RepoError,
    SandboxError,
    StoreError,
    TooManyEntriesError,
)

STATUSES: tuple[tuple[type[CubicleError], int, bool], ...] = (
    # (error, status, whether the client reads that status as this error); the first row that matches wins
    (NotFoundError, 404, True),
    (RepoChangedError, 409, False),  # the checkout was moved or replaced under the session: nothing is read or written
    (TooManyEntriesError, 409, False),  # a layer past its names limit is never applied
    (PatchTooLargeError, 413, False),  # a session's patch past its bound: the client reads InvalidRequestError
    (ConflictError, 409, True),
    # A git remote's session: what the request named (a ref, a branch) or what the remote holds cannot be taken (422),
    # the branch exists or moved (409), or the remote failed (unreachable, credentials refused, no repository: 424,
    # the request failed on what it depends on; 502 is the model's, and the client reads each status as one error).
    (GitRefError, 422, False),
    (GitTooLargeError, 422, False),
    (GitTreeError, 422, False),
    (GitPushRequestError, 422, False),
    (GitPushRejectedError, 409, False),
    (GitError, 424, True),
    (CapacityError, 429, True),
    (ForbiddenRepoError, 403, True),
    (RepoError, 400, True),
    (InvalidRequestError, 422, True),  # a runtime the server does not allow, or a network it cannot give
    (InvalidRequestError, 413, True),  # a body larger than the server takes (answered before any route)
    (ConfigError, 503, False),
    (ModelError, 502, True),
    (SandboxError, 503, True),
    (DatabaseUnavailableError, 503, False),
    (StoreError, 507, True),
)


def status_of(err: CubicleError) -> int:
    """The status the API answers ``err`` with (500 for an error the table does not name)."""
    return next((code for kind, code, _ in STATUSES if isinstance(err, kind)), 500)


ERROR_OF: dict[int, type[CubicleError]] = {code: kind for kind, code, read in STATUSES if read}
"""The error the client raises for each status (401 is ``AuthError``; any other status, ``CubicleError``)."""
