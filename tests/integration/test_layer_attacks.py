"""The workspace layer's attacks end to end: a hostile model through the real API, then apply, then host git.

Each test runs a scripted model that plants something host git would obey (hooks, config,
a redirect, a repository of its own) or something the checkout must never hold (setuid
files, FIFOs, sockets, symlinks out of the repository), applies the session over HTTP as a
user would, and then runs git on the host as the repository's owner — ``status``,
``commit -am``, ``add -A``, ``commit``, ``log`` — and checks: the marker the payload
would create stays absent, the sentinel directory beside the checkout is unchanged, and
the checkout holds no special file. Where it matters a control shows the same payload
firing when placed where git reads it.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.agent_harness import text, tool
from tests.integration.layer_api import LayerApi, commands
from tests.integration.layer_host import OWNER, Host, tree

CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"


@pytest.fixture
def host(layer_base: Path) -> Host:
    return Host(layer_base, "h-" + secrets.token_hex(4))


def payload(host: Host) -> str:
    """A git config whose every hook into command execution touches the marker."""
    m = host.marker
    return (
        f"[core]\n\tfsmonitor = touch {m}\n\tpager = touch {m}\n\thooksPath = .githooks\n\teditor = touch {m}\n"
        f'[alias]\n\tst = !touch {m}\n\tci = !touch {m}\n[filter "evil"]\n\tclean = touch {m}\n\tsmudge = touch {m}\n'
        f'[diff "evil"]\n\ttextconv = touch {m}\n'
    )


def hook(host: Host) -> str:
    return f"#!/bin/sh\ntouch {host.marker}\n"


def git_entries(host: Host) -> dict[str, tuple[int, int, int, object]]:
    return {p: e for p, e in tree(host.repo).items() if p.startswith(".git/")}


def write(path: str, content: str) -> dict[str, Any]:
    return {"content": [tool("write_file", path=path, content=content)]}


def run(command: str) -> dict[str, Any]:
    return {"content": [tool("run_command", command=command)]}


DONE: dict[str, Any] = {"content": [text("done")]}


def test_hooks_and_config_in_git_never_run_on_the_host(layer_api: LayerApi, host: Host) -> None:
    git_before = git_entries(host)
    hooks = (
        "pre-commit post-commit commit-msg prepare-commit-msg post-checkout fsmonitor-watchman reference-transaction"
    )
    turns = [
        write(".git/hooks/pre-commit", hook(host)),
        write(".githooks/pre-commit", hook(host)),
        write(".git/config", CONFIG + payload(host)),
        write(".gitattributes", "* filter=evil diff=evil\n"),
        run(
            f"chmod +x .git/hooks/pre-commit .githooks/pre-commit; for h in {hooks}; do cp .git/hooks/pre-commit "
            ".git/hooks/$h; done; git config --file .git/config alias.log '!sh -c true'; echo more >> README.md"
        ),
        DONE,
    ]
    sid = layer_api.session(host.repo, turns)
    changes = layer_api.changes(sid)
    assert changes[".git/config"]["disposition"] == "discarded"
    assert changes[".git/hooks/pre-commit"]["disposition"] == "discarded"
    applied = layer_api.apply(sid)["applied"]
    assert "README.md" in applied and not [p for p in applied if p.startswith(".git/")]
    assert git_entries(host) == git_before
    host.check()
    assert not host.fires({".git/config": CONFIG}, "status")  # the control's own baseline is quiet
    assert host.fires({".git/config": CONFIG + payload(host)}, "status")
    assert host.fires({".git/hooks/pre-commit": hook(host)}, "commit", "-q", "--allow-empty", "-m", "x")


def test_a_commondir_redirect_and_quarantine_names_never_reach_the_checkout(layer_api: LayerApi, host: Host) -> None:
    git_before = git_entries(host)
    turns = [
        write("evil/config", CONFIG + payload(host)),
        write("evil/hooks/pre-commit", hook(host)),
        run(
            "chmod +x evil/hooks/pre-commit; mkdir -p evil/objects evil/refs/heads; echo ../evil > .git/commondir;"
            "for n in 0 1 x; do echo ../evil > .git/commondir.quarantined-by-cubicle-$n; done;"
            "mkdir .git/commondir.quarantined-by-cubicle-d; ln -s ../evil .git/commondir.quarantined-by-cubicle-l;"
            "git init -q --bare evil2 && cp evil/config evil2/config && cp evil/hooks/pre-commit evil2/hooks/;"
            "echo ../evil2 > .git/commondir; echo more >> README.md"
        ),
        DONE,
    ]
    sid = layer_api.session(host.repo, turns)
    changes = layer_api.changes(sid)
    assert changes["evil2/HEAD"]["disposition"] == "unsafe" and changes["evil2/config"]["disposition"] == "unsafe"
    applied = layer_api.apply(sid)["applied"]
    assert not [p for p in applied if p.startswith(".git/")]
    assert git_entries(host) == git_before and not list((host.repo / ".git").glob("commondir*"))
    for name in ("HEAD", "config", "objects", "refs", "hooks"):  # a bare repository of the agent's would be obeyed
        assert not (host.repo / "evil2" / name).exists(), name
    host.check("evil")
    assert host.fires({".git/commondir": "../evil\n"}, "commit", "-q", "--allow-empty", "-m", "x")


def test_a_broken_head_and_a_repository_at_the_root_are_refused(layer_api: LayerApi, host: Host) -> None:
    """With .git/HEAD broken, git takes the worktree itself for a bare repository and obeys its ``config``."""
    git_before = git_entries(host)
    turns = [
        write("config", CONFIG.replace("false", "true") + payload(host)),
        write("hooks/pre-commit", hook(host)),
        run(
            "echo garbage > .git/HEAD; echo 'ref: refs/heads/main' > HEAD; mkdir -p objects/info refs/heads;"
            "touch packed-refs; chmod +x hooks/pre-commit; echo more >> README.md"
        ),
        DONE,
    ]
    sid = layer_api.session(host.repo, turns)
    changes = layer_api.changes(sid)
    assert {p: changes[p]["disposition"] for p in ("config", "HEAD", "objects", "refs", "hooks")} == dict.fromkeys(
        ("config", "HEAD", "objects", "refs", "hooks"), "unsafe"
    )
    layer_api.apply(sid)
    assert git_entries(host) == git_before
    for planted in ("config", "HEAD", "objects", "refs", "hooks", "packed-refs"):
        assert not (host.repo / planted).exists(), planted
    host.check()
    bare = {
        ".git/HEAD": "garbage\n",
        "HEAD": "ref: refs/heads/main\n",
        "config": CONFIG + payload(host),
        "objects/info/x": "",
        "refs/heads/x": "",
    }
    assert host.fires(bare, "st")


def test_commit_editmsg_and_friends_symlinked_outside_write_nothing_there(layer_api: LayerApi, host: Host) -> None:
    git_before = git_entries(host)
    turns = commands(
        f"rm -f .git/COMMIT_EDITMSG; ln -s {host.outside}/secret.txt .git/COMMIT_EDITMSG;"
        "ln -s ../../outside/notes/todo.txt .git/MERGE_MSG; rm -rf .git/logs; ln -s ../../outside/notes .git/logs;"
        f"ln -s {host.outside}/secret.txt .git/index.lock.target; echo more >> README.md"
    )
    sid = layer_api.session(host.repo, turns)
    assert {c["disposition"] for p, c in layer_api.changes(sid).items() if p.startswith(".git/")} == {"discarded"}
    layer_api.apply(sid)
    assert git_entries(host) == git_before
    host.check()
    # Control: a COMMIT_EDITMSG that is such a symlink does make git write through it.
    control = host.base / "control"
    subprocess.run(["cp", "-a", str(host.repo), str(control)], check=True)
    victim = host.base / "victim.txt"
    victim.write_text("untouched\n")
    os.chown(victim, OWNER, OWNER)
    (control / ".git/COMMIT_EDITMSG").unlink()
    (control / ".git/COMMIT_EDITMSG").symlink_to(victim)
    host.run_git("commit", "-q", "--allow-empty", "-m", "through the link", cwd=control)
    assert victim.read_text() != "untouched\n"


@pytest.mark.parametrize("where", ["worktree", "root", "root-symlink"])
def test_a_git_file_pointing_at_a_repository_of_the_agents_is_never_applied(
    layer_api: LayerApi, host: Host, where: str
) -> None:
    """A worktree's ``.git`` file; the root's ``.git`` made such a file, or a symlink to the agent's repository."""
    git_before = git_entries(host)
    link = "wt/.git" if where == "worktree" else ".git"
    plant = {
        "worktree": "printf 'gitdir: ../evilgit\\n' > wt/.git",
        "root": "rm -rf .git; printf 'gitdir: evilgit\\n' > .git",
        "root-symlink": "rm -rf .git; ln -s evilgit .git",
    }[where]
    turns = [
        run(
            "git init -q --bare evilgit; mkdir -p wt .git/worktrees/wt; echo ../../../wt/.git > .git/worktrees/wt/gitdir;"
            "echo ../.. > .git/worktrees/wt/commondir; echo 'ref: refs/heads/main' > .git/worktrees/wt/HEAD;"
            f"{plant}; echo x > wt/file.txt"
        ),
        write("evilgit/config", CONFIG + payload(host)),
        write("evilgit/hooks/pre-commit", hook(host)),
        run("chmod +x evilgit/hooks/pre-commit; echo more >> README.md"),
        DONE,
    ]
    sid = layer_api.session(host.repo, turns)
    changes = layer_api.changes(sid)
    assert changes[link]["disposition"] == "discarded" and changes["evilgit/config"]["disposition"] == "unsafe"
    applied = layer_api.apply(sid)["applied"]
    assert "wt/file.txt" in applied and not [p for p in applied if p.startswith(".git")]
    assert git_entries(host) == git_before and not (host.repo / ".git").is_symlink()
    assert (host.repo / ".git").is_dir() and not (host.repo / "wt/.git").exists()
    for name in ("HEAD", "config", "objects", "refs", "hooks"):  # only its harmless leftovers may be applied
        assert not (host.repo / "evilgit" / name).exists(), name
    host.check("wt")


