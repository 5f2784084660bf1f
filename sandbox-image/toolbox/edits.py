"""edit_file: replace an exact string, and when it cannot, say why in a way the model can act on.

Most failed edits are a model misremembering whitespace or editing twice, so the hints
point at the lines where the text (or the replacement) already is.
"""

from __future__ import annotations

import os

from .errors import JSON, ToolError
from .files import write_file
from .limits import MAX_EDIT_FILE_BYTES
from .workspace import Workspace


def edit_file(ws: Workspace, args: JSON) -> JSON:
    """Replace ``old_string`` once (it must be unique) or everywhere (``replace_all``); bytes that are not UTF-8 survive."""
    full = ws.resolve(args["path"])
    old, new = args["old_string"], args["new_string"]
    if old == "":
        raise ToolError("invalid_edit", "old_string is empty. To create or overwrite a file use write_file.")
    if old == new:
        raise ToolError("invalid_edit", "old_string and new_string are the same; nothing would change.")
    fd = ws.open_regular(full, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_EDIT_FILE_BYTES + 1)
    if len(raw) > MAX_EDIT_FILE_BYTES:
        raise ToolError(
            "too_large", f"{ws.display(full)} is larger than {MAX_EDIT_FILE_BYTES} bytes; edit it with run_command."
        )
    text = raw.decode("utf-8", "surrogateescape")
    count = text.count(old)
    if count == 0:
        raise ToolError("not_found", _missing_hint(text, old, new, ws.display(full)))
    if count > 1 and not args.get("replace_all"):
        raise ToolError("not_unique", _ambiguous_hint(text, old, count, ws.display(full)))
    updated = text.replace(old, new) if args.get("replace_all") else text.replace(old, new, 1)
    write_file(ws, {"path": full, "content": updated})
    return {"path": ws.display(full), "replacements": count if args.get("replace_all") else 1}


def _missing_hint(text: str, old: str, new: str, shown: str) -> str:
    """Why old_string is not there: already applied, or where its first line is, or read the file first."""
    if new and new in text:
        return f"old_string was not found in {shown}, but new_string already is: the edit may already be applied. Read the file to check."
    first = next((line.strip() for line in old.splitlines() if line.strip()), "")
    near = [i + 1 for i, line in enumerate(text.splitlines()) if first and first in line][:5]
    message = (
        f"old_string was not found in {shown}. It must match the file exactly, including whitespace and indentation."
    )
    if near:
        message += (
            f" Its first line appears at line(s) {', '.join(map(str, near))}; read those lines and copy them exactly."
        )
    else:
        message += " Read the file first and copy the text you want to change."
    return message


def _ambiguous_hint(text: str, old: str, count: int, shown: str) -> str:
    """Where the first ten occurrences start, so the model can widen old_string around the one it means."""
    starts: list[int] = []
    at = text.find(old)
    while at != -1 and len(starts) < 10:
        starts.append(text.count("\n", 0, at) + 1)
        at = text.find(old, at + 1)
    where = ", ".join(map(str, starts))
    return (
        f"old_string occurs {count} times in {shown} (at line(s) {where}). Include more surrounding lines so it matches exactly once, "
        "or set replace_all to true to change every occurrence."
    )
