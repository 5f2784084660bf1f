"""Running the system ``git`` on the controller's own repositories (a mirror, a tree's ``.git``), with nothing of
the host's, the user's or the remote's configuration.

The controller runs as a service, often as root, on URLs a session's owner typed. Each hardening closes a way a
repository, a remote or the controller's own environment could make that git do more than fetch and read:

* **The environment is built, not inherited** (``scrubbed_env``): every ``GIT_*`` variable is dropped
  (``GIT_DIR``, ``GIT_SSH_COMMAND``, ``GIT_TRACE*`` and ``GIT_CURL_VERBOSE``, which print credentials and
  headers), and so are ``*_proxy`` (a proxy would see every request), ``SSL_*`` and ``CURL_*`` settings.
  ``GIT_CONFIG_NOSYSTEM``/``GIT_CONFIG_GLOBAL=/dev/null``: no one else's config applies. ``HOME`` is an empty
  directory of the controller's (``home``): libcurl, as git sets it up, reads ``~/.netrc``, which would hand a
  remote credentials that are not the session's. ``GIT_TERMINAL_PROMPT=0`` and an empty ``core.askPass``:
  a missing credential fails instead of waiting on a terminal nobody watches. ``LC_ALL=C``: git's messages
  are read by ``gitmirror`` to tell an auth failure from an unreachable host.
* **The config given on every command line** (``HARDENING``): only http and https as transports
  (``protocol.allow=never`` otherwise: no ``file://``, ``ext::`` or ssh command of a URL's choosing), no
  redirects (an allowed host must not send git to one the URL policy never checked), no proxy, no hooks, no
  fsmonitor command, no submodules, no LFS filter (a pointer stays a pointer), no credential helper but ours,
  no automatic gc or maintenance (it detaches and outlives the command; a gc could drop a pinned commit's
  objects under a session), ``transfer.fsckObjects`` (malformed objects and ``.git``-like tree names refused
  on arrival), ``core.protectNTFS``/``core.protectHFS`` (the same names in their other spellings).
* **Bounded runs**: each command has a timeout (its process group is killed), and what it prints is read up to
  a limit. The memory a command and everything it started hold can be measured (``process_memory``) or bounded
  (``Started.memory_bound``): git reads a remote's whole ref listing into memory before it writes anything, so
  a watch of the disk alone never sees an answer that does not end.
* **Redacted errors** (``redact``): git's own words go into an error's message only after userinfo,
  ``Authorization`` values, ``password=``/``token=``-like pairs and every secret the caller knows are removed,
  control characters are shown as ``?``, and only the last lines are kept.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ..errors import GitError

GIT = "git"
TIMEOUT_S = 120.0
OUTPUT_LIMIT = 64 << 20
"""What a command may print to stdout before it is stopped (a tree's listing of a million names fits)."""
MESSAGE_LINES = 6
MESSAGE_CHARS = 1200

HARDENING: tuple[tuple[str, str], ...] = (
    ("protocol.allow", "never"),
    ("protocol.https.allow", "always"),
    ("protocol.http.allow", "always"),
    ("http.followRedirects", "false"),
    ("http.proxy", ""),
    ("core.askPass", ""),
    ("credential.helper", ""),  # empties the list: only a helper given after it (ours) is asked
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.protectNTFS", "true"),
    ("core.protectHFS", "true"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("filter.lfs.smudge", ""),
    ("filter.lfs.clean", ""),
    ("filter.lfs.process", ""),
    ("filter.lfs.required", "false"),
    ("transfer.fsckObjects", "true"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("fetch.writeCommitGraph", "false"),
)
KEPT_VARIABLES = ("PATH",)
"""The only variables taken from the controller's environment; everything else git sees is set here."""


def scrubbed_env(environ: Mapping[str, str], home: Path) -> dict[str, str]:
    """The environment git runs in: ``KEPT_VARIABLES`` from ``environ``, and the settings that make it ours."""
    env = {name: environ[name] for name in KEPT_VARIABLES if name in environ}
    env.setdefault("PATH", os.defpath)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home),
        LC_ALL="C",
        LANG="C",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_ATTR_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_LFS_SKIP_SMUDGE="1",
        GIT_NO_REPLACE_OBJECTS="1",
    )
    return env


def home(data_dir: Path) -> Path:
    """The controller's empty ``HOME`` for git (``<data_dir>/git/home``); anything found in it is refused."""
    path = data_dir / "git" / "home"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.listdir(path):
        raise GitError(f"{path} must be empty: git's HOME holds no .netrc or config but the controller's.")
    return path


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")
_HEADER = re.compile(r"(?i)\b((?:proxy-)?authorization|cookie|set-cookie)(\s*[:=]\s*).*")
_SCHEME_VALUE = re.compile(r"(?i)\b(basic|bearer|token|digest)\s+[A-Za-z0-9+/=._~-]{6,}")
_PAIR = re.compile(r"(?i)\b(password|passwd|pass|token|secret|access_token|api_key|username|user)(\s*[=:]\s*)\S+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def redact(text: str, secrets: Sequence[str] = ()) -> str:
    """``text`` (git's stderr) without credentials: fit for an error message, a log line or an API answer."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _USERINFO.sub(r"\1***@", text)
    text = _HEADER.sub(r"\1\2***", text)
    text = _SCHEME_VALUE.sub(r"\1 ***", text)
    text = _PAIR.sub(r"\1\2***", text)
    return _CONTROL.sub("?", text)


def last_words(stderr: bytes, secrets: Sequence[str] = ()) -> str:
    """The last few lines git printed, redacted and bounded: what an error quotes."""
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    text = " / ".join(lines[-MESSAGE_LINES:])
    return redact(text, secrets)[-MESSAGE_CHARS:]


def process_memory(pid: int, newer: bool = False, uncounted: str = "") -> int:
    """The anonymous resident memory (``RssAnon``, bytes) of process ``pid`` and of every process descended from it
    or in its process group, read from ``/proc`` now; a process that ends meanwhile counts for nothing. Memory
    mapped from files (git's code, the shared libraries) is not counted: it is the same whatever the remote sends.

    ``newer`` looks only at processes numbered above ``pid`` (those started after it, unless the numbers wrapped
    around meanwhile): a few reads instead of one per process of the machine, for a caller that looks often and
    looks at all of them now and then. A process with ``uncounted`` among its arguments counts for nothing (a
    credential helper of ours, which holds nothing a remote sent)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (not newer or int(name) > pid):
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
                child, parent, group = int(name), int(fields[1]), int(fields[2])
                parents[child] = pid if group == pid and child != pid else parent
    tree, frontier = {pid}, [pid]
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    while frontier:
        for child in children.get(frontier.pop(), ()):
            if child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(_anonymous(member) for member in tree if not uncounted or not _running(member, uncounted))


def _running(pid: int, argument: str) -> bool:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return os.fsencode(argument) in cmdline.read().split(b"\0")
    return False


PAGE = os.sysconf("SC_PAGE_SIZE")


def _anonymous(pid: int) -> int:
    """``RssAnon`` of ``pid``: its resident pages less those shared with a file (``/proc/<pid>/statm``)."""
    with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{pid}/statm", "rb") as statm:
        fields = statm.read().split()
        return (int(fields[1]) - int(fields[2])) * PAGE
    return 0


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop ``proc`` and everything it started (git's transport helpers): each runs in its own process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@dataclass(frozen=True)
class Git:
    """How the controller runs git: the empty ``home``, config of the caller's (a credential helper, a pinned
    address) given after ``HARDENING``, the ``secrets`` no message may hold, and ``variables`` of the caller's set
    after the scrubbed environment (a temporary index, a commit's author: never a credential)."""

    home: Path
    config: tuple[tuple[str, str], ...] = ()
    secrets: tuple[str, ...] = ()
    variables: tuple[tuple[str, str], ...] = ()

    def argv(self, args: Sequence[str]) -> list[str]:
        pairs = [f"{key}={value}" for key, value in (*HARDENING, *self.config)]
        return [GIT, *(arg for pair in pairs for arg in ("-c", pair)), *args]

    def env(self) -> dict[str, str]:
        return {**scrubbed_env(os.environ, self.home), **dict(self.variables)}

    def failure(self, args: Sequence[str], stderr: bytes, what: str = "") -> GitError:
        """The error of a failed command: which one, and git's last words, redacted."""
        said = last_words(stderr, self.secrets)
        return GitError(f"git {args[0]} failed{what}: {said or 'it printed nothing'}.")

    @contextlib.contextmanager
    def started(self, args: Sequence[str], cwd: Path, stdin: int = subprocess.DEVNULL) -> Iterator[Started]:
        """``args`` running in ``cwd``, stdout a pipe, stderr kept in a file; killed (its group) on the way out."""
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                self.argv(args),
                cwd=cwd,
                env=self.env(),
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
            try:
                yield Started(proc, err)
            finally:
                kill_group(proc)
                proc.wait()
                if proc.stdout:
                    proc.stdout.close()
                if proc.stdin:
                    proc.stdin.close()

    def run(self, args: Sequence[str], cwd: Path, stdin: bytes | None = None, timeout: float = TIMEOUT_S) -> bytes:
        """What ``git args`` prints, up to ``OUTPUT_LIMIT``; a failure, a timeout or more output is a GitError."""
        piped = subprocess.PIPE if stdin is not None else subprocess.DEVNULL
        with self.started(args, cwd, stdin=piped) as run, run.deadline(timeout) as expired:
            feeder = run.feed(stdin) if stdin is not None else None
            out = run.read(OUTPUT_LIMIT)
            code = run.proc.wait()
            if feeder:
                feeder.join()
            said = run.stderr() if code != 0 else b""
        if expired.is_set():
            raise self.failure(args, said, f" (stopped after {timeout:g} s)")
        if len(out) > OUTPUT_LIMIT:
            raise GitError(f"git {args[0]} printed more than {OUTPUT_LIMIT:,} bytes; it was stopped.")
        if code != 0:
            raise self.failure(args, said)
        return out


@dataclass
class Started:
    """One running git command: its process and its stderr file."""

    proc: subprocess.Popen[bytes]
    err: IO[bytes]

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[threading.Event]:
        """Kill the command's group after ``seconds``; the event yielded says whether that happened."""
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            kill_group(self.proc)

        timer = threading.Timer(seconds, expire)
        timer.start()
        try:
            yield expired
        finally:
            timer.cancel()

    @contextlib.contextmanager
    def memory_bound(
        self, limit: int, every: float, all_every: int = 10, uncounted: str = ""
    ) -> Iterator[threading.Event]:
        """Kill the command's group once it and its children hold more than ``limit`` bytes of memory
        (``process_memory``: the processes started after it every ``every`` seconds, all of them every
        ``all_every`` looks, none running ``uncounted``); the event yielded says whether that happened."""
        passed, done = threading.Event(), threading.Event()

        def watch() -> None:
            looks = 0
            while self.proc.poll() is None:
                if process_memory(self.proc.pid, looks % all_every != 0, uncounted) > limit:
                    passed.set()
                    kill_group(self.proc)
                    return
                looks += 1
                if done.wait(every):
                    return

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            yield passed
        finally:
            done.set()
            thread.join()

    def feed(self, data: bytes) -> threading.Thread:
        """Write ``data`` to its stdin from a thread (so a full stdout pipe cannot deadlock us), then close it."""

        def write() -> None:
            assert self.proc.stdin is not None
            with contextlib.suppress(BrokenPipeError, ValueError), self.proc.stdin:
                self.proc.stdin.write(data)

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        return thread

    def read(self, limit: int) -> bytes:
        """Its stdout to the end, or ``limit + 1`` bytes of it (then the process is stopped)."""
        assert self.proc.stdout is not None
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            kill_group(self.proc)
        return b"".join(chunks)

    def stderr(self, limit: int = 1 << 16) -> bytes:
        """The last ``limit`` bytes it printed to stderr."""
        self.err.flush()
        end = self.err.seek(0, os.SEEK_END)
        self.err.seek(max(0, end - limit))
        return self.err.read()
