"""The review's diff as a patch: what ``cubicle changes ID --diff`` prints when its output is not a terminal.

The README offers ``cubicle changes ID --diff | git apply``, so this output is a patch, and a patch must never
carry a change ``cubicle apply ID`` holds back: a ``.gitconfig`` whose ``core.fsmonitor`` runs the agent's command
at the user's next ``git status``, a bare-repository look-alike, a CI definition, an ignored file. It holds the
diffs of exactly the changes a plain apply writes that ``git apply`` would write the same way; every other
change is listed in comment lines (``#``, which ``git apply`` skips), each with the command that applies it
deliberately. Left out of the patch, and listed, are also the changes a plain apply writes that a text patch
cannot carry as apply writes them: binary files, directories, links, a mode alone, a diff cut at its bound, a
file of characters a terminal obeys (the patch would spell them out), and a name ``git apply`` could read as
another (a space before a date-like tail, a quote, a backslash: only plain ASCII names are patched).

On a terminal, the review shows every change, held-back ones marked (``review``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

from ..wire.changeset import Change, Changes, Disposition, Kind
from ..workspace.gitlike import REPO_NAMES
from . import review, terminal

PLAIN_NAME = re.compile(r"[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@+-]+)*")
"""A name ``git apply`` reads back as itself from a ``--- a/NAME`` line: no space, quote, backslash or tab."""
HOW = {
    Disposition.TRUSTED: "cubicle apply {sid} {path} --force {path}",
    Disposition.IGNORED: "cubicle apply {sid} {path} --include-ignored",
    Disposition.BUILD_INPUT: "cubicle apply {sid} {path} --build-inputs",
}
"""How to apply a held-back change deliberately, by its disposition; the others are never applied."""


def patch(session_id: str, changes: list[Change]) -> str:
    """The patch text: a header of comment lines, the patchable diffs, a trailer naming the rest."""
    applied, held = _split(changes, lambda c: c.disposition == Disposition.APPLY)
    unseen = changes.unlisted_applied if isinstance(changes, Changes) else 0  # a bounded listing: apply writes more
    gaps = unseen > 0 or any(c.kind == Kind.DELETED and unpatchable(c) for c in applied)
    apart, carried = _split(applied, lambda c: bool(unpatchable(c, gaps)))
    sid = shlex.quote(terminal.safe(session_id))
    lines = [
        f"# cubicle changes {sid} --diff: a patch of what `cubicle apply {sid}` writes, for `git apply`: "
        f"{len(carried)} file(s) here; {len(held)} held back and {len(apart)} not patchable, listed at the end."
    ]
    if unseen:
        lines.append(f"# {unseen} more change(s) a plain apply writes are past the listing's bound: not in this patch.")
    out = "\n".join(lines) + "\n" + "".join(c.diff or "" for c in carried)
    return out + "".join(line + "\n" for line in trailer(sid, held, apart, gaps))


def _split(changes: list[Change], test: Callable[[Change], bool]) -> tuple[list[Change], list[Change]]:
    """The changes that pass ``test`` and those that do not, each in their order."""
    passed = [c for c in changes if test(c)]
    return passed, [c for c in changes if not test(c)]


def trailer(sid: str, held: list[Change], apart: list[Change], gaps: bool = False) -> list[str]:
    """Comment lines for what the patch leaves out: why, and how to get each deliberately."""
    lines: list[str] = []
    if held:
        lines.append(
            f"# Held back: a plain `cubicle apply {sid}` does not write these, and this patch does not either:"
        )
        lines += [_held_line(sid, c) for c in held]
    if apart:
        lines.append(f"# Not in this patch, though a plain `cubicle apply {sid}` writes them (apply them with it):")
        lines += [f"#   {_name(c)}: {unpatchable(c, gaps)}; cubicle apply {sid} {_quoted(c)}" for c in apart]
    return lines


def _held_line(sid: str, change: Change) -> str:
    how = HOW.get(change.disposition)
    get = how.format(sid=sid, path=_quoted(change)) if how else "never applied"
    reason = terminal.safe(change.reason).replace("\n", "\\n") or change.disposition.value
    return f"#   {change.disposition.value}: {_name(change)} ({reason}); {get}"


def unpatchable(change: Change, gaps: bool = False) -> str:
    """Why a text patch cannot carry ``change`` as ``cubicle apply`` writes it; empty when it can. With ``gaps``
    (a deletion the patch cannot carry), no entry with a repository's name either: apply judged look-alikes with
    that deletion made (``gitlike``), and without it ``HEAD`` beside new ``objects`` and ``refs`` may be one."""
    own = _unpatchable(change)
    if not own and gaps and any(part.casefold() in REPO_NAMES for part in change.path.split("/")):
        return "a repository's name, and a deletion this patch cannot carry: apply judged them together"
    return own


def _unpatchable(change: Change) -> str:
    diff = change.diff
    if diff is None:
        return "binary, a directory, a link, too large, or not diffed"
    if not diff:
        return "no text differs (an empty file, or a mode)"
    if diff.endswith("[diff truncated]\n"):
        return "its diff is cut at the review's bound"
    if not PLAIN_NAME.fullmatch(change.path) or any(part in (".", "..") for part in change.path.split("/")):
        return "a name git apply could read as another"
    if terminal.safe(diff) != diff.replace("\r\n", "\n"):
        return "it holds characters a terminal obeys, which the patch would spell out"
    return ""


def _name(change: Change) -> str:
    return review.path_text(change.path).plain


def _quoted(change: Change) -> str:
    """The path as a shell word the user can paste: as the review prints it (``apply`` takes that spelling)."""
    return shlex.quote(_name(change))
