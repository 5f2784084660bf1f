"""search: ripgrep over the workspace when the image has it, else the same search in Python.

ripgrep runs like any command, so its output and runtime are bounded too. An environment
image (a repository's own) may lack ripgrep; then ``python_search`` answers the same
arguments in the same shape: ``path:line:text`` lines (no path for a single file), lines cut
at 300 bytes with ripgrep's marker, at most 100 matches per file, hidden files, ``.git`` and
what ``.gitignore`` / ``.ignore`` / ``.rgignore`` exclude skipped, binary files skipped,
symlinks not followed, exit code 0 / 1 / 2, the same output cap and deadline.

This module runs inside images whose Python may be as old as 3.10.
"""

from __future__ import annotations

import os
import re
import stat
import time

from .capture import Capture
from .errors import JSON, ToolError
from .limits import DEFAULT_SEARCH_OUTPUT, SEARCH_TIMEOUT_S
from .processes import run
from .workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

_RG = ["rg", "--line-number", "--no-heading", "--color", "never", "--max-columns", "300", "--max-columns-preview"]
MAX_COUNT = 100
MAX_COLUMNS = 300
LONG_LINE = b" [... omitted end of long line]"
MAX_LINE_BYTES = 1 << 20
"""A longer line is matched on its first MAX_LINE_BYTES only, so one endless line costs bounded memory."""
READ_SIZE = 1 << 16
IGNORE_FILES = (".gitignore", ".ignore", ".rgignore")


def _on_path(program: str) -> bool:
    """Whether ``program`` is an executable file in a directory of this process's PATH (shutil.which, without
    the import of shutil, which brings bz2 and lzma along)."""
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(directory, program)
        if directory and os.path.isfile(path) and os.access(path, os.X_OK):
            return True
    return False


def search(ws: Workspace, args: JSON) -> JSON:
    """Matches of ``pattern`` under ``path``; a bad regex or glob is the model's error, other failures are reported."""
    target = ws.resolve(args.get("path") or ".")
    if not os.path.exists(target):
        raise ws.os_error(FileNotFoundError(2, "not found"), target)
    if not _on_path("rg"):  # the toolbox's own PATH, never the agent's
        return python_search(ws, target, args)
    cmd = [*_RG, "--max-count", str(MAX_COUNT)]
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


# --------------------------------------------------------------------------- the Python search