def test_git_init_by_the_agent_in_a_plain_directory_never_reaches_it(layer_api: LayerApi, layer_base: Path) -> None:
    host = Host(layer_base, "plain-" + secrets.token_hex(4), git=False)
    m = host.marker
    turns = commands(
        f"git init -q && git config core.fsmonitor 'touch {m}' && git config alias.st '!touch {m}' &&"
        f"printf '#!/bin/sh\\ntouch {m}\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit &&"
        "mkdir -p sub && git -C sub init -q && cp .git/config sub/.git/config && git add -A &&"
        "git -c user.name=a -c user.email=a@b commit -qm agent; git status --short | head -3; echo ok > new.txt"
    )
    sid = layer_api.session(host.repo, turns)
    applied = layer_api.apply(sid)["applied"]
    assert "new.txt" in applied and not [p for p in applied if ".git" in p.split("/")]
    assert not (host.repo / ".git").exists() and not (host.repo / "sub/.git").exists()
    outside_git = host.git("status")
    assert outside_git.returncode == 128 and "not a git repository" in outside_git.stderr
    host.run_git("init", "-q", "-b", "main")  # the user makes it a repository after all
    host.check("sub")
    assert host.fires({".git/config": f"[core]\n\tfsmonitor = touch {m}\n"}, "status")


