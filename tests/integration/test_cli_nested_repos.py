"""Red-team finding A end to end, through the real CLI and a real sandbox on a scripted scenario: a repository
nested in the checkout (``lib/``, its own ``.git``) obeys its own git configuration. With lib's
``include.path=../.gitconfig`` the agent's ``lib/.gitconfig`` (``core.fsmonitor``) rode the piped patch and
``git status`` in lib ran it; with lib's ``core.hooksPath=.githooks`` a plain apply wrote the agent's executable
``lib/.githooks/pre-commit`` and ``git commit`` in lib ran it. Both are now held back unless forced by name."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.cli_helpers import SESSION_ID, cubicle
from tests.integration.pty_helpers import scenario_file
from tests.sandbox_defaults import AGENT_UID


def scenario(marks: Path) -> dict[str, object]:
    script = (
        f"printf '[core]\\n\\tfsmonitor = \"touch {marks}/fsmonitor\"\\n' > lib/.gitconfig;"
        f" mkdir -p lib/.githooks lib/.github/workflows && printf '#!/bin/sh\\ntouch {marks}/hook\\n'"
        " > lib/.githooks/pre-commit && chmod +x lib/.githooks/pre-commit;"
        " echo 'on: push' > lib/.github/workflows/ci.yml; echo ok > ok.txt; echo ok > lib/ok.txt"
    )
    return {
        "name": "nested",
        "turns": [
            {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": script}}]},
            {"content": [{"type": "text", "text": "Done."}]},
        ],
    }


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBICLE_DATA_DIR", str(tmp_path / "data"))


def git(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Host git as the user runs it (their identity for a commit; any owner's repository)."""
    command = ["git", "-c", "safe.directory=*", "-c", "user.name=u", "-c", "user.email=u@example.com", *args]
    return subprocess.run(command, cwd=where, capture_output=True, text=True, check=False)


def _session(tmp_path: Path, make_repo: Callable[..., Path], marks: Path) -> tuple[str, Path]:
    repo = make_repo()
    for folder in ("objects", "refs"):  # a repository git reads, as a real checkout is
        (repo / ".git" / folder).mkdir()
    lib = repo / "lib"
    lib.mkdir()
    (lib / "README").write_text("a vendored library\n")
    assert git(lib, "init", "-q").returncode == 0
    git(lib, "config", "include.path", "../.gitconfig")
    git(lib, "config", "core.hooksPath", ".githooks")
    if os.geteuid() == 0:
        for path in [repo, *repo.rglob("*")]:
            os.lchown(path, AGENT_UID, AGENT_UID)
    done = cubicle("run", str(repo), "vendor", "--scenario", scenario_file(tmp_path, scenario(marks)), "--no-apply")
    assert done.returncode == 0, done.stdout + done.stderr
    found = SESSION_ID.search(done.stdout + done.stderr)
    assert found, done.stdout + done.stderr
    return found[0], repo


def test_a_nested_repositorys_included_config_and_hooks_are_held_back(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    session_id, repo = _session(tmp_path, make_repo, marks)
    listing = cubicle("changes", session_id)
    rows = {line.split()[1]: line for line in listing.stdout.splitlines() if line.startswith("  A ")}
    for held in ("lib/.gitconfig", "lib/.githooks/pre-commit", "lib/.github/workflows/ci.yml"):
        assert "held back: trusted" in rows[held], listing.stdout
    assert "held back" not in rows["lib/ok.txt"]

    piped = cubicle("changes", session_id, "--diff")  # stdout is a pipe here: what git apply gets
    assert piped.returncode == 0, piped.stderr
    copy = tmp_path / "copy"
    copy.mkdir()
    patched = subprocess.run(["git", "apply"], cwd=copy, input=piped.stdout, capture_output=True, text=True)
    assert patched.returncode == 0, patched.stderr
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file()) == ["lib/ok.txt", "ok.txt"]
    assert f"cubicle apply {session_id} lib/.gitconfig --force lib/.gitconfig" in piped.stdout

    plain = cubicle("apply", session_id)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert (repo / "lib/ok.txt").exists()
    for held in ("lib/.gitconfig", "lib/.githooks", "lib/.github/workflows"):
        assert not (repo / held).exists(), f"{held} reached the checkout without being forced"
    assert git(repo / "lib", "status").returncode == 0
    assert git(repo / "lib", "commit", "-q", "--allow-empty", "-m", "x").returncode == 0
    assert sorted(os.listdir(marks)) == [], "host git ran what the agent wrote"