def glob_regex(glob: str) -> str:
    """A gitignore-style glob as a regex over a ``/``-separated path: ``*`` and ``?`` stay within a name,
    ``**`` crosses directories, ``[...]`` is a class (``[!...]`` negated)."""
    out, i, n = [], 0, len(glob)
    while i < n:
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and "]" in glob[i + 2 :]:
            end = glob.index("]", i + 2)
            body = glob[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


class Rule:
    """One line of an ignore file, or one ``--glob``: matched against a path relative to where it was written."""

    def __init__(self, line: str) -> None:
        self.negated = line.startswith("!")
        line = line[1:] if self.negated else line
        self.dir_only = line.endswith("/")
        line = line.rstrip("/")
        self.anchored = "/" in line
        self.regex = re.compile(glob_regex(line.lstrip("/")) + r"\Z", re.DOTALL)

    def matches(self, rel: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        return bool(self.regex.match(rel if self.anchored else rel.rsplit("/", 1)[-1]))


def _ignore_rules(directory: str) -> list[Rule]:
    rules = []
    for name in IGNORE_FILES:
        try:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            text = os.read(fd, 1 << 20).decode("utf-8", "replace")
        finally:
            os.close(fd)
        for raw in text.splitlines():
            line = raw.rstrip()
            if line and not line.startswith("#"):
                rules.append(Rule(line))
    return rules


Frame = tuple[str, list[Rule]]  # (directory relative to the search root, with "/" or "", its ignore rules)


def _ignored(stack: list[Frame], rel: str, is_dir: bool) -> bool:
    """Whether the ignore files from the root down to here exclude ``rel``: the last matching rule wins."""
    verdict = False
    for base, rules in stack:
        if not rel.startswith(base):
            continue
        below = rel[len(base) :]
        for rule in rules:
            if rule.matches(below, is_dir):
                verdict = not rule.negated
    return verdict


class _Search:
    def __init__(self, ws: Workspace, target: str, args: JSON) -> None:
        try:
            self.regex: re.Pattern[str] = re.compile(args["pattern"])
        except re.error as err:
            raise ToolError("search_failed", f"regex parse error: {err}") from None
        glob = args.get("glob") or ""
        self.glob: Rule | None = Rule(glob) if glob else None
        self.ws = ws
        self.target = target
        self.out = Capture(args.get("max_output") or DEFAULT_SEARCH_OUTPUT)
        self.deadline = time.monotonic() + SEARCH_TIMEOUT_S
        self.errors: list[str] = []
        self.matched = False
        self.timed_out = False

    def late(self) -> bool:
        if time.monotonic() > self.deadline:
            self.timed_out = True
        return self.timed_out

    def shown(self, rel: str) -> str:
        if self.target == self.ws.root:
            return rel
        return self.ws.display(self.target) + "/" + rel

    def error(self, path: str, err: OSError) -> None:
        self.errors.append(f"{path}: {err.strerror} (os error {err.errno})")

    def wanted(self, rel: str, is_dir: bool, stack: list[Frame]) -> bool:
        glob = self.glob
        if glob is not None and glob.negated and glob.matches(rel, is_dir):
            return False
        if glob is not None and not glob.negated and not is_dir:
            return glob.matches(rel, False)  # a --glob overrides the ignore files
        return not _ignored(stack, rel, is_dir)

    def walk(self) -> None:
        stack: list[Frame] = []
        pending: list[tuple[str, int]] = [("", 0)]
        while pending and not self.late():
            rel_dir, depth = pending.pop()
            del stack[depth:]
            full_dir = os.path.join(self.target, rel_dir) if rel_dir else self.target
            stack.append((rel_dir, _ignore_rules(full_dir)))
            try:
                with os.scandir(full_dir) as listing:
                    children = sorted(listing, key=lambda e: e.name)
            except OSError as err:
                self.error(self.shown(rel_dir.rstrip("/")) or ".", err)
                continue
            subdirs = []
            for child in children:
                if child.name.startswith(".") or self.late():
                    continue
                rel = rel_dir + child.name
                try:
                    mode = child.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                if stat.S_ISDIR(mode):
                    if self.wanted(rel, True, stack):
                        subdirs.append((rel + "/", depth + 1))
                elif stat.S_ISREG(mode) and self.wanted(rel, False, stack):
                    self.file(child.path, self.shown(rel) + ":")
            pending.extend(reversed(subdirs))

    def file(self, path: str, prefix: str, explicit: bool = False) -> None:
        """Search one regular file; ``prefix`` is ``path:`` (or empty for a single file, as ripgrep shows it)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError as err:
            self.error(prefix.rstrip(":") or self.ws.display(path), err)
            return
        try:
            with os.fdopen(fd, "rb") as f:
                self._lines(f, prefix.encode("utf-8", "surrogateescape"), explicit)
        except OSError as err:
            self.error(prefix.rstrip(":") or self.ws.display(path), err)

    def _lines(self, f: IO[bytes], prefix: bytes, explicit: bool) -> None:
        read = f.read
        count = 0
        number = 0
        rest = b""
        offset = 0
        while count < MAX_COUNT and not self.late():
            chunk = read(READ_SIZE)
            if not chunk and not rest:
                return
            if b"\x00" in chunk:
                self._binary(prefix, offset + chunk.index(b"\x00"), rest + chunk, explicit)
                return
            offset += len(chunk)
            data = rest + chunk
            lines = data.split(b"\n")
            rest = lines.pop() if chunk else b""
            if len(rest) > MAX_LINE_BYTES:  # an endless line: match its start, skip the rest of it
                lines.append(rest[:MAX_LINE_BYTES])
                rest = b""
                self._skip_line(f)
            for line in lines:
                number += 1
                if self.regex.search(line.decode("utf-8", "surrogateescape")):
                    self.matched = True
                    count += 1
                    shown = line[:MAX_COLUMNS] + LONG_LINE if len(line) > MAX_COLUMNS else line
                    self.out.feed(prefix + str(number).encode() + b":" + shown + b"\n")
                    if count >= MAX_COUNT:
                        return
            if not chunk:
                return

    def _skip_line(self, f: IO[bytes]) -> None:
        while not self.late():
            chunk = f.read(READ_SIZE)
            if not chunk:
                return
            if b"\n" in chunk:
                f.seek(chunk.index(b"\n") + 1 - len(chunk), os.SEEK_CUR)
                return

    def _binary(self, prefix: bytes, at: int, head: bytes, explicit: bool) -> None:
        """A binary file is skipped in a walk; named on its own, ripgrep says whether it matches, and so do we."""
        if explicit and self.regex.search(head.replace(b"\x00", b"\n").decode("utf-8", "surrogateescape")):
            self.matched = True
            self.out.feed(prefix + f'binary file matches (found "\\0" byte around offset {at})\n'.encode())


def python_search(ws: Workspace, target: str, args: JSON) -> JSON:
    """The search without ripgrep: same arguments, same answer shape, same bounds."""
    job = _Search(ws, target, args)
    try:
        mode = os.stat(target).st_mode
    except OSError as err:
        raise ws.os_error(err, target) from None
    if stat.S_ISDIR(mode):
        job.walk()
    elif stat.S_ISREG(mode):
        job.file(target, "", explicit=True)
    code = 2 if job.errors else 0 if job.matched else 1
    errors = "\n".join(job.errors)
    return {"matches": job.out.result(), "exit_code": code, "timed_out": job.timed_out, "errors": errors[-2000:]}