def test_nested_repositories_in_any_spelling_are_never_applied(layer_api: LayerApi, host: Host) -> None:
    git_before = git_entries(host)
    spellings = ["sub/.git", "SUB/.GIT", "Mixed/.Git", "dots/.git.", "tilde/GIT~1"]
    quoted = " ".join(f"'{s}'" for s in spellings)
    turns = [
        write("/tmp/cfg", CONFIG + payload(host)),
        write("/tmp/hook", hook(host)),
        run(
            f'for d in {quoted}; do mkdir -p "$d" && git init -q --bare "$d" && cp /tmp/cfg "$d/config" &&'
            ' cp /tmp/hook "$d/hooks/pre-commit" && chmod +x "$d/hooks/pre-commit" && echo x > "${d%/*}/file.txt"; done'
        ),
        DONE,
    ]
    sid = layer_api.session(host.repo, turns)
    changes = layer_api.changes(sid)
    for spelling in spellings:
        assert changes[f"{spelling}/config"]["disposition"] == "discarded", spelling
    applied = layer_api.apply(sid)["applied"]
    assert sorted(p for p in applied if p.endswith("file.txt")) == sorted(
        f"{s.split('/')[0]}/file.txt" for s in spellings
    )
    for spelling in spellings:
        assert not (host.repo / spelling).exists(), spelling
    assert git_entries(host) == git_before
    host.check(*(s.split("/")[0] for s in spellings))


