"""search: ripgrep over the workspace, run like any command so its output and runtime are bounded too."""

from __future__ import annotations

import os

from .errors import JSON, ToolError
from .limits import DEFAULT_SEARCH_OUTPUT, SEARCH_TIMEOUT_S
from .processes import run
from .workspace import Workspace

_RG = ["rg", "--line-number", "--no-heading", "--color", "never", "--max-columns", "300", "--max-columns-preview"]


def search(ws: Workspace, args: JSON) -> JSON:
    """Matches of ``pattern`` under ``path``; a bad regex or glob is the model's error, other rg failures are reported."""
    target = ws.resolve(args.get("path") or ".")
    if not os.path.exists(target):
        raise ws.os_error(FileNotFoundError(2, "not found"), target)
    cmd = [*_RG, "--max-count", "100"]
    if args.get("glob"):
        cmd += ["--glob", args["glob"]]
    cmd += ["--regexp", args["pattern"]]
    if target != ws.root:
        cmd += ["--", ws.display(target)]
    # ripgrep runs with the toolbox's own environment (env=None), never the agent's.
    result = run(cmd, args.get("max_output") or DEFAULT_SEARCH_OUTPUT, SEARCH_TIMEOUT_S, ws.root)
    code = result["exit_code"]
    errors = str(result["stderr"]["text"]).strip()
    if code == 2 and (
        "regex parse error" in errors or "glob" in errors or (not result["stdout"]["total_bytes"] and not errors)
    ):
        raise ToolError("search_failed", "ripgrep failed: " + errors[:2000])
    return {"matches": result["stdout"], "exit_code": code, "timed_out": result["timed_out"], "errors": errors[-2000:]}
