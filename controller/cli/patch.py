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

``cubicle changes ID --patch --server URL`` prints a patch the server made (``workspace.gitpatch``), and it is read
here the same way before it is printed (``served_patch``): it must be exactly what that module writes, and a diff
of a path held back by name here is dropped and listed. Unlike ``--diff``'s text diffs, such a patch can make
symlinks (mode 120000), so each link it makes is judged by its target as apply judges one (``served_links``): a
link a plain apply never writes (absolute, leaving the tree, into ``.git``, through another link it makes)
refuses the whole patch.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable

from ..wire.changeset import HOW_TO_APPLY, Change, Changes, Disposition, FileType, Kind
from ..workspace import gitpatch, gitpointers, pipelines
from ..workspace.baseline import is_git_path
from ..workspace.changes import is_environment_config, symlink_problem
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
    if diff is None or (change.kind != Kind.DELETED and change.type != FileType.FILE):  # a text diff makes a file
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


EXTENDED = re.compile(
    r"(?:new file mode|deleted file mode|old mode|new mode) (?:100644|100755|120000)"
    r"|index [0-9a-f]{40}\.\.[0-9a-f]{40}(?: (?:100644|100755|120000))?"
)
"""The extended header lines of a ``workspace.gitpatch`` diff, after its ``diff --git`` line."""
WHOLE_HUNK = re.compile(r"@@ -[01](?:,\d+)? \+[01](?:,\d+)? @@")
"""A hunk from a file's first line (or of an empty side): with no context after its changes, git applies it only to
the whole file, so its ``+`` and context lines are the whole new text (a link's target)."""
BINARY_DATA = re.compile(r"[A-Za-z][0-9A-Za-z!#$%&()*+\-;<=>?@^_`{|}~]+")
C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 0x22, "\\": 0x5C}


def served_patch(session_id: str, patch: str) -> str:
    """A server's ``--patch`` as it may reach ``git apply`` here: what ``workspace.gitpatch`` makes, read line by
    line (comment lines, then diffs each of one path named alike on every line, holding only the header lines,
    ``GIT binary patch`` literals and counted hunks git writes, so that no line can reach another path), less the
    diffs of paths a rule that needs no checkout holds back (``rejudged``: ``.git``, CI definitions, the
    environment's and git's own files), which are listed in comment lines instead, whatever the server judged.
    Anything else is refused (ValueError, saying what), since a server's answer is not trusted to be a patch; so is
    a patch making a symlink a plain apply never writes (``served_links``), whose path the error names."""
    lines = patch.split("\n")
    at = 0
    while at < len(lines) - 1 and lines[at].startswith("#"):
        at += 1
    head, kept, held = lines[:at], [], []
    links: dict[str, str | None] = {}
    try:
        while at < len(lines) - 1:
            path = _git_header(lines[at])
            if path is None:
                raise ValueError(f"line {at + 1} is not a diff of one path")
            end = _section_end(lines, at + 1, path)
            if end < 0:
                raise ValueError(f"the diff of {_name_of(path)} is not one git apply reads as that path alone")
            why = _held_by_name(path, False)
            if why is None:
                kept += lines[at:end]
                if _leaves_link(lines, at + 1, end):
                    links[path] = _new_text(lines, at + 1, end)
            else:
                held.append(f"#   {_name_of(path)}: {why[1]} (judged by name here); {_how(session_id, path, why[0])}")
            at = end
    except IndexError:
        raise ValueError("it ends in the middle of a diff") from None
    if lines[-1] != "":
        raise ValueError("it does not end with a newline")
    served_links(links)
    if held:
        head += ["# Held back here, though the server's patch carried them:", *held]
    return "\n".join([*head, *kept, ""])


def served_links(links: dict[str, str | None]) -> None:
    """Refuse (ValueError naming the path) a served patch whose symlinks a plain apply would not write: ``links``
    maps each path the patch leaves a link at to its target (None: one the patch does not spell whole). A target is
    judged as ``changes.symlink_problem`` judges a layer's (absolute or empty, climbing out of the tree or after a
    name, at the root, into ``.git`` in any spelling), and like apply's preflight it may not pass through another
    link the patch makes (``a -> b/x`` beside ``b -> /etc``). Links already in the checkout it is applied to are
    not seen here: ``git apply`` writes none through them (it refuses a path beyond a symlink)."""
    folded = {path.casefold() for path in links}  # a checkout on a case-insensitive disk reaches B/x through b
    for path, target in links.items():
        problem = "its target is not spelled whole" if target is None else symlink_problem(path, target)
        if not problem and target is not None and _through_link(path, target, folded):
            problem = "the symlink's target passes through another symlink this patch makes"
        if problem:
            raise ValueError(f"it makes a symlink at {_name_of(path)} that a plain apply never writes ({problem})")


