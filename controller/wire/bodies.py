"""The HTTP API's request and response bodies: one definition, for the server (``api``) and its client (``client``).

They live apart from ``api`` so that a client can use them without importing FastAPI.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from .changeset import Conflict
from .envspec import EnvironmentRequest
from .limits import Limits
from .policies import ContextPolicy, Edit
from .sessionrecord import ApplyPolicy, SessionRecord

TRUNCATED_HEADER = "Cubicle-Truncated-At"
"""Set on a changes listing that stopped at the session's names limit (its value)."""
UNLISTED_HEADER = "Cubicle-Unlisted"
"""Set on a changes listing that left out changes past its bound (how many); apply judges them too."""
UNLISTED_APPLIED_HEADER = "Cubicle-Unlisted-Applied"
"""With ``Cubicle-Unlisted``: how many of the changes left out an apply writes (disposition ``apply``)."""
MAX_INDEX = 2**53  # offsets and sequence numbers stay far inside SQLite's 64-bit integers


def _optional(model: type[BaseModel], name: str) -> type[BaseModel]:
    """``model`` with every field optional but its bounds kept: what a client may ask for."""
    fields: dict[str, Any] = {}
    for field_name, info in model.model_fields.items():
        bounds = {k: getattr(m, k) for m in info.metadata for k in ("ge", "le", "gt", "lt") if hasattr(m, k)}
        optional: Any = info.annotation
        fields[field_name] = (optional | None, Field(None, description=info.description, **bounds))
    return create_model(name, __config__=ConfigDict(extra="forbid"), **fields)


LimitsRequest = _optional(Limits, "LimitsRequest")
ContextRequest = _optional(ContextPolicy, "ContextRequest")


class RemoteRepo(BaseModel):
    """A git remote to start a session on: the server fetches it into its mirror cache and the session works on the
    tree of the commit ``ref`` names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(
        max_length=2048,
        description="An http(s) git URL that the server's CUBICLE_GIT_REMOTES allows, without credentials (the "
        "server's CUBICLE_GIT_CREDENTIALS holds those).",
    )
    ref: str | None = Field(
        None,
        max_length=255,
        pattern=r"^[^-/.\x00-\x20\x7f~^:?*\[\\][^\x00-\x20\x7f~^:?*\[\\]*$",
        description="A branch, tag or commit (full or abbreviated); default: the remote's HEAD.",
    )


class CreateSession(BaseModel):
    """Start a session: the agent begins working on ``task`` at once."""

    model_config = ConfigDict(extra="forbid")

    repo: Annotated[str, Field(max_length=4096)] | RemoteRepo = Field(
        description="Absolute path of the repository, under one of the configured roots; or a git remote "
        '({"url": ..., "ref": ...}).',
    )
    task: str = Field(min_length=1, max_length=200_000, description="What the agent should do.")
    model: str | None = Field(
        None, max_length=200, pattern=r"^[A-Za-z0-9._:@/-]+$", description="Model id; default from settings."
    )
    limits: LimitsRequest | None = Field(None, description="Limits to lower (or raise up to the server's maximums).")  # type: ignore[valid-type]
    context: ContextRequest | None = Field(None, description="Context policy fields that differ from the server's.")  # type: ignore[valid-type]
    apply: ApplyPolicy = Field(
        "never",
        description="on_finish: apply the changes to the checkout after a turn the agent ended itself "
        "(not after a limit, cancel or error); never: keep them for review (GET .../changes, POST .../apply).",
    )
    environment: EnvironmentRequest | None = Field(
        None,
        description="Fields over the repository's own environment definition (.cubicle/environment.toml or "
        ".devcontainer/devcontainer.json); an image must be the default or on the server's allowed_images.",
    )

    @model_validator(mode="after")
    def _remote_never_applies(self) -> CreateSession:
        if isinstance(self.repo, RemoteRepo) and self.apply != "never":
            raise ValueError("a session on a git remote is never applied: take its patch or push a branch")
        return self


class ApplyRequest(BaseModel):
    """Apply the session's changes to the checkout."""

    model_config = ConfigDict(extra="forbid")

    force: list[Annotated[str, Field(max_length=4096)]] = Field(
        [],
        max_length=10_000,
        description="Paths (or directories) to write even though the checkout changed there; also the environment's "
        "definition files (disposition trusted) to accept, each by its exact path.",
    )
    include_ignored: bool = Field(False, description="Also apply paths the repository's ignore rules matched.")
    build_inputs: bool = Field(
        False,
        description="Also apply the paths of the build context the environment's Dockerfile copies whole "
        "(disposition build_input): the next environment build runs them as root.",
    )
    paths: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        None,
        max_length=10_000,
        description="Apply only these (a directory: all under it), each as the changes list it or by its real name; "
        "the rest stays in the session. A path that names no change is a 404 naming it, one that could mean two "
        "changes (one's real name, another's printed one) a 422 naming both; either way nothing is written.",
    )
    ids: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        None,
        max_length=50_000,
        description="Apply only the changes with these ids (each change's ``id`` in the listing), with ``paths`` "
        "if both are given: an id always means one change, whatever its name prints as. An unknown id is a 404.",
    )


