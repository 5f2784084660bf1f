"""A session as the API reports it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .envspec import Environment
from .events import FinishReason, Status, Usage
from .limits import Limits
from .policies import ContextPolicy

ApplyPolicy = Literal["never", "on_finish"]


class Source(BaseModel):
    """Where a remote session's files came from: the git URL as the server normalised it (never with
    credentials), the ref asked for, and the commit it resolved to. A local session has none."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    ref: str | None = Field(None, description="The branch, tag or commit asked for; none: the remote's HEAD.")
    commit: str = Field(
        description="The commit the session's files are the tree of; empty until they are fetched (the session is "
        "recorded at once, and fetches before its first turn)."
    )

    def short(self) -> str:
        """The URL and the commit's first twelve digits, as listings show a remote session (the ref asked for
        while the commit is not known yet)."""
        if not self.commit:
            return f"{self.url} ({self.ref or 'HEAD'}, not fetched)"
        return f"{self.url}@{self.commit[:12]}"


class SessionRecord(BaseModel):
    """A session as the API reports it. The store's row adds what only controllers use (``server.store.Row``):
    the lease and its epoch."""

    model_config = ConfigDict(extra="forbid")

    id: str
    repo: str
    task: str = Field(description="The first task of the session.")
    model: str
    status: Status
    finish_reason: FinishReason | None = Field(None, description="Why the last turn ended.")
    detail: str = Field("", description="More about the finish reason or failure.")
    usage: Usage
    steps: int = Field(description="Model requests made, over all turns.")
    limits: Limits
    context: ContextPolicy | None = Field(None, description="This session's context policy; none: the server's.")
    owner: str = Field("", description="The controller process running it (`cubicle serve` or a `cubicle run`).")
    apply: ApplyPolicy = Field(
        "never", description="on_finish: apply the changes after a turn that ended with end_turn; never: keep them."
    )
    environment: Environment | None = Field(
        None, description="Where its sandbox runs: the repository's definition with the request's fields over it."
    )
    created_at: float
    updated_at: float
    unapplied: int | None = Field(
        None,
        description="Changed paths an apply would still write: counted when a turn ends and at each apply, rewind "
        "and discard, never by a scan for a listing; none before the first count.",
    )
    source: Source | None = Field(
        None,
        description="A session on a git remote: its URL, ref and commit. `repo` is then the controller's checkout of "
        "that commit, which nothing is applied to: its changes leave as a patch or a pushed branch. Until its files "
        "are fetched (before the first turn) `repo` and the commit are empty.",
    )
