"""The workspace layer end to end: a real engine mounts the overlay volume, the agent edits as uid 1000.

What must hold: the checkout does not change until ``apply``; ``apply`` writes only the
safe changes; ``revert`` restores the checkout byte for byte; a user edit conflicts and
nothing is written; rewinding to a checkpoint then applying gives that turn's files; and
host git, run as the repository's owner after applying whatever the agent attempted,
never runs a command the agent planted.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.types import Mount

from controller.config import DEFAULT_IMAGE
from controller.sandbox import owners
from controller.sandbox.docker import volume_kwargs
from controller.wire.changeset import Disposition, Kind
from controller.workspace import apply, checkpoint, create, discard, revert, rewind, scan
from controller.workspace.layer import Layer
from tests.integration.layer_host import tree
from tests.sandbox_defaults import TEST_INSTANCE

OWNER = 1000
FILES = {
    "README.md": "# demo\n",
    "src/app.py": "def total(items):\n    return sum(items)\n",
    "docs/a.txt": "a\n",
    "docs/sub/b.txt": "b\n",
    "old/gone.txt": "gone\n",
    ".gitignore": "build/\n",
}


class Session:
    def __init__(self, base: Path, client: Any) -> None:
        self.base, self.client = base, client
        self.repo, self.home, self.outside = base / "repo", base / "home", base / "outside"
        self.marker = self.home / "MARKER"  # where uid 1000 can write: a payload that ran would leave it
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text("host secret\n")
        self.home.mkdir()
        os.chown(self.home, OWNER, OWNER)
        self.repo.mkdir()
        for rel, text in FILES.items():
            (self.repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.repo / rel).write_text(text)
        for path in [self.repo, *self.repo.rglob("*")]:
            os.lchown(path, OWNER, OWNER)
        self.git("init", "-q", "-b", "main")
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "start")
        self.layer: Layer = create(base / "data", "it-" + secrets.token_hex(4), self.repo)
        kwargs = volume_kwargs(self.layer, f"cubicle-ws-{self.layer.root.name}", owners.labels(TEST_INSTANCE, "ws"))
        self.volume = client.volumes.create(**kwargs)

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

    def agent(self, script: str) -> None:
        """One turn: a hardened container of the sandbox image runs ``script`` in /workspace as uid 1000."""
        self.client.containers.run(
            DEFAULT_IMAGE,
            ["sh", "-c", script],
            entrypoint=[],
            user=f"{OWNER}:{OWNER}",
            working_dir="/workspace",
            mounts=[Mount("/workspace", self.volume.name, type="volume", no_copy=True)],
            remove=True,
            network_mode="none",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            labels=owners.labels(TEST_INSTANCE, "ws"),
        )

    def close(self) -> None:
        self.volume.remove(force=True)
        assert discard(self.layer) == []


@pytest.fixture
def session(docker_client: Any) -> Iterator[Session]:
    base = Path(tempfile.mkdtemp(prefix="cubicle-ws-it-"))
    os.chmod(base, 0o755)
    made = Session(base, docker_client)
    yield made
    made.close()
    shutil.rmtree(base)


EDITS = (
    "printf 'def total(items):\\n    return sum(items) + 1\\n' > src/app.py; echo new > new.txt; rm old/gone.txt;"
    "rm -rf docs; mkdir docs; echo fresh > docs/a.txt; mv src source; chmod 700 source; ln source/app.py hard;"
    "ln -s source/app.py link; ln -s ../outside/secret.txt escape; ln -s /etc/passwd abs; mkfifo pipe;"
    "cp /usr/bin/python3 py; chmod 4755 py; mkdir -p empty; mkdir -p build; echo o > build/out.o"
)


def test_the_checkout_changes_only_through_apply_and_revert_restores_it(session: Session) -> None:
    before, outside = tree(session.repo), tree(session.outside)
    session.agent(EDITS)
    assert tree(session.repo) == before
    changes = {c.path: c for c in scan(session.layer)}
    assert changes["source/app.py"].kind == Kind.ADDED and changes["src/app.py"].kind == Kind.DELETED
    assert changes["docs/sub/b.txt"].kind == Kind.DELETED and changes["docs/a.txt"].kind == Kind.MODIFIED
    for path in ("pipe", "escape", "abs"):
        assert changes[path].disposition == Disposition.UNSAFE, path
    assert changes["build/out.o"].disposition == Disposition.IGNORED
    result = apply(session.layer)
    assert result.conflicts == []
    after = tree(session.repo)
    expected_paths = {
        "README.md",
        ".gitignore",
        "new.txt",
        "docs",
        "docs/a.txt",
        "source",
        "source/app.py",
        "hard",
        "link",
        "py",
        "empty",
        "old",
    }
    assert {p for p in after if not p.startswith(".git/") and p != ".git"} == expected_paths
    assert all(not (mode & 0o7000) for _, mode, _, _ in after.values())
    assert after["source"][1] == 0o700 and after["py"][1] == 0o755 and after["link"][3] == "source/app.py"
    assert {p: e for p, e in after.items() if p.startswith(".git")} == {
        p: e for p, e in before.items() if p.startswith(".git")
    }
    assert all(owner == OWNER for _, _, owner, _ in after.values())
    assert tree(session.outside) == outside
    assert revert(session.layer).conflicts == []
    assert tree(session.repo) == before


def test_a_user_edit_after_start_conflicts_and_nothing_is_written(session: Session) -> None:
    session.agent("echo agent > README.md; echo other > other.txt")
    (session.repo / "README.md").write_text("# the user's edit\n")
    before = tree(session.repo)
    result = apply(session.layer)
    assert [c.path for c in result.conflicts] == ["README.md"] and result.applied == []
    assert tree(session.repo) == before


def test_rewind_to_checkpoint_one_then_apply_gives_turn_one(session: Session) -> None:
    session.agent("echo one > turn.txt; rm README.md; rm -rf docs; mkdir docs; echo d1 > docs/d.txt")
    assert checkpoint(session.layer) == 1
    session.agent("echo two > turn.txt; echo two > two.txt; echo '# back' > README.md; rm -rf docs")
    assert checkpoint(session.layer) == 2
    rewind(session.layer, 1)
    session.agent('test "$(cat turn.txt)" = one && test ! -e two.txt && test ! -e README.md && ls docs')
    apply(session.layer)
    files = {p for p in tree(session.repo) if p != ".git" and not p.startswith(".git/")}
    assert files == {".gitignore", "turn.txt", "docs", "docs/d.txt", "src", "src/app.py", "old", "old/gone.txt"}
    assert (session.repo / "turn.txt").read_text() == "one\n"


def test_wiping_the_workspace_deletes_files_but_never_git(session: Session) -> None:
    git_before = {p: e for p, e in tree(session.repo).items() if p.startswith(".git/")}
    session.agent("rm -rf /workspace/* /workspace/.git /workspace/.gitignore; ls -A /workspace")
    result = apply(session.layer)
    assert result.conflicts == [] and {c.path for c in result.skipped if c.path.startswith(".git")}
    assert sorted(os.listdir(session.repo)) == [".git"]
    assert {p: e for p, e in tree(session.repo).items() if p.startswith(".git/")} == git_before
    assert session.git("log", "--oneline").stdout.strip().endswith("start")


def test_host_git_runs_nothing_the_agent_planted(session: Session) -> None:
    mark = str(session.marker)
    payload = f"[core]\\n\\tfsmonitor = touch {mark}\\n\\tpager = touch {mark}\\n\\thooksPath = hooks\\n[alias]\\n\\tlog = !touch {mark}\\n"
    hook = f"#!/bin/sh\\ntouch {mark}\\n"
    session.agent(
        f"printf '{payload}' >> .git/config; printf '{hook}' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit;"
        f"cp .git/hooks/pre-commit .git/hooks/post-commit; echo /tmp > .git/commondir; echo garbage > .git/HEAD;"
        f"printf '{payload}' > config; echo 'ref: refs/heads/main' > HEAD; mkdir -p objects refs/heads hooks;"
        f"printf '{hook}' > hooks/pre-commit; chmod +x hooks/pre-commit; rm -f .git/COMMIT_EDITMSG;"
        f"ln -s {session.outside}/secret.txt .git/COMMIT_EDITMSG; mkdir -p sub/.GIT nested;"
        f"printf '{payload}' > sub/.GIT/config; printf 'gitdir: {session.outside}\\n' > nested/.git;"
        f"mkdir -p bare/objects bare/refs; echo 'ref: refs/heads/main' > bare/HEAD; printf '{payload}' > bare/config;"
        f"echo change >> README.md"
    )
    git_before = {p: e for p, e in tree(session.repo).items() if p.startswith(".git/")}
    outside = tree(session.outside)
    result = apply(session.layer)
    assert result.conflicts == [] and "README.md" in result.applied
    assert {p: e for p, e in tree(session.repo).items() if p.startswith(".git/")} == git_before
    for planted in ("config", "HEAD", "objects", "hooks", "bare/config", "bare/HEAD", "sub/.GIT", "nested/.git"):
        assert not os.path.lexists(session.repo / planted), planted
    status = session.git("status", "--porcelain")
    assert status.returncode == 0, status.stderr
    assert session.git("add", "-A").returncode == 0
    commit = session.git("commit", "-q", "-m", "apply the agent's work")
    assert commit.returncode == 0, commit.stderr
    assert session.git("log", "--oneline").returncode == 0
    for where in ("sub", "nested", "bare"):
        if (session.repo / where).is_dir():
            session.git("status", cwd=session.repo / where)
            session.git("log", cwd=session.repo / where)
    assert not session.marker.exists()
    assert tree(session.outside) == outside
    # Control: the same payload, placed where git does read it, does fire — so its absence above means something.
    control = session.base / "control"
    shutil.copytree(session.repo, control, symlinks=True)
    shutil.copyfile(session.layer.upper / ".git/config", control / ".git/config")
    for path in [control, *control.rglob("*")]:
        os.lchown(path, OWNER, OWNER)
    fired = session.git("status", cwd=control)
    assert session.marker.exists(), (fired.stderr, (control / ".git/config").read_text())
