"""A repository, its layer and a real overlay mount, as the workspace tests use them (fixture ``ws`` in conftest).

The agent's side runs as uid 1000 through ``setpriv``, and owns the repository.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

from controller.workspace import layer as layers
from controller.workspace.layer import Layer

OWNER = 1000
REPO_FILES = {
    "README.md": "# demo\n",
    "src/app.py": "def total(items):\n    return sum(items)\n",
    "src/util.py": "X = 1\n",
    "docs/a.txt": "a\n",
    "docs/sub/b.txt": "b\n",
    "old/gone.txt": "gone\n",
    "data.bin": "\x00\x01\x02",
    ".gitignore": "build/\n*.log\n",
    ".git/config": "[core]\n\trepositoryformatversion = 0\n",
    ".git/HEAD": "ref: refs/heads/main\n",
}


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root`` (symlinks not followed): type, mode, owner, and bytes or target."""
    seen: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, root)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    body: object = hashlib.sha256(f.read()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                body = os.readlink(path)
            else:
                body = None
            seen[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, body)
    return seen


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def repo_beside(folder: str) -> str:
    """The agent's script that puts HEAD and a config with a pager beside what ``folder`` holds (a repository
    lookalike, where objects/ and refs/ are there too)."""
    return f"echo 'ref: refs/heads/main' > {folder}/HEAD; printf '[core]\\n\\tpager = evil\\n' > {folder}/config"


def chown_tree(root: Path, uid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, uid)


class Workspace:
    """A repository owned by uid 1000, its layer, and the overlay mounted where the agent works."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.repo = base / "repo"
        self.outside = base / "outside"
        self.data = base / "data"
        self.mnt = base / "mnt"
        write_files(self.repo, REPO_FILES)
        (self.outside / "secret.txt").parent.mkdir(parents=True)
        (self.outside / "secret.txt").write_text("host secret\n")
        chown_tree(self.repo, OWNER)
        self.mnt.mkdir()
        self.layer: Layer = layers.create(self.data, "s1", self.repo)
        self.mounted = False
        self.seeded = False  # mount with the seed layer on top (``headroom``)

    def restart(self, names: int = layers.DEFAULT_NAMES) -> None:
        """Start the session again, so setup done to the checkout is part of its baseline (and with ``names``)."""
        self.stop()
        layers.discard(self.layer)
        self.layer = layers.create(self.data, "s1", self.repo, names=names)

    def start_with(self, files: dict[str, str]) -> None:
        """Add ``files`` to the checkout, owned by its owner, and start the session again over them."""
        write_files(self.repo, files)
        chown_tree(self.repo, OWNER)
        self.restart()

    def agent(self, script: str) -> None:
        """Run a shell script as the agent (uid 1000) with its cwd at the mounted workspace."""
        if not self.mounted:
            opts = layers.mount_options(self.layer, self.seeded)
            subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(self.mnt)], check=True)
            self.mounted = True
        cmd = ["setpriv", f"--reuid={OWNER}", f"--regid={OWNER}", "--clear-groups", "sh", "-ec", script]
        subprocess.run(cmd, cwd=self.mnt, check=True, env={"PATH": os.environ["PATH"]})

    def stop(self) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.mnt)], check=True)
            self.mounted = False
