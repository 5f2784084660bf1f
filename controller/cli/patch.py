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

The listing may come from a server (``--server``), and a hostile one could call anything ``apply``. So every
change is judged again here by the rules that need no checkout (``rejudged``): inside ``.git`` is never
patched; a CI definition (``workspace/pipelines``), the environment's definition, git's own files (``.gitconfig``,
``.gitmodules``, ``.gitattributes``, ``.githooks/``) and the hook managers' (``.husky/``, lefthook, pre-commit,
...) are held back whatever the server said. And a diff is carried only when it is a diff of exactly its change:
its ``---``/``+++`` lines name the change's path and its hunks hold what their headers count, so no diff can
smuggle in another file's. What needs the checkout (what its git config runs, its ignore rules, its build
context) is the server's judgement: the patch says so.

On a terminal, the review shows every change, held-back ones marked (``review``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

from ..wire.changeset import HOW_TO_APPLY, Change, Changes, Disposition, FileType, Kind
from ..workspace import gitpointers, pipelines
from ..workspace.baseline import is_git_path
from ..workspace.changes import is_environment_config
from ..workspace.gitlike import REPO_NAMES
from . import review, terminal

PLAIN_NAME = re.compile(r"[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@+-]+)*")
"""A name ``git apply`` reads back as itself from a ``--- a/NAME`` line: no space, quote, backslash or tab."""
GIT_OWN = gitpointers.Index(
    tuple(
        gitpointers.Pointer(path, directory, why)
        for path, directory, why in (
            (".gitconfig", False, "a git config a checkout may include"),
            (".gitmodules", False, "git submodule"),
            (".gitattributes", False, "git attributes, which pick the filters and drivers git runs"),
            (".githooks", True, "git hooks"),
            *gitpointers.HOOK_MANAGERS,
        )
    )
)
"""Git's own files and the hook managers', at the top: held back from the patch whatever a server says."""
HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")
TRUST_NOTE = (
    "# Judged again here by name (.git, CI definitions, the environment's and git's own files); what needs the "
    "checkout (what its git config runs, its ignore rules, its build context) is as the listing's source said."
)


def patch(session_id: str, changes: list[Change]) -> str:
    """The patch text: a header of comment lines, the patchable diffs, a trailer naming the rest."""
    unseen = changes.unlisted_applied if isinstance(changes, Changes) else 0  # a bounded listing: apply writes more
    changes = [rejudged(c) for c in changes]
    applied, held = _split(changes, lambda c: c.disposition == Disposition.APPLY)
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
    return out + "".join(line + "\n" for line in [*trailer(sid, held, apart, gaps), TRUST_NOTE])


def rejudged(change: Change) -> Change:
    """``change``, held back when a rule that needs no checkout holds it back, whatever its listing said."""
    held = _held_by_name(change.path, change.type == FileType.DIR) if change.disposition == Disposition.APPLY else None
    if held is None:
        return change
    disposition, reason = held
    return change.model_copy(update={"disposition": disposition, "reason": f"{reason} (judged by name here)"})


def _held_by_name(path: str, is_dir: bool) -> tuple[Disposition, str] | None:
    if is_git_path(path):
        return Disposition.DISCARDED, "inside .git, which is never applied"
    forced = "applied only when forced by name (apply --force PATH)"
    if is_environment_config(path):
        return Disposition.TRUSTED, f"the environment's definition: {forced}"
    ci = pipelines.why(path, is_dir)
    if ci is not None:
        return Disposition.TRUSTED, ci
    folded = path.lower()
    git = GIT_OWN.covering(folded, is_dir)
    if git is None and folded.rsplit("/", 1)[-1] == ".gitattributes":  # git reads one in every directory
        git = GIT_OWN.covering(".gitattributes", False)
    if git is not None:
        return Disposition.TRUSTED, f"git runs or reads files here ({git.why}): {forced}"
    return None


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
    how = HOW_TO_APPLY.get(change.disposition)
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
    if not exactly_its_diff(change, diff):
        return "its diff is not a diff of exactly this file (left out: the listing's source sent it)"
    return ""


def exactly_its_diff(change: Change, diff: str) -> bool:
    """Whether ``diff`` is a unified diff of ``change`` alone: ``--- a/PATH`` (``/dev/null`` when added) and
    ``+++ b/PATH`` (``/dev/null`` when deleted), then hunks each holding exactly the lines its header counts, so
    no line of it can start another file's diff for ``git apply``."""
    before = "/dev/null" if change.kind == Kind.ADDED else f"a/{change.path}"
    after = "/dev/null" if change.kind == Kind.DELETED else f"b/{change.path}"
    lines = diff.split("\n")
    if lines[:2] != [f"--- {before}", f"+++ {after}"] or lines[-1] != "":
        return False
    at = 2
    while at < len(lines) - 1:
        at = _hunk_end(lines, at)
        if at < 0:
            return False
    return True


def _hunk_end(lines: list[str], at: int) -> int:
    """Where the hunk whose header is ``lines[at]`` ends, or -1 when it is not one whose lines match its counts."""
    header = HUNK.match(lines[at])
    if header is None:
        return -1
    old, new = (1 if count is None else int(count) for count in header.groups())
    at += 1
    while at < len(lines) - 1 and (old > 0 or new > 0 or lines[at].startswith("\\")):
        tag = lines[at][:1]
        old -= tag in " -"
        new -= tag in " +"
        if tag not in " -+\\" or old < 0 or new < 0:
            return -1
        at += 1
    return at if old == 0 and new == 0 else -1


def _name(change: Change) -> str:
    return review.path_text(change.path).plain


def _quoted(change: Change) -> str:
    """The path as a shell word the user can paste: as the review prints it (``apply`` takes that spelling)."""
    return shlex.quote(_name(change))
