"""The host side of a session on the workspace layer: a checkout owned by uid 1000, git run as its owner.

``Host`` makes the checkout (a git repository with one commit, or a plain directory),
a sentinel directory beside it that no session may change, and a marker path that a
planted payload would create if anything on the host ever ran it. ``check`` is what a
user does after applying an agent's work — ``git status``, ``commit -am``, ``add -A`` and
``commit``, ``log`` — followed by the checks that nothing the agent wrote ran or escaped.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

OWNER = 1000
FILES = {
    "README.md": "# demo\n",
    "src/app.py": "def total(items):\n    return sum(items)\n",
    "docs/a.txt": "a\n",
    ".gitignore": "build/\n",
}
SPECIAL = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


def tree(root: Path) -> dict[str, tuple[int, int, int, object]]:
    """Type, mode, owner and bytes (or link target) of every entry below ``root``, symlinks not followed."""
    found: dict[str, tuple[int, int, int, object]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            body: object = None
            if stat.S_ISREG(st.st_mode):
                body = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                body = os.readlink(path)
            found[os.path.relpath(path, root)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, body)
    return found


def chown_tree(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, OWNER, OWNER)


class Host:
    def __init__(self, base: Path, name: str, git: bool = True, files: dict[str, str] | None = None) -> None:
        self.base = base / name
        self.repo, self.home, self.outside = self.base / "repo", self.base / "home", self.base / "outside"
        self.marker = self.home / "MARKER"  # where uid 1000 can write: a payload that ran would leave it
        self.base.mkdir(mode=0o755)
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text("host secret\n")
        (self.outside / "notes").mkdir()
        (self.outside / "notes" / "todo.txt").write_text("buy milk\n")
        chown_tree(self.outside)  # the owner could write here, so a payload running as them could too
        self.home.mkdir()
        os.chown(self.home, OWNER, OWNER)
        self.repo.mkdir()
        for rel, text in (FILES if files is None else files).items():
            (self.repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.repo / rel).write_text(text)
        chown_tree(self.repo)
        if git:
            self.run_git("init", "-q", "-b", "main")
            self.run_git("add", "-A")
            self.run_git("commit", "-q", "-m", "start")
        self.outside_before = tree(self.outside)

    def git(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Host git as the repository's owner, with a clean environment of its own."""
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(self.home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_PAGER": "",
            "GIT_AUTHOR_NAME": "u",
            "GIT_AUTHOR_EMAIL": "u@x",
            "GIT_COMMITTER_NAME": "u",
            "GIT_COMMITTER_EMAIL": "u@x",
        }
        cmd = ["setpriv", f"--reuid={OWNER}", f"--regid={OWNER}", "--clear-groups", "git", *args]
        return subprocess.run(cmd, cwd=cwd or self.repo, env=env, capture_output=True, text=True, check=False)

    def run_git(self, *args: str, cwd: Path | None = None) -> str:
        done = self.git(*args, cwd=cwd)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    def check(self, *subdirs: str) -> None:
        """The user's git after the apply runs nothing of the agent's, and nothing outside the checkout changed."""
        for where in ("", *subdirs):
            cwd = self.repo / where
            if cwd.is_dir() and not cwd.is_symlink():
                self.run_git("status", "--porcelain", cwd=cwd)
                self.git("log", "--oneline", "-3", cwd=cwd)
        self.run_git("commit", "-q", "--allow-empty", "-am", "the agent's edits")
        self.run_git("add", "-A")
        self.run_git("commit", "-q", "--allow-empty", "-m", "the agent's new files")
        assert self.run_git("log", "--format=%s").splitlines()[:2] == ["the agent's new files", "the agent's edits"]
        self.assert_clean()

    def assert_clean(self) -> None:
        assert not self.marker.exists(), "a payload the agent planted ran on the host"
        assert tree(self.outside) == self.outside_before, "a file outside the repository changed"
        self.assert_plain_checkout()

    def assert_plain_checkout(self) -> None:
        """No setuid, setgid or sticky bit, device, FIFO or socket; every symlink outside .git stays inside and out of .git."""
        for rel, (kind, mode, _, target) in tree(self.repo).items():
            assert kind in (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK), (rel, oct(kind))
            assert not mode & SPECIAL, (rel, oct(mode))
            if kind == stat.S_IFLNK and not rel.startswith(".git/"):
                real = Path(os.path.realpath(self.repo / rel))
                assert self.repo in real.parents, (rel, target, real)
                assert ".git" not in real.relative_to(self.repo).parts, (rel, target)

    def fires(self, files: dict[str, str], *git_args: str) -> bool:
        """Control: with ``files`` written into a copy of this checkout, ``git *git_args`` there runs the payload.

        The same bytes the agent planted, placed where git does read them, must fire; so
        their silence after the apply means the apply kept them away, not that they were duds.
        """
        control = self.base / "control"
        subprocess.run(["cp", "-a", str(self.repo), str(control)], check=True)
        for rel, content in files.items():
            (control / rel).parent.mkdir(parents=True, exist_ok=True)
            (control / rel).unlink(missing_ok=True)
            (control / rel).write_text(content)
            os.chmod(control / rel, 0o755)
        chown_tree(control)
        self.git(*git_args, cwd=control)
        fired = self.marker.exists()
        subprocess.run(["rm", "-rf", str(control)], check=True)
        self.marker.unlink(missing_ok=True)
        return fired