def _through_link(path: str, target: str, links: set[str]) -> bool:
    """Whether ``target``, walked from the directory of ``path`` (its ``..`` leading: ``symlink_problem``), names one
    of ``links`` (folded) on its way or at its end."""
    where = path.split("/")[:-1]
    for part in target.split("/"):
        if part == "..":
            where.pop()
        elif part not in ("", "."):
            where.append(part)
            if "/".join(where).casefold() in links:
                return True
    return False


def _leaves_link(lines: list[str], at: int, end: int) -> bool:
    """Whether the diff whose header lines start at ``at`` leaves a symlink at its path: a new side of mode 120000,
    given by ``new file mode``, ``new mode``, or an ``index`` line's mode (both sides')."""
    mode = ""
    while at < end and EXTENDED.fullmatch(lines[at]):
        words = lines[at].split()
        if words[0] == "deleted":
            return False
        if words[0] == "new" or (words[0] == "index" and len(words) == 3):
            mode = words[-1]
        at += 1
    return mode == gitpatch.SYMLINK_MODE


def _new_text(lines: list[str], at: int, end: int) -> str | None:
    """What the diff between ``at`` and ``end`` leaves at its path (a link's target), when its hunks spell it whole:
    one hunk from the first line, ending in no context (``WHOLE_HUNK``); else None (a binary literal, a mode alone,
    a hunk in the middle, which leave text the patch does not hold)."""
    while at < end and EXTENDED.fullmatch(lines[at]):
        at += 1
    body = lines[at + 2 : end] if at < end and lines[at].startswith("--- ") else []
    if not body or not WHOLE_HUNK.match(body[0]) or any(line.startswith("@@") for line in body[1:]):
        return None
    if [line for line in body if not line.startswith("\\")][-1].startswith(" "):
        return None  # context after the last change: git would not hold the hunk to the file's end
    text = []
    for line, after in zip(body[1:], [*body[2:], ""], strict=True):
        if line[:1] in (" ", "+"):
            text.append(line[1:] + ("" if after.startswith("\\") else "\n"))
    return "".join(text)


def _name_of(path: str) -> str:
    return review.path_text(path).plain


def _how(session_id: str, path: str, disposition: Disposition) -> str:
    how = HOW_TO_APPLY.get(disposition)
    sid, name = shlex.quote(terminal.safe(session_id)), shlex.quote(_name_of(path))
    return how.format(sid=sid, path=name) if how else "never applied"


def _section_end(lines: list[str], at: int, path: str) -> int:
    """Where the diff of ``path`` whose header lines start at ``at`` ends; -1 when it holds anything else."""
    while at < len(lines) - 1 and EXTENDED.fullmatch(lines[at]):
        at += 1
    if lines[at] == "GIT binary patch":
        at += 1
        for _ in range(2):  # the forward literal, then the reverse one (optional for git, always written)
            if not re.fullmatch(r"literal \d+", lines[at]):
                return -1
            at += 1
            while BINARY_DATA.fullmatch(lines[at]):
                at += 1
            if lines[at] != "":
                return -1
            at += 1
        return at
    if not lines[at].startswith("--- "):
        return at
    name = os.fsencode(path)
    old, new = (gitpatch.label(gitpatch.quoted(side + name)) for side in (b"a/", b"b/"))
    if lines[at] not in (f"--- {old}", "--- /dev/null") or lines[at + 1] not in (f"+++ {new}", "+++ /dev/null"):
        return -1
    at += 2
    while at < len(lines) - 1 and lines[at].startswith("@@"):
        at = _hunk_end(lines, at)
        if at < 0:
            return -1
    return at


def _git_header(line: str) -> str | None:
    """The one path a ``diff --git a/P b/P`` line names (C-quoted or not), or None when it is not such a line."""
    if not line.startswith("diff --git "):
        return None
    rest = line.removeprefix("diff --git ")
    if rest.startswith('"'):
        first, after = _unquoted(rest)
        second, tail = _unquoted(after[1:]) if after.startswith(' "') else (None, "x")
        if first is None or second is None or tail or first[:2] != b"a/" or second != b"b/" + first[2:]:
            return None
        return os.fsdecode(first[2:])
    half = (len(rest) - 5) // 2
    name = rest[2 : 2 + half]
    return name if rest == f"a/{name} b/{name}" and gitpatch.quoted(os.fsencode(name)) == name else None


def _unquoted(text: str) -> tuple[bytes | None, str]:
    """The bytes of the C-quoted string ``text`` starts with, and what follows it; None when it is not one."""
    out = bytearray()
    at = 1
    while at < len(text) and text[at] != '"':
        char = text[at]
        if char != "\\":
            out += char.encode()
            at += 1
        elif text[at + 1 : at + 2] in C_ESCAPES:
            out.append(C_ESCAPES[text[at + 1]])
            at += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", text[at + 1 : at + 4]):
            out.append(int(text[at + 1 : at + 4], 8))
            at += 4
        else:
            return None, ""
    return (bytes(out), text[at + 1 :]) if at < len(text) else (None, "")