class PushRequest(BaseModel):
    """Push a remote session's changes to its remote as a new branch: one commit on the session's commit."""

    model_config = ConfigDict(extra="forbid")

    branch: str = Field(
        min_length=1,
        max_length=200,
        description="The branch to make, under the server's CUBICLE_GIT_BRANCH_PREFIX (default cubicle/), "
        "a name git takes.",
    )
    message: str | None = Field(
        None, max_length=65_536, description="The commit's message; default: the session's first task, shortened."
    )
    force: list[Annotated[str, Field(max_length=4096)]] = Field(
        [],
        max_length=10_000,
        description="Held-back paths (CI definitions, the environment's definition, git's pointers) to include, "
        "each by its exact path.",
    )
    force_with_lease: bool = Field(
        False,
        description="Replace the branch if it exists, as long as it still names what a fetch just found there "
        "(or `expected`); without it an existing branch is never overwritten.",
    )
    expected: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{40}$",
        description="With force_with_lease: the commit the branch must still name to be replaced (say, the "
        "`commit` of your last push to it), checked by the remote as the push lands; a fetch just before the push "
        "cannot tell your own last push from someone else's after it, this can.",
    )

    @model_validator(mode="after")
    def _expected_with_lease(self) -> PushRequest:
        if self.expected is not None and not self.force_with_lease:
            raise ValueError("expected is the lease's commit: give it with force_with_lease")
        return self


class PushResult(BaseModel):
    """What a push made: the branch at the remote, the commit it names, and what the commit leaves out."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="The remote, never with credentials.")
    branch: str
    commit: str
    base: str = Field(description="The session's commit, the new commit's parent.")
    status: Literal["created", "replaced", "unchanged"]
    written: int = Field(description="Paths the commit writes or removes.")
    left: list[str] = Field(
        [], description="What it leaves out and why, one line each: held back, or what git cannot carry."
    )


class RevertRequest(BaseModel):
    """Undo the newest apply not yet reverted."""

    model_config = ConfigDict(extra="forbid")

    force: list[Annotated[str, Field(max_length=4096)]] = Field(
        [], max_length=10_000, description="Paths to restore even though the checkout changed there since the apply."
    )


class RewindRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turn: int = Field(ge=1, le=MAX_INDEX, description="The checkpoint (end of a turn) to return the files to.")


MAX_MESSAGE = 200_000
"""Characters of a follow-up message, written or made of review comments."""


class FollowUp(BaseModel):
    """A follow-up user message in the same conversation."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_MESSAGE)


class ReviewComment(BaseModel):
    """A review comment on one line of the session's diff, or (without ``line``) on a whole file."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(min_length=1, max_length=4096, description="The file, as the changes list it.")
    id: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="The change's ``id`` in the listing: when given, the comment is on that change (a 404 if none "
        "has it), whatever ``path`` says; without it, ``path`` must mean one change (two: a 422 naming both).",
    )
    line: int | None = Field(
        None, ge=1, le=MAX_INDEX, description="The line's number on ``side``; none: a comment on the whole file."
    )
    side: Literal["new", "old"] = Field(
        "new",
        description="new: a line of the session's version (added or unchanged); old: a removed line, numbered as in "
        "the checkout.",
    )
    text: str = Field(min_length=1, max_length=8000, description="What the reviewer says about it.")


class Review(BaseModel):
    """Review comments, sent to the agent together as one follow-up."""

    model_config = ConfigDict(extra="forbid")

    comments: list[ReviewComment] = Field(min_length=1, max_length=20)


class SessionPage(BaseModel):
    items: list[SessionRecord] = Field(fail_fast=True)  # a client reads a hostile page to its first bad item
    total: int
    limit: int
    offset: int


class Transcript(BaseModel):
    messages: list[dict[str, Any]] = Field(
        fail_fast=True,
        description="The whole stored transcript; with view=model, what the model is sent next (context edits applied).",
    )
    estimated_tokens: int | None = Field(None, description="With view=model: the view's size, estimated.")
    window: int | None = Field(None, description="With view=model: the context window the policy keeps it inside.")
    edits: list[Edit] | None = Field(
        None, fail_fast=True, description="With view=model: the context edits, oldest first."
    )


class ErrorBody(BaseModel):
    detail: Any
    conflicts: list[Conflict] | None = Field(
        None, fail_fast=True, description="With 409 from apply or revert: what changed where."
    )


class Health(BaseModel):
    status: str
    version: str
    running_sessions: int


class RepoList(BaseModel):
    roots: list[str] = Field(description="The configured roots (CUBICLE_REPO_ROOTS).")
    repos: list[str] = Field(description="Git checkouts found under them (a few levels deep, at most 500).")
    default: str | None = Field(
        None,
        description="The one to offer first: under the first root that has one, and not Cubicle's own source "
        "checkout (when the server runs from one); none when there is no other.",
    )
    branch_prefix: str = Field(
        "cubicle/",
        description="What the name of a branch pushed from a session on a git remote must start with "
        "(CUBICLE_GIT_BRANCH_PREFIX), for a form to offer it.",
    )
