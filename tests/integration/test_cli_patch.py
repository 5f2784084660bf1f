"""`cubicle changes ID --patch`: a real session's changes as one patch that real `git apply` turns a fresh copy of the
repository into exactly what `cubicle apply ID` writes: text, binary, mode, symlink, deletion; the CI definition
apply holds back is in neither, and named in the patch's comment lines."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.cli_helpers import cubicle, environment, scripted_run, tree

EVERY_KIND = [
    {
        "content": [
            {
                "type": "tool_use",
                "name": "edit_file",
                "input": {"path": "src/app.py", "old_string": "sum(items)", "new_string": "sum(items) or 0"},
            },
            {
                "type": "tool_use",
                "name": "run_command",
                "input": {
                    "command": "python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)))' > data.bin"
                    " && chmod +x run.sh && ln -s src/app.py link && rm old.txt"
                    " && mkdir -p .github/workflows && printf 'on: push\\n' > .github/workflows/x.yml"
                },
            },
        ]
    },
    {"content": [{"type": "text", "text": "Done."}]},
]
FILES = {"README.md": "# demo\n", "src/app.py": "def total(items):\n    return sum(items)\n", "run.sh": "echo hi\n"}


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBICLE_DATA_DIR", str(tmp_path / "data"))


def _worktree(root: Path) -> dict[str, tuple[int, bytes | str]]:
    """What ``tree`` finds outside ``.git``: each entry's mode and bytes, or a symlink's target."""
    return {rel: held for rel, held in tree(root).items() if rel != ".git" and not rel.startswith(".git/")}


def test_the_patch_makes_a_fresh_copy_what_apply_makes_the_checkout(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    repo = make_repo(files={**FILES, "old.txt": "going\n"})
    fresh = tmp_path / "fresh"
    shutil.copytree(repo, fresh, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    assert subprocess.run(["git", "init", "-q"], cwd=fresh, check=False).returncode == 0
    session_id = scripted_run(tmp_path, repo, "every-kind", EVERY_KIND, "--no-apply")

    made = subprocess.run(
        [sys.executable, "-m", "controller", "changes", session_id, "--patch"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=environment(),
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr.decode()
    patch = made.stdout
    (tmp_path / "p").write_bytes(patch)
    head, _, diffs = patch.partition(b"\ndiff --git ")
    assert all(line.startswith(b"#") for line in head.splitlines()), head
    assert b"trusted: .github/workflows/x.yml" in head and b"--force .github/workflows/x.yml" in head
    assert b"x.yml" not in diffs and b"GIT binary patch" in diffs and b"new file mode 120000" in diffs
    assert not any(byte < 0x20 and byte not in b"\n\t" for byte in patch), "no raw control character"
    for args in (["git", "apply", "--check", "p"], ["git", "apply", "p"]):
        done = subprocess.run(
            ["sh", "-c", 'umask 022 && exec "$@"', "sh", *[a if a != "p" else str(tmp_path / "p") for a in args]],
            cwd=fresh,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    applied = cubicle("apply", session_id)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    ours, theirs = _worktree(fresh), _worktree(repo)
    # apply makes the empty .github the agent made around the held-back workflow; a patch has files only, so it
    # lists that directory for `cubicle apply` instead
    assert b"#   .github: a directory's own change" in head and theirs.pop(".github")[1] == b""
    assert ours == theirs
    assert theirs["data.bin"][1] == bytes(range(256)) and theirs["link"][1] == "src/app.py"
    assert (
        theirs["run.sh"][0] & 0o777 == 0o755
        and "old.txt" not in theirs
        and "sum(items) or 0" in str(theirs["src/app.py"][1])
    )
    assert not any(rel.startswith(".github/workflows") for rel in ours)
    assert os.path.lexists(fresh / "link")
