"""A session's changes pushed to its remote as a branch: one commit on the session's own base commit, holding exactly
what a plain apply of the layer writes, sent to ``refs/heads/<branch>`` and nowhere else.

``session_commit`` builds the commit in the mirror, without a work tree; ``push`` sends it. Why each part is as
it is:

* **The patch's selection** (``gitpatch.plain_apply``: apply's ``selected``, then its preflight): what apply holds
  back (trusted CI definitions and git pointers, ignored files, build inputs, unsafe entries, anything under
  ``.git``) is not in the commit either, unless ``force`` names a trusted path by its exact name, as ``cubicle
  apply --force`` does. A reviewer who read the changes list reads what the branch holds.
* **The layer's bytes, as stored**: each file is streamed from the upper layer (opened beneath it, never through a
  symlink) into ``hash-object -w --no-filters --stdin``, so no ``.gitattributes`` of the repository's (``eol``,
  ``text``, a filter's clean command) changes or runs on a byte; a symlink's blob is its target (mode 120000); a
  file is 100755 when apply would give the owner's x bit, else 100644. Directories are no git entries: a
  directory's own change (its mode, an empty one) is left out and listed, as the patch lists it.
* **No work tree, a scratch index**: ``GIT_INDEX_FILE`` in a directory of the controller's
  (``<data_dir>/git/tmp/commit-*``, removed after), ``read-tree`` of the base, ``update-index`` (``--index-info``
  removals, ``--add --cacheinfo`` additions), ``write-tree``, ``commit-tree -p <base>``. Nothing is checked out,
  so no filter, hook or checkout-time conversion has a chance to run; the base stays the parent, and the base
  must be the session's pin (``gitmirror.pin``) and its checkout's commit.
* **No hostile name lands**: git's own name checks run with ``core.protectNTFS`` and ``core.protectHFS``
  (``gitrun.HARDENING``): ``update-index --cacheinfo`` refuses ``.git`` in any case or spelling (``.GIT``,
  ``git~1``, ``.git.``, with HFS's ignored characters), ``..``, an empty component and a ``.gitmodules`` symlink,
  and refuses the whole commit. Before that, ``refused_name`` screens the same names out (left out, listed), so one
  odd name costs the user that path, not the push; and the tree written is read back and compared, entry by entry,
  with what was asked, so a path git silently ignored (``--index-info`` does) is an error, not a quiet loss.
* **Author and committer from the caller** (``author``), through the environment git is given, never a user's or
  the host's config (``gitrun``); names and messages with control characters are refused, and no commit is signed.
* **A branch name is checked before anything is sent** (``check_branch``): no control or invisible format
  character, inside ``prefix`` (``cubicle/`` by default, so a session can never push ``main``), and what ``git
  check-ref-format --branch`` accepts unchanged.
* **Never an overwrite by accident**: the push's lease is ``--force-with-lease=refs/heads/<branch>:`` (an empty
  value: the branch must not exist), so a second push to the same name is refused by the remote, atomically. With
  a ``Lease`` of a commit the remote replaces the branch only if it still names it (the caller's last push, say),
  so someone else's push after it is never lost. With an empty ``Lease`` the branch is fetched into the mirror
  first (under the mirror's lock) and the lease is the commit the mirror then holds: the branch is replaced only if
  nobody pushed to it between that fetch and the push.
* **The remote reached as a fetch reaches it** (``gitmirror.remote_git``): the hardened runner, the credential
  helper (a token is never in an argv, a URL or a file of ours), the pinned address, the connect timeout; the run
  bounded by ``timeout_s``. A refusal is an error naming the host and the branch (``GitPushRejectedError`` with its
  reason, ``GitAuthError``, ``GitRemoteError``), with every password of the credentials file stripped; the
  session's layer is never touched, so nothing of it is lost.
* **Bounded in memory as a fetch is**: git reads the remote's whole list of refs into memory before it sends
  anything, so the push is killed once its processes hold more than ``max_bytes`` of memory (and
  ``gitmirror.MEMORY_ALLOWANCE``), as the fetch it may make first is (``gitmirror.fetch``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import (
    GitAuthError,
    GitError,
    GitPushError,
    GitPushRejectedError,
    GitPushRequestError,
    GitRefError,
    GitRemoteError,
    GitTooLargeError,
    UnsafePathError,
)
from ..wire.changeset import Change, Conflict, FileType, Kind
from . import beneath, gitcreds, gitmirror, gittree
from .baseline import HFS_IGNORED
from .checkout import applied_mode
from .gitmirror import MirrorOptions
from .gitpatch import SYMLINK_MODE, Left, Parents, file_mode, has_entries, plain_apply
from .gitrun import TIMEOUT_S, Git, home, redact
from .layer import Layer, open_repo, open_upper

DEFAULT_PREFIX = "cubicle/"
"""The branches a session may push: under this prefix, so no session pushes ``main`` or a release branch."""
MAX_COMMIT_BYTES = 1 << 30
"""The bytes of the files one commit may take from a layer (a checkout's own bound, ``gittree.TreeOptions``)."""
MAX_MESSAGE = 64 << 10
MAX_AUTHOR = 256
ARGV_BYTES = 64 << 10
"""The ``--cacheinfo`` arguments one ``update-index`` takes, at most: well inside any system's argv limit."""
NULL_ID = "0" * 40
OUTPUT_LIMIT = 1 << 20
_FULL_ID = re.compile(r"[0-9a-f]{40}")
_NTFS_END = re.compile(r"[:\\]")
_GITMODULES_SHORT = re.compile(r"gi7eba~\d+|gitmod~\d+")


@dataclass(frozen=True)
class CommitEntry:
    """A path the commit writes: its git mode (100644, 100755, 120000) and its blob."""

    path: str
    mode: str
    blob: str


@dataclass(frozen=True)
class Built:
    """A session's commit: its id, its tree, its parent (the session's base), the paths it writes and removes, and
    what it leaves out: ``left`` (a plain apply writes it, git cannot carry it: a directory alone, a name git
    refuses, a file unreadable), ``held`` (a plain apply holds it back) and ``conflicts`` (a plain apply stops)."""

    commit: str
    tree: str
    base: str
    written: tuple[CommitEntry, ...]
    removed: tuple[str, ...]
    left: tuple[Left, ...]
    held: tuple[Change, ...]
    conflicts: tuple[Conflict, ...]


@dataclass(frozen=True)
class Pushed:
    """A push's answer: the branch, the commit it now names, the remote's URL (normalised, never with credentials),
    and ``status``: ``created``, ``replaced`` (with the lease) or ``unchanged`` (it named that commit already)."""

    branch: str
    commit: str
    url: str
    status: str


def session_commit(
    layer: Layer,
    session_id: str,
    mirror: Path,
    base: str,
    *,
    author: tuple[str, str],
    message: str,
    force: Collection[str] = (),
    limit: int = MAX_COMMIT_BYTES,
) -> Built:
    """The commit on ``base`` of what a plain apply of ``layer`` writes (``force``: trusted paths taken by name),
    built in the mirror at ``mirror`` (see the module). Raises GitPushRequestError (an author or message refused),
    GitRefError (``base`` is not the session's pin or its checkout's commit), GitTooLargeError (files past
    ``limit``), TooManyEntriesError (a layer past its ``names`` limit), GitError (git refused a name or failed).
    The layer is only read; what is written is objects in the mirror, unreferenced until pushed."""
    variables = _identity(author) + _identity(author, "COMMITTER")
    body = _message(message)
    git = Git(home(_data_dir(mirror)))
    _check_base(layer, session_id, mirror, base)
    plain = plain_apply(layer, force)
    removed, adding, left = _plan(plain.chosen)
    _within(adding, limit)
    written, unreadable = _hash_all(git, layer, mirror, adding, limit)
    tree = _tree(git, mirror, base, written, removed)
    commit = replace(git, variables=variables).run(
        ["commit-tree", "--no-gpg-sign", tree, "-p", base], mirror, stdin=body
    )
    held, conflicts = tuple(plain.held), tuple(plain.conflicts)
    return Built(
        commit.decode().strip(), tree, base, tuple(written), tuple(removed), tuple(left + unreadable), held, conflicts
    )


def _tree(git: Git, mirror: Path, base: str, written: list[CommitEntry], removed: list[str]) -> str:
    """The tree of ``base`` with ``removed`` gone and ``written`` in, made in a scratch index and checked entry by
    entry (``--index-info`` skips a name it refuses and still succeeds)."""
    with _scratch(_data_dir(mirror)) as scratch:
        indexed = replace(git, variables=(("GIT_INDEX_FILE", str(scratch / "index")),))
        indexed.run(["read-tree", base], mirror)
        _remove(indexed, mirror, removed)
        _add(indexed, mirror, written)
        tree = indexed.run(["write-tree"], mirror).decode().strip()
    _verify(git, mirror, base, tree, written, removed)
    return tree


def _identity(author: tuple[str, str], who: str = "AUTHOR") -> tuple[tuple[str, str], ...]:
    """git's variables for ``author`` (name, email) as ``who``; GitPushRequestError for one git would mangle."""
    name, email = author
    for what, value in (("name", name), ("email", email)):
        if not value.strip() or len(value) > MAX_AUTHOR or _hidden(value) or any(c in value for c in "<>"):
            raise GitPushRequestError(
                f"The commit's author {what} {value[:80]!r} is empty, too long, or holds '<', '>' or a control "
                "character.",
                hint="Give the author as a plain name and email address.",
            )
    return ((f"GIT_{who}_NAME", name), (f"GIT_{who}_EMAIL", email))


def _message(message: str) -> bytes:
    """The commit message's bytes, ending with a newline; refused when empty, too long or holding a NUL, an
    escape a terminal would obey when ``git log`` shows it, or a bidi control that would reorder what it shows."""
    text = message.strip("\n")
    if not text.strip() or len(text) > MAX_MESSAGE or any(_refused_in_message(c) for c in text):
        raise GitPushRequestError(
            "The commit message is empty, longer than 64 KiB, or holds a control character.",
            hint="Give a message of plain text.",
        )
    return text.encode("utf-8", "surrogateescape") + b"\n"


BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""The characters that reorder how text around them is shown (the "trojan source" ones)."""


def _refused_in_message(char: str) -> bool:
    return (unicodedata.category(char) == "Cc" and char not in "\n\t") or char in BIDI_CONTROLS


def plain_line(text: str) -> str:
    """``text`` as one line a commit message may hold: what it would refuse (a control character, a bidi control,
    a surrogate) spelled as U+FFFD, so a message made from a task never fails the push it was made for."""
    return "".join("\ufffd" if _refused_in_message(c) or unicodedata.category(c) == "Cs" else c for c in text)


def _hidden(text: str) -> bool:
    """Whether ``text`` holds a control character or an invisible format one (a bidi control, a zero-width)."""
    return any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in text)


def _data_dir(mirror: Path) -> Path:
    """The data directory of a mirror ``gitmirror`` made (``<data_dir>/git/mirrors/<key>``)."""
    if mirror.parent.name != "mirrors" or mirror.parent.parent.name != "git":
        raise GitError(f"{mirror} is not a mirror of the controller's (<data_dir>/git/mirrors/<key>).")
    return mirror.parent.parent.parent


def _check_base(layer: Layer, session_id: str, mirror: Path, base: str) -> None:
    """Refuse a ``base`` that is not the session's pin or not the commit its checkout holds: the commit must hold
    what an apply writes onto *that* tree, or it would undo others' work."""
    if not _FULL_ID.fullmatch(base):
        raise GitRefError(f"A session's commit is built on a full commit id, not {base[:80]!r}.")
    pin = gitmirror.pinned(mirror, session_id)
    if pin != base:
        raise GitRefError(f"Session {session_id}'s pin in the mirror is {pin or 'missing'}, not {base}.")
    lower = open_repo(layer)
    try:
        with beneath.reading(lower, ".git/HEAD") as fd:
            head = os.read(fd, 100).decode(errors="replace").strip()
    except (OSError, UnsafePathError):
        head = ""
    finally:
        os.close(lower)
    if head != base:
        raise GitRefError(f"The session's checkout is not the commit {base} (its .git names {head[:40] or 'none'}).")


def _plan(chosen: list[Change]) -> tuple[list[str], list[Change], list[Left]]:
    """What the chosen changes do to the base's index: the paths removed, the changes whose file or symlink is
    added (or replaces what was there), and those left out with why."""
    parents = Parents(chosen)
    removed: list[str] = []
    adding: list[Change] = []
    left: list[Left] = []
    for change in chosen:
        if not has_entries(change):
            why = parents.directory(change)
            if why:
                left.append(Left(change, why))
            continue
        new = change.kind != Kind.DELETED and change.type in (FileType.FILE, FileType.SYMLINK)
        why = refused_name(change.path, change.type == FileType.SYMLINK) if new else ""
        if why:
            left.append(Left(change, why))
            continue
        if new:
            adding.append(change)
        elif change.kind != Kind.ADDED and change.previous in (FileType.FILE, FileType.SYMLINK):
            removed.append(change.path)
    return removed, adding, left


def refused_name(path: str, symlink: bool = False) -> str:
    """Why git (with ``core.protectNTFS`` and ``core.protectHFS``) would refuse ``path`` in a tree; empty when it
    takes it. A component is read as NTFS reads it (up to a ``:`` or a backslash) and as HFS does (its ignored
    characters dropped): ``.git`` in any case or spelling, ``git~1``, ``..``, an empty one; a symlink named
    ``.gitmodules``. The same names ``gittree`` refuses to write."""
    for part in path.split("/"):
        name = _NTFS_END.split(part, maxsplit=1)[0].translate(HFS_IGNORED) if part else part
        if gittree.unsafe_component(os.fsencode(name)) or gittree.unsafe_component(os.fsencode(part)):
            return "a name git refuses in a commit (.git in some spelling, '..', or an empty part)"
    last = path.rsplit("/", 1)[-1].translate(HFS_IGNORED).lower().rstrip(". ")
    if symlink and (last == ".gitmodules" or _GITMODULES_SHORT.fullmatch(last)):
        return "a symlink named .gitmodules, which git refuses in a commit"
    return ""


def _within(adding: list[Change], limit: int) -> None:
    total = sum(change.size for change in adding if change.type == FileType.FILE)
    if total > limit:
        raise GitTooLargeError(f"The session's files hold {total:,} bytes, more than the {limit:,} a commit may.")


def _hash_all(
    git: Git, layer: Layer, mirror: Path, adding: list[Change], limit: int
) -> tuple[list[CommitEntry], list[Left]]:
    """Each added file's or symlink's blob, written into the mirror from the layer's bytes, within ``limit`` bytes
    as the files are when opened (a file grown since the scan counts as it is now); those unreadable."""
    written: list[CommitEntry] = []
    left: list[Left] = []
    upper = open_upper(layer)
    try:
        for change in adding:
            try:
                entry, size = _hashed(git, mirror, upper, change, limit)
                written.append(entry)
                limit -= size
            except (OSError, UnsafePathError) as err:
                left.append(Left(change, f"it could not be read ({type(err).__name__})"))
    finally:
        os.close(upper)
    return written, left


HASH = ["hash-object", "-w", "--no-filters", "--stdin"]


def _hashed(git: Git, mirror: Path, upper: int, change: Change, room: int) -> tuple[CommitEntry, int]:
    """The entry of one change and the bytes it took: a symlink's target as its blob, or a file's bytes streamed
    from the upper layer (GitTooLargeError when the file, as opened, is past ``room``)."""
    if change.type == FileType.SYMLINK:
        target = os.fsencode(change.target or beneath.readlink(upper, change.path))
        blob = git.run(HASH, mirror, stdin=target)
        return CommitEntry(change.path, SYMLINK_MODE, blob.decode().strip()), 0
    held = change.previous_mode if change.previous == FileType.FILE else None
    mode = file_mode(applied_mode(change.mode, held))
    with beneath.reading(upper, change.path) as fd:
        size = os.fstat(fd).st_size
        if size > room:
            raise GitTooLargeError(f"The session's files grew past the {room:,} bytes a commit may still take.")
        with git.started(HASH, mirror, stdin=fd) as run, run.deadline(TIMEOUT_S) as expired:
            out = run.read(100)
            code = run.proc.wait()
            said = run.stderr() if code != 0 else b""
    if code != 0 or expired.is_set() or not _FULL_ID.fullmatch(out.decode(errors="replace").strip()):
        raise git.failure(HASH, said)
    return CommitEntry(change.path, mode, out.decode().strip()), size


@contextlib.contextmanager
def _scratch(data_dir: Path) -> Iterator[Path]:
    """A directory of the controller's for one commit's index, removed after."""
    spare = data_dir / "git" / "tmp"
    spare.mkdir(parents=True, exist_ok=True)
    made = Path(tempfile.mkdtemp(prefix="commit-", dir=spare))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _remove(git: Git, mirror: Path, removed: list[str]) -> None:
    """Drop ``removed`` from the index (``--index-info``, mode 0: it needs no work tree, and takes any byte)."""
    if removed:
        lines = b"".join(b"0 %s\t%s\0" % (NULL_ID.encode(), os.fsencode(path)) for path in removed)
        git.run(["update-index", "-z", "--index-info"], mirror, stdin=lines)


def _add(git: Git, mirror: Path, written: list[CommitEntry]) -> None:
    """Add each entry with ``--cacheinfo``, which refuses (and fails the whole run on) a name git must not hold."""
    batch: list[str] = []
    size = 0
    for entry in written:
        arg = f"{entry.mode},{entry.blob},{entry.path}"
        if batch and size + len(arg) > ARGV_BYTES:
            git.run(["update-index", "--add", *batch], mirror)
            batch, size = [], 0
        batch += ["--cacheinfo", arg]
        size += len(arg) + 16
    if batch:
        git.run(["update-index", "--add", *batch], mirror)


def _verify(git: Git, mirror: Path, base: str, tree: str, written: list[CommitEntry], removed: list[str]) -> None:
    """Read the written tree back: it must be the base's, less ``removed``, with ``written``, and nothing else."""
    expected = _listing(git, mirror, base)
    for path in removed:
        expected.pop(path, None)
    expected.update({entry.path: (entry.mode, entry.blob) for entry in written})
    found = _listing(git, mirror, tree)
    differ = sorted(set(expected.items()) ^ set(found.items()))
    if differ:
        raise GitError(f"The tree git wrote is not the one asked for at {len(differ)} path(s), e.g. {differ[0][0]!r}.")


def _listing(git: Git, mirror: Path, tree: str) -> dict[str, tuple[str, str]]:
    listed = git.run(["ls-tree", "-r", "-z", "-l", "--full-tree", tree], mirror)
    return {os.fsdecode(e.path): (e.mode, e.oid) for e in gittree.parse_listing(listed)}


def check_branch(git: Git, branch: str, prefix: str = DEFAULT_PREFIX) -> str:
    """``refs/heads/<branch>``, or GitPushRequestError before anything is sent: a control or invisible character,
    a name outside ``prefix`` (or the prefix alone), one ``git check-ref-format --branch`` refuses or rewrites, one
    longer than 200 characters, or with a component ``@`` (which git's revision syntax reads as HEAD)."""
    shown = repr(branch[:80])
    if _hidden(branch):
        raise GitPushRequestError(f"The branch name {shown} holds a control or invisible character.")
    if not branch.startswith(prefix) or branch == prefix:
        raise GitPushRequestError(f"The branch {shown} is not under {prefix!r}, the branches a session may push.")
    try:
        checked = git.run(["check-ref-format", "--branch", branch], git.home).decode().strip()
    except GitError:
        raise GitPushRequestError(f"The branch name {shown} is not one git takes (check-ref-format).") from None
    if checked != branch or len(branch) > 200 or "@" in branch.split("/"):  # a lone @ reads as HEAD
        raise GitPushRequestError(f"The branch name {shown} is not one git takes as it is.")
    return f"refs/heads/{branch}"


def push(
    data_dir: Path,
    mirror: Path,
    url: str,
    commit: str,
    branch: str,
    *,
    options: MirrorOptions,
    lease: Lease | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> Pushed:
    """Push ``commit`` (in the mirror of ``url`` at ``mirror``) to ``refs/heads/<branch>`` at the remote: a new
    branch only, or with a ``lease`` one replaced only if it still holds the lease's expected commit (or, without
    one, what a fetch just found).

    Raises, before anything is sent, GitPushRequestError (the branch name) or GitRefError (no such commit); then
    GitPushRejectedError (``exists``, ``moved``, ``refused``), GitAuthError, GitRemoteError or GitPushError, each
    naming the host and the branch, never a credential."""
    url = gitmirror.normalise(url)
    git = gitmirror.remote_git(data_dir, url, options)
    ref = check_branch(git, branch, prefix)
    if mirror != gitmirror.path_of(data_dir, url):
        raise GitError(f"{mirror} is not the controller's mirror of {url}.")
    if not _FULL_ID.fullmatch(commit) or not _holds(git, mirror, commit):
        raise GitRefError(f"The mirror holds no commit {commit[:80]!r} to push.")
    expected = _expected(git, data_dir, mirror, url, ref, options, lease)
    gitmirror.reach(url, options)
    args = ["push", *PUSH_FLAGS, f"--force-with-lease={ref}:{expected}", "--", url, f"{commit}:{ref}"]
    code, out, said = _run_push(git, mirror, args, branch, url, options)
    return _answer(git, _Attempt(url, branch, ref, commit, expected), code, out, said)


def _run_push(
    git: Git, mirror: Path, args: list[str], branch: str, url: str, options: MirrorOptions
) -> tuple[int, bytes, bytes]:
    """Run the push within ``timeout_s`` and the fetch's memory bound; its exit code, stdout and stderr."""
    memory = options.max_bytes + gitmirror.MEMORY_ALLOWANCE
    with (
        git.started(args, mirror) as run,
        run.deadline(options.timeout_s) as expired,
        run.memory_bound(memory, gitmirror.MEMORY_WATCH_S, uncounted=gitcreds.HELPER) as swollen,
    ):
        out = run.read(OUTPUT_LIMIT)
        code = run.proc.wait()
        said = run.stderr()
    if swollen.is_set():
        raise GitTooLargeError(
            f"The push of {branch} to {_host(url)} held more than {memory:,} bytes of memory and was stopped. git "
            "reads the remote's whole list of refs before it sends anything, so a list that large sent nothing; "
            "stopped later, the remote may or may not have taken it (look at the branch there)."
        )
    if expired.is_set():
        raise GitRemoteError(
            f"The push of {branch} to {_host(url)} took longer than {options.timeout_s:g} s and was stopped; the "
            "remote may or may not have taken it (look at the branch there)."
        )
    return code, out, said


PUSH_FLAGS = ("--porcelain", "--no-verify", "--no-signed", "--no-recurse-submodules")
"""Machine-readable lines; no hook, signature or submodule of the controller's runs or is asked for."""


@dataclass(frozen=True)
class _Attempt:
    """What a push asked for: the remote, the branch (and its ref), the commit, the lease's expected id."""

    url: str
    branch: str
    ref: str
    commit: str
    expected: str


def _holds(git: Git, mirror: Path, commit: str) -> bool:
    try:
        git.run(["cat-file", "-e", f"{commit}^{{commit}}"], mirror)
    except GitError:
        return False
    return True


@dataclass(frozen=True)
class Lease:
    """Leave to replace an existing branch: only while it names ``expected`` (a full commit id, say the caller's
    last push to it), or, when that is None, what a fetch just before the push finds there."""

    expected: str | None = None


def _expected(
    git: Git, data_dir: Path, mirror: Path, url: str, ref: str, options: MirrorOptions, lease: Lease | None
) -> str:
    """The commit the remote's branch must name for the push to land; empty: the branch must not exist."""
    if lease is None:
        return ""
    if lease.expected is None:
        return _fetched(git, data_dir, mirror, url, ref, options)
    if not _FULL_ID.fullmatch(lease.expected):
        raise GitPushRequestError(f"A lease's expected commit is a full commit id, not {lease.expected[:80]!r}.")
    return lease.expected


def _fetched(git: Git, data_dir: Path, mirror: Path, url: str, ref: str, options: MirrorOptions) -> str:
    """What the remote's branch holds, as a fetch into the mirror (under its lock) finds it; empty when none."""
    with gitmirror.locked(gitmirror.lock_of(mirror), options.timeout_s):
        gitmirror.fetch(git, mirror, url, options)
        try:
            return git.run(["rev-parse", "--quiet", "--verify", "--end-of-options", ref], mirror).decode().strip()
        except GitError:
            return ""


def _host(url: str) -> str:
    """``host:port`` of a normalised URL, as errors name it."""
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or gitcreds.DEFAULT_PORTS[parts.scheme]}"


_STATUS = {"*": "created", "+": "replaced", " ": "replaced", "=": "unchanged"}


def _answer(git: Git, asked: _Attempt, code: int, out: bytes, said: bytes) -> Pushed:
    """The push's outcome from its porcelain line for the ref (or, without one, from what git said)."""
    url, branch = asked.url, asked.branch
    line = _line_for(out, asked.ref)
    if line is not None and code == 0 and line[0] in _STATUS:
        return Pushed(branch, asked.commit, url, _STATUS[line[0]])
    host = _host(url)
    if line is not None and line[0] == "!":
        raise _rejected(git, host, branch, asked.expected, line[1])
    text = said.decode(errors="replace")
    if any(words in text for words in gitmirror.AUTH_WORDS):
        raise GitAuthError(f"{host} refused the credentials for pushing {branch} to {url} (or none match it).")
    if any(words in text for words in gitmirror.UNREACHABLE_WORDS):
        raise GitRemoteError(f"{host} could not be reached to push {branch}: {git.failure(['push'], said)}")
    if "not found" in text or "returned error: 404" in text:
        raise GitRemoteError(f"{host} has no repository at {url} to push {branch} to.")
    raise GitPushError(f"The push of {branch} to {host} failed: {git.failure(['push'], said)}")


def _line_for(out: bytes, ref: str) -> tuple[str, str] | None:
    """The flag and summary of ``ref``'s line in ``push --porcelain``'s output (``F\\tFROM:TO\\tSUMMARY``)."""
    for raw in out.decode(errors="replace").splitlines():
        parts = raw.split("\t")
        if len(parts) >= 3 and len(parts[0]) == 1 and parts[1].endswith(f":{ref}"):
            return parts[0], "\t".join(parts[2:])
    return None


def _rejected(git: Git, host: str, branch: str, expected: str, summary: str) -> GitPushRejectedError:
    """The refusal a ``!`` line says: the lease failed (the branch exists, or moved), or the remote declined."""
    why = redact(summary, git.secrets)[:200]
    if "[remote rejected]" in summary or "[remote failure]" in summary:
        reason, what = "refused", f"{host} refused the branch {branch}: {why}"
    elif expected:
        reason, what = "moved", f"The branch {branch} at {host} moved since it was fetched; it was not replaced."
    else:
        reason, what = "exists", f"The branch {branch} exists at {host} already; it was not overwritten."
    return GitPushRejectedError(what, reason, host, branch)
