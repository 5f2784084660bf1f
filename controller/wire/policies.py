"""The context policy a session runs with, and the record of each edit made to the model's view of it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EditKind = Literal["mask", "compact", "trim"]
SERVER_CLEAR = "clear_tool_uses_20250919"
"""The API's server-side edit that the ``server`` strategy asks for."""


class ContextPolicy(BaseModel):
    """When the view is edited. Sizes are in tokens; thresholds are fractions of ``window``."""

    model_config = ConfigDict(extra="forbid")

    strategy: Literal["auto", "mask", "server", "off"] = Field(
        "auto",
        description="auto: mask, then summarize; mask: mask and trim only; server: the API clears old tool "
        "results itself (Anthropic's context-management beta; trimmed here only when the API still finds the "
        "prompt too long); off: send everything.",
    )
    window: int = Field(200_000, ge=4096, le=10_000_000, description="The model's context window.")
    mask_at: float = Field(0.5, gt=0, le=1, description="Mask old tool results from this share of the window.")
    keep_results: int = Field(5, ge=0, le=1000, description="Messages of newest tool results a mask keeps.")
    min_free: int = Field(20_000, ge=0, description="Mask only when that frees this many tokens (one cache miss).")
    compact_at: float = Field(0.75, gt=0, le=1, description="Summarize older turns from this share of the window.")
    keep_recent: int = Field(20_000, ge=0, description="Tokens of the newest messages a compaction keeps as they are.")
    margin: int = Field(10_000, ge=0, description="Kept free below the window, besides the reply's max_tokens.")

    def ceiling(self, max_tokens: int) -> int:
        """The largest prompt that leaves room for the reply."""
        return self.window - max_tokens - self.margin

    def server_edits(self) -> dict[str, Any] | None:
        """The Messages API's ``context_management`` for the ``server`` strategy (None for the others): clear
        all but the newest ``keep_results`` tool uses (the API counts calls, not steps) and the inputs of the
        file-writing calls among them once the prompt reaches ``mask_at``, when that frees ``min_free``
        tokens. The API clears each request anew from the whole transcript, so once past the trigger every
        request clears one step more and its cached prefix breaks there (``bench.context``)."""
        if self.strategy != "server":
            return None
        edit = {
            "type": SERVER_CLEAR,
            "trigger": {"type": "input_tokens", "value": int(self.mask_at * self.window)},
            "keep": {"type": "tool_uses", "value": self.keep_results},
            "clear_at_least": {"type": "input_tokens", "value": self.min_free},
            "clear_tool_inputs": ["write_file", "edit_file"],
        }
        return {"edits": [edit]}


class Edit(BaseModel):
    """One context edit, recorded beside the transcript (which it never changes)."""

    model_config = ConfigDict(extra="forbid")

    kind: EditKind
    upto: int = Field(ge=0, description="Messages before this index are masked, or compacted away.")
    summary: str = Field("", description="The summary that replaces the compacted messages (compact only).")
    tokens_before: int = Field(0, ge=0)
    tokens_after: int = Field(0, ge=0)
