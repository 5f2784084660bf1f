"""The session's patch, its pieces and a real layer's (a real overlay, as the workspace tests run) against real git: the binary hunks as ``git diff --binary`` writes them, names
quoted as git quotes them, and every kind of change read back by ``git apply`` into the tree apply writes. The
whole path (a real layer, the API, the CLI) is in tests/integration/test_cli_patch.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from controller.errors import PatchTooLargeError
from controller.workspace import apply
from controller.workspace.gitpatch import (
    SYMLINK_MODE,
    Side,
    _Writer,
    as_text,
    binary_literal,
    blob_id,
    diff,
    encode85,
    quoted,
    session_patch,
)
from tests.unit.workspace.overlay import Workspace

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
ALL_BYTES = bytes(range(256))
HOSTILE_NAMES = [
    'q"uote',
    "back\\slash",
    "tab\there",
    "new\nline",
    "caf\u00e9",
    "esc\x1b]0;x\x07",
    " lead",
    "trail ",
    "sp ace",
    "x b/y",
    ".gitconfig 2010-01-01 00:00:00.000000000 +0000",
    "bad\udcffbyte",
]
RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")


def _git(cwd: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(cwd),
        "GIT_AUTHOR_NAME": "t",
        "GIT_COMMITTER_NAME": "t",
    }
    return subprocess.run(["git", *args], cwd=cwd, input=data, capture_output=True, check=False, env=env)


def _repo(root: Path) -> Path:
    root.mkdir()
    assert _git(root, "init", "-q").returncode == 0
    return root


def test_a_literal_hunk_is_what_git_diff_binary_writes(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "r")
    (repo / "bin").write_bytes(ALL_BYTES * 3)
    _git(repo, "add", "-N", "bin")
    theirs = _git(repo, "diff", "--binary", "--full-index", "bin").stdout.decode()
    ours = diff("bin", None, Side("100644", ALL_BYTES * 3))
    assert ours == theirs


def test_base85_is_gits_alphabet_and_padding() -> None:
    assert encode85(b"") == ""
    assert encode85(b"\0\0\0\0") == "00000"
    assert encode85(b"\xff\xff\xff\xff") == "|NsC0"
    assert len(encode85(b"abcde")) == 10  # a short last group is padded to five characters
    literal = binary_literal(ALL_BYTES)
    assert literal.startswith("literal 256\n") and literal.endswith("\n\n")
    for line in literal.splitlines()[1:-1]:
        count = ord(line[0]) - (ord("A") - 1 if line[0] <= "Z" else ord("a") - 27)
        assert 1 <= count <= 52 and len(line) - 1 == -(-count // 4) * 5


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_names_are_quoted_as_git_quotes_them(tmp_path: Path, name: str) -> None:
    repo = _repo(tmp_path / "r")
    real = os.fsencode(name)
    (repo / os.fsdecode(real)).parent.mkdir(exist_ok=True)
    (repo / os.fsdecode(real)).write_bytes(b"x\n")
    _git(repo, "add", "-N", "--", os.fsdecode(real))
    theirs = _git(repo, "diff", "--full-index", "--", os.fsdecode(real)).stdout.decode("ascii")
    assert diff(name, None, Side("100644", b"x\n")) == theirs


def _apply(repo: Path, patch: bytes) -> None:
    for args in (("apply", "--check"), ("apply",)):
        done = _git(repo, *args, data=patch)
        assert done.returncode == 0, done.stderr.decode() + patch.decode("utf-8", "replace")


def test_every_kind_of_change_reads_back_through_git_apply(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "r")
    os.umask(0o022)
    old = {
        "edit.txt": b"one\ntwo\nthree\n",
        "gone.txt": b"bye\n",
        "gone.bin": ALL_BYTES,
        "run.sh": b"echo hi\n",
        "crlf.txt": b"a\r\nb\r\n",
        "to-link": b"was a file\n",
        "nonl.txt": b"no newline",
    }
    for rel, data in old.items():
        (repo / rel).write_bytes(data)
    os.symlink("edit.txt", repo / "link-old")
    new_links = {"link-new": "edit.txt", "link-old": "run.sh", "to-link": "edit.txt"}
    parts = [
        diff("edit.txt", Side("100644", old["edit.txt"]), Side("100644", b"one\n2\nthree\nfour\n")),
        diff("gone.txt", Side("100644", old["gone.txt"]), None),
        diff("gone.bin", Side("100644", ALL_BYTES), None),
        diff("run.sh", Side("100644", old["run.sh"]), Side("100755", old["run.sh"])),
        diff("crlf.txt", Side("100644", old["crlf.txt"]), Side("100644", b"a\r\nc\r\n")),
        diff("nonl.txt", Side("100644", old["nonl.txt"]), Side("100755", b"still none")),
        diff("to-link", Side("100644", old["to-link"]), None),
        diff("added.bin", None, Side("100644", ALL_BYTES)),
        diff("escape.txt", None, Side("100644", b"\x1b[31mred\n")),
        diff("empty", None, Side("100644", b"")),
        diff("link-new", None, Side(SYMLINK_MODE, b"edit.txt")),
        diff("link-old", Side(SYMLINK_MODE, b"edit.txt"), Side(SYMLINK_MODE, b"run.sh")),
        diff("to-link", None, Side(SYMLINK_MODE, b"edit.txt")),
        diff("sub/dir/deep.py", None, Side("100755", b"print(1)\n")),
        *(diff(name, None, Side("100644", os.fsencode(name) + b"\n")) for name in HOSTILE_NAMES),
    ]
    patch = "".join(parts).encode()
    assert not RAW_CONTROL.search(patch.replace(b"\r\n", b"\n"))
    _apply(repo, patch)
    assert (repo / "edit.txt").read_bytes() == b"one\n2\nthree\nfour\n"
    assert not (repo / "gone.txt").exists() and not (repo / "gone.bin").exists()
    assert (repo / "run.sh").stat().st_mode & 0o777 == 0o755 and (repo / "run.sh").read_bytes() == old["run.sh"]
    assert (repo / "crlf.txt").read_bytes() == b"a\r\nc\r\n"
    assert (repo / "nonl.txt").read_bytes() == b"still none" and os.access(repo / "nonl.txt", os.X_OK)
    assert (repo / "added.bin").read_bytes() == ALL_BYTES and (repo / "escape.txt").read_bytes() == b"\x1b[31mred\n"
    assert (repo / "empty").read_bytes() == b""
    assert {name: os.readlink(repo / name) for name in new_links} == new_links
    assert (repo / "sub/dir/deep.py").stat().st_mode & 0o777 == 0o755
    for name in HOSTILE_NAMES:
        assert (repo / os.fsdecode(os.fsencode(name))).read_bytes() == os.fsencode(name) + b"\n", name


def test_text_that_a_terminal_obeys_goes_as_base85() -> None:
    assert as_text(b"plain\ttabs\r\nand crlf\n") is not None and as_text("caf\u00e9\n".encode()) is not None
    for data in (b"\x1b[2J", b"a\rb", b"\x00", b"\xff", "\u202eevil".encode(), b"\x7f", "\u009b".encode()):
        assert as_text(data) is None, data
        assert "GIT binary patch" in diff("f", None, Side("100644", data))


def test_quoting_matches_git_for_every_byte() -> None:
    for byte in range(1, 256):
        name = b"a" + bytes([byte])
        got = quoted(name)
        assert got.isascii() and not RAW_CONTROL.search(got.encode()), byte
        needs = byte < 0x20 or byte >= 0x7F or byte in b'"\\'
        assert got.startswith('"') == needs, byte


def test_blob_ids_are_gits(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "r")
    (repo / "f").write_bytes(ALL_BYTES)
    assert blob_id(Side("100644", ALL_BYTES)) == _git(repo, "hash-object", "f").stdout.decode().strip()


def test_the_bound_stops_the_patch() -> None:
    writer = _Writer(limit=100)
    writer.add("a", "x" * 60)
    with pytest.raises(PatchTooLargeError, match="more than 100 bytes"):
        writer.add("b", "y" * 60)


LAYER_TURN = (
    "printf 'v2\\n' > src/app.py; echo new > new.txt; rm old/gone.txt; rm -rf docs; mkdir docs; echo d > docs/d.txt;"
    "chmod 755 src/util.py; cp /bin/true suid; chmod 6755 suid; mkfifo pipe; ln -s src/app.py link;"
    "ln -s ../outside/secret.txt escape; echo evil >> .git/config; mkdir -p empty; echo l > app.log;"
    "rm README.md; ln -s src/util.py README.md; printf '\\033[2Jred\\n' > esc.txt;"
    "mkdir -p .github/workflows; echo 'on: push' > .github/workflows/x.yml;"
    "for n in 'q\"u' 'back\\slash' \"$(printf 'tab\\there')\" \"$(printf 'new\\nline')\" \"$(printf 'esc\\033]0;x\\007')\""
    " ' lead' 'trail ' 'x b' \"$(printf 'bad\\377')\" \"$(printf 'caf\\303\\251')\"; do echo \"$n\" > \"$n\"; done"
)


def _files(root: Path) -> dict[bytes, tuple[int, int, bytes]]:
    """What git can carry of a tree, ``.git`` aside: each file's or symlink's type, permission bits and bytes (a
    symlink's target); directories only by what is in them."""
    found: dict[bytes, tuple[int, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root)):
        dirnames[:] = [d for d in dirnames if d != b".git"]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            body = os.readlink(path) if os.path.islink(path) else Path(os.fsdecode(path)).read_bytes()
            found[os.path.relpath(path, os.fsencode(root))] = (st.st_mode >> 12, st.st_mode & 0o7777, body)
    return found


def test_a_layers_patch_gives_a_copy_what_apply_gives_the_checkout(ws: Workspace, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(ws.repo, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    _git(copy, "init", "-q")
    ws.agent(LAYER_TURN)
    ws.stop()
    patch = session_patch(ws.layer, "s1")
    head, _, diffs = patch.partition(b"\ndiff --git ")
    assert all(line.startswith(b"#") for line in head.splitlines()), head
    assert not RAW_CONTROL.search(patch), "no raw control character, in a name or a file"
    for held in (b"trusted: .github/workflows/x.yml", b"unsafe: pipe", b"unsafe: escape", b"ignored: app.log"):
        assert held in head, held
    assert b"#   empty: a directory's own change" in head and b".git/config" not in diffs
    done = subprocess.run(["sh", "-c", "umask 022 && git apply"], cwd=copy, input=patch, capture_output=True)
    assert done.returncode == 0, done.stderr.decode() + patch.decode("utf-8", "replace")
    result = apply(ws.layer)
    assert result.conflicts == [] and "empty" in result.applied
    assert _files(copy) == _files(ws.repo)
    assert os.readlink(copy / "README.md") == "src/util.py" and (copy / "suid").stat().st_mode & 0o7777 == 0o755


def test_what_apply_would_stop_at_and_a_patch_past_its_bound(ws: Workspace) -> None:
    ws.agent("printf 'agent\\n' > README.md; head -c 5000 /dev/urandom > noise.bin")
    ws.stop()
    (ws.repo / "README.md").write_text("# the user's edit meanwhile\n")
    patch = session_patch(ws.layer, "s1")
    head, _, diffs = patch.partition(b"\ndiff --git ")
    assert b"stops at these" in head and b"#   README.md: changed in the checkout" in head
    assert b"--force README.md" in head and b"README.md" not in diffs and b"noise.bin" in diffs
    with pytest.raises(PatchTooLargeError):
        session_patch(ws.layer, "s1", limit=4000)  # the file alone is past it: not even read
    with pytest.raises(PatchTooLargeError):
        session_patch(ws.layer, "s1", limit=6000)  # its base85 is
