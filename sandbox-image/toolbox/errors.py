"""The one failure type the operations raise: what the model reads when a tool call fails."""

from __future__ import annotations

TYPE_CHECKING = False  # see the package's docstring: what is imported for types only
if TYPE_CHECKING:
    from typing import Any

    JSON = dict[str, Any]
else:
    JSON = dict


class ToolError(Exception):
    """A failure the model should read: ``kind`` is stable, ``message`` says what to do."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