def test_setuid_setgid_sticky_fifos_sockets_and_devices_never_reach_the_checkout(
    layer_api: LayerApi, host: Host
) -> None:
    turns = commands(
        "cp /usr/bin/python3 py && chmod 4755 py && cp py pyg && chmod 2755 pyg && cp py both && chmod 6755 both;"
        "mkdir -p sgid sticky && chmod 2775 sgid && chmod 1777 sticky && touch sticky/f && mkfifo fifo;"
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"; mknod dev c 1 3; stat -c '%A %n' *"
    )
    sid = layer_api.session(host.repo, turns)
    changes = layer_api.changes(sid)
    assert changes["py"]["mode"] == 0o4755 and changes["both"]["mode"] == 0o6755 and "dev" not in changes
    assert changes["fifo"]["disposition"] == "unsafe" and changes["sock"]["disposition"] == "unsafe"
    applied = layer_api.apply(sid)["applied"]
    assert "fifo" not in applied and "sock" not in applied
    modes = {p: stat.S_IMODE((host.repo / p).lstat().st_mode) for p in ("py", "pyg", "both", "sgid", "sticky")}
    assert modes == {"py": 0o755, "pyg": 0o755, "both": 0o755, "sgid": 0o755, "sticky": 0o755}  # no write for others
    host.check()
    ran = subprocess.run(
        [
            "setpriv",
            f"--reuid={OWNER}",
            f"--regid={OWNER}",
            "--clear-groups",
            str(host.repo / "py"),
            "-c",
            "import os; print(os.geteuid(), os.getegid())",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout == f"{OWNER} {OWNER}\n"


def test_symlinks_out_of_the_repository_or_into_git_are_never_applied(layer_api: LayerApi, host: Host) -> None:
    turns = [
        run(
            f"ln -s ../outside/secret.txt rel-out; ln -s /etc/passwd abs; ln -s {host.outside} abs-dir;"
            "ln -s .git/config into-git; ln -s .GIT/hooks into-git-case; ln -s . self; ln -s README.md ok;"
            "mkdir -p sub/deep && ln -s .. sub/deep/up && ln -s sub/deep/up/../../outside/secret.txt chain;"
            "ln -s sub/deep/up/../.git/config chain-git; ln -s ../docs/a.txt sub/ok2"
        ),
        write("into-git", CONFIG + payload(host)),
        write("abs-dir/planted.txt", "x"),
        DONE,
    ]
    sid = layer_api.session(host.repo, turns)
    changes = layer_api.changes(sid)
    unsafe = {"rel-out", "abs", "abs-dir", "into-git", "into-git-case", "self", "chain", "chain-git"}
    assert {p for p, c in changes.items() if c["disposition"] == "unsafe"} == unsafe
    layer_api.apply(sid)
    links = {p for p, (kind, *_) in tree(host.repo).items() if kind == stat.S_IFLNK and not p.startswith(".git/")}
    assert links == {"ok", "sub/ok2", "sub/deep/up"}
    assert (host.repo / "sub/deep/up").resolve() == host.repo / "sub"
    host.check("sub")


def test_a_users_symlink_out_of_the_checkout_is_replaced_never_written_through(layer_api: LayerApi, host: Host) -> None:
    """The checkout's own link to a directory outside: the agent turns it into a directory; apply must not follow it."""
    (host.repo / "lib").symlink_to("../outside/notes")
    os.lchown(host.repo / "lib", OWNER, OWNER)
    host.run_git("add", "lib")
    host.run_git("commit", "-qm", "link the notes")
    turns = [
        write("lib/todo.txt", "planted through the link\n"),  # in the container the link leads nowhere
        run("rm lib && mkdir lib && echo planted > lib/todo.txt && echo new > lib/new.txt"),
        DONE,
    ]
    sid = layer_api.session(host.repo, turns)
    changes = layer_api.changes(sid)
    assert (changes["lib"]["type"], changes["lib"]["previous"]) == ("dir", "symlink")
    layer_api.apply(sid)
    assert (host.repo / "lib").is_dir() and not (host.repo / "lib").is_symlink()
    assert (host.repo / "lib/todo.txt").read_text() == "planted\n"
    host.check()  # the sentinel directory, the link's old target, is unchanged
    assert layer_api.post(sid, "revert").status_code == 200
    assert os.readlink(host.repo / "lib") == "../outside/notes" and tree(host.outside) == host.outside_before
