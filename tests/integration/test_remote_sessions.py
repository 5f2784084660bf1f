"""Sessions on a git remote, end to end: the real CLI starts a scripted session on a URL of the suite's own git
server (nginx, fcgiwrap, git-http-backend, basic auth), the project's own tests run in the sandbox on the fetched
tree, and the changes leave as a patch that ``git apply`` takes and as a branch pushed back to the server, which a
fresh clone then holds. The password reaches none of what the session produced."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench.gitserver import GitServer, plain_git_env
from controller.agent.scripted import ScriptedServer
from controller.client import Client
from controller.errors import ConflictError, ForbiddenRepoError, InvalidRequestError, RepoError
from controller.wire.bodies import PushRequest, RemoteRepo
from controller.workspace import gitmirror
from tests.agent_harness import register, text, tool
from tests.integration.cli_helpers import cubicle
from tests.integration.client_helpers import cubicle_serve
from tests.integration.conftest import GIT_PASSWORD, INFLECTION
from tests.integration.pty_helpers import scenario_file

pytestmark = pytest.mark.integration

NAME = "inflection"
PLAIN = "plain"
"""The same project without its devcontainer, whose Dockerfile a server builds only with CUBICLE_GIT_ALLOW_BUILDS."""
LOOK = (
    "python3 -m pytest -p no:cacheprovider -q test_inflection.py 2>&1 | tail -1; env; cat .git/HEAD .git/config; "
    "cat ~/.git-credentials ~/.netrc 2>&1; echo done"
)


def _settings(server: GitServer, data: Path) -> dict[str, str]:
    """A controller's settings for the server: its data directory, the credentials file in it (the one file the
    password may be in), and the remote patterns naming the server's loopback host and port exactly."""
    data.mkdir(parents=True, exist_ok=True)
    credentials = data / "credentials"
    credentials.write_text(f"http://tester:{GIT_PASSWORD}@127.0.0.1:{server.port}\n")
    credentials.chmod(0o600)
    return {
        "CUBICLE_DATA_DIR": str(data),
        "CUBICLE_GIT_CREDENTIALS": str(credentials),
        "CUBICLE_GIT_REMOTES": json.dumps([f"http://127.0.0.1:{server.port}/private/*"]),
    }


def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _clone(server: GitServer, branch: str, where: Path, name: str = NAME) -> Path:
    url = server.url(name).replace("http://", f"http://tester:{GIT_PASSWORD}@")
    subprocess.run(
        ["git", "clone", "-q", "--branch", branch, url, str(where)],
        check=True,
        timeout=120,
        env=plain_git_env(where.parent),
        capture_output=True,
    )
    return where


def test_a_session_on_a_url_runs_the_projects_tests_then_leaves_as_a_patch_and_a_pushed_branch(
    git_server: GitServer, tmp_path: Path
) -> None:
    git_server.create(NAME, INFLECTION)
    head = git_server.git("rev-parse", "HEAD", cwd=git_server.work(NAME))
    env = _settings(git_server, tmp_path / "data")
    turns = [
        {
            "content": [
                {"type": "tool_use", "name": "write_file", "input": {"path": "NOTES.md", "content": "from a remote\n"}},
                {"type": "tool_use", "name": "run_command", "input": {"command": LOOK, "timeout_s": 300}},
            ]
        },
        {"content": [{"type": "text", "text": "Done."}]},
    ]
    scenario = scenario_file(tmp_path, {"name": "remote", "turns": turns})
    ran = cubicle("run", git_server.url(NAME), "note it", "--json", "--scenario", scenario, env=env, timeout=1200)
    assert ran.returncode == 0, ran.stderr[-3000:]
    events = _events(ran.stdout)
    session = next(e["session_id"] for e in events if e["type"] == "session_started")
    output = "\n".join(e["output"] for e in events if e["type"] == "tool_result")
    assert " passed" in output and head in output, output[-3000:]  # the suite ran on the fetched commit
    assert "[remote" not in output and "url =" not in output, output  # the sandbox's .git names no remote

    shown = cubicle("sessions", env=env)
    assert f"{git_server.url(NAME)}@{head[:12]}" in shown.stdout, shown.stdout

    refused = cubicle("apply", session, env=env)
    assert refused.returncode == 2 and "--patch" in refused.stderr, refused.stderr

    patch = cubicle("changes", session, "--patch", env=env)
    assert patch.returncode == 0, patch.stderr
    copy = _clone(git_server, "main", tmp_path / "copy")
    subprocess.run(["git", "apply", "-"], input=patch.stdout.encode(), cwd=copy, check=True, timeout=60)
    assert (copy / "NOTES.md").read_text() == "from a remote\n"
    assert not (copy / ".venv").exists()  # ignored: left out

    pushed = cubicle("push", session, "--branch", "cubicle/notes", "-m", "Notes from a remote", env=env)
    assert pushed.returncode == 0 and "created" in pushed.stdout, pushed.stderr
    branch = _clone(git_server, "cubicle/notes", tmp_path / "branch")
    assert (branch / "NOTES.md").read_text() == "from a remote\n"
    log = subprocess.run(
        ["git", "log", "-1", "--format=%P%n%an <%ae>%n%s"], cwd=branch, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert log == [head, "Cubicle <cubicle@localhost>", "Notes from a remote"], log

    again = cubicle("push", session, "--branch", "cubicle/notes", env=env)  # another message: another commit
    assert again.returncode != 0 and "cubicle/notes" in again.stderr and GIT_PASSWORD not in again.stderr

    said = [ran.stdout, ran.stderr, shown.stdout, refused.stderr, patch.stdout, pushed.stdout, again.stderr]
    assert not [text for text in said if GIT_PASSWORD in text]
    data = Path(env["CUBICLE_DATA_DIR"])
    _no_password_under(data, keep=Path(env["CUBICLE_GIT_CREDENTIALS"]))

    # Purged, the session lets its commit go from the mirror; its tree goes at the next gc (once settled).
    (mirror,) = [path for path in (data / "git" / "mirrors").iterdir() if path.is_dir()]  # not its lock
    assert gitmirror.pins(mirror) == [session]
    purged = cubicle("gc", "--older-than", "1s", "--include-unapplied", env=env)
    assert purged.returncode == 0 and session in purged.stdout, purged.stdout + purged.stderr
    assert gitmirror.pins(mirror) == []
    tree = data / "git" / "trees" / head
    os.utime(tree, (1, 1))
    swept = cubicle("gc", env=env)
    assert f"removed the tree of commit {head[:12]}" in swept.stdout and not tree.exists(), swept.stdout


def _no_password_under(data: Path, keep: Path) -> None:
    """The password is in the credentials file and nowhere else the controller wrote: database, transcripts,
    events, layers, mirrors, trees."""
    found = []
    for root, _dirs, files in os.walk(data):
        for name in files:
            path = Path(root) / name
            if path == keep or path.is_symlink() or not path.is_file():
                continue
            try:
                if GIT_PASSWORD.encode() in path.read_bytes():
                    found.append(str(path))
            except PermissionError:
                continue
    assert not found, found


REMOTE_TURNS = [
    {"content": [tool("write_file", path="CHANGELOG.md", content="one line\n")]},
    {"content": [tool("write_file", path=".github/workflows/ci.yml", content="on: push\n")]},
    {"content": [text("Done.")]},
]


def test_the_api_starts_a_session_on_an_allowed_url_only_and_pushes_what_a_plain_apply_would_write(
    git_server: GitServer, model_server: ScriptedServer, tmp_path: Path
) -> None:
    """Through `cubicle serve` and the Python client: the server's own list admits the URL (a server never fetches
    a remote its list does not name), a remote's Dockerfile is not built unless the operator allows it, a ref picks
    the commit, apply is refused, a CI definition stays out of the
    pushed branch unless forced by name, and the record shows where the files came from."""
    git_server.create(NAME, INFLECTION)  # its devcontainer builds a Dockerfile
    plain = tmp_path / "plain"
    shutil.copytree(INFLECTION, plain, ignore=shutil.ignore_patterns(".devcontainer"))
    git_server.create(PLAIN, source=plain)
    first = git_server.git("rev-parse", "HEAD", cwd=git_server.work(PLAIN))
    git_server.commit(PLAIN, {"NEWS.md": b"later\n"}, "A later commit")
    root = tmp_path / "root"
    root.mkdir()
    settings = _settings(git_server, root / "data")
    with cubicle_serve(root, model_server, **settings) as served, Client(served.url, served.token) as client:
        for bad, error, said in [  # refused before anything is recorded or fetched
            (RemoteRepo(url=f"http://127.0.0.1:{git_server.port}/public/{PLAIN}.git"), ForbiddenRepoError, "refused"),
            (RemoteRepo(url=f"file://{git_server.bare(PLAIN)}"), RepoError, "file"),
        ]:
            with pytest.raises(error, match=said):
                client.create(bad, "t")
        for bad, said in [  # known once fetched: the session, recorded at once, fails before its first turn
            (RemoteRepo(url=git_server.url(PLAIN), ref="no-such-branch"), "no-such-branch"),
            (RemoteRepo(url=git_server.url(NAME)), "CUBICLE_GIT_ALLOW_BUILDS"),
        ]:
            failed = client.wait(client.create(bad, "t").id)
            assert (failed.status, failed.finish_reason, failed.repo) == ("failed", "error", ""), failed
            assert said in failed.detail, failed.detail
            kinds = [(e.type, getattr(e, "phase", getattr(e, "kind", ""))) for e in client.events(failed.id)]
            assert kinds[0] == ("session_started", "") and ("setup_output", "fetch") in kinds, kinds
            assert kinds[-2:] == [("error", "fetch"), ("session_finished", "")], kinds
            with pytest.raises(ConflictError, match="never had its files"):
                client.follow_up(failed.id, "again")
        model = register(model_server, REMOTE_TURNS, prefix="remote-api")
        record = client.create(RemoteRepo(url=git_server.url(PLAIN), ref=first[:10]), "log it", model=model)
        assert record.source is not None and record.source.ref == first[:10]
        done = client.wait(record.id)
        assert done.status == "idle", done
        assert done.source is not None and done.source.commit == first and done.repo
        with pytest.raises(InvalidRequestError, match="--patch"):
            client.apply(record.id)
        pushed = client.push(record.id, PushRequest(branch="cubicle/api"))
        assert (pushed.status, pushed.base, pushed.written) == ("created", first, 1), pushed
        assert any(".github/workflows/ci.yml" in line for line in pushed.left), pushed.left
        workflow = [".github/workflows/ci.yml"]
        with pytest.raises(ConflictError, match="cubicle/api"):  # another commit, and no lease
            client.push(record.id, PushRequest(branch="cubicle/api", force=workflow))
        forced = client.push(record.id, PushRequest(branch="cubicle/api", force=workflow, force_with_lease=True))
        assert (forced.status, forced.written) == ("replaced", 2), forced
    branch = _clone(git_server, "cubicle/api", tmp_path / "branch", PLAIN)
    assert (branch / "CHANGELOG.md").read_text() == "one line\n"
    assert (branch / ".github/workflows/ci.yml").read_text() == "on: push\n"
    assert not (branch / "NEWS.md").exists()  # on the commit the ref named, not the branch's newest
    _no_password_under(root / "data", keep=Path(settings["CUBICLE_GIT_CREDENTIALS"]))


def test_a_session_on_a_url_is_recorded_at_once_and_no_other_start_waits_on_its_fetch(
    git_server: GitServer, model_server: ScriptedServer, tmp_path: Path
) -> None:
    """While one URL's mirror is locked (another process's fetch of it, as far as the controller can tell), a
    session on it is answered at once (201, no commit yet), says it is fetching, and is cancelled cleanly; a
    session on another URL meanwhile runs its whole turn; once the lock is free the first URL's sessions fetch."""
    plain = tmp_path / "plain"
    shutil.copytree(INFLECTION, plain, ignore=shutil.ignore_patterns(".devcontainer"))
    git_server.create(PLAIN, source=plain)
    git_server.create("other", source=plain)
    root = tmp_path / "root"
    root.mkdir()
    settings = _settings(git_server, root / "data")
    mirror = gitmirror.path_of(root / "data", gitmirror.normalise(git_server.url(PLAIN)))
    mirror.parent.mkdir(parents=True, exist_ok=True)
    held = os.open(mirror.with_name(f"{mirror.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        with cubicle_serve(root, model_server, **settings) as served, Client(served.url, served.token) as client:
            blocked = client.create(RemoteRepo(url=git_server.url(PLAIN)), "t", model="unused")
            assert blocked.source is not None and (blocked.status, blocked.repo, blocked.source.commit) == (
                "running",
                "",
                "",
            ), blocked
            for event in client.events(blocked.id):  # live: it ends when the session does
                if event.type == "setup_output":
                    assert event.phase == "fetch" and git_server.url(PLAIN) in event.text, event
                    break
            model = register(model_server, REMOTE_TURNS[:1] + REMOTE_TURNS[2:], prefix="remote-other")
            other = client.wait(client.create(RemoteRepo(url=git_server.url("other")), "log it", model=model).id)
            assert other.status == "idle" and other.source is not None and other.source.commit, other
            assert client.get(blocked.id).status == "running"  # still waiting for the lock
            cancelled = client.cancel(blocked.id)
            assert (cancelled.status, cancelled.finish_reason, cancelled.repo) == ("cancelled", "cancelled", "")
            assert not (root / "data" / "workspaces" / blocked.id).exists()
            fcntl.flock(held, fcntl.LOCK_UN)
            model = register(model_server, REMOTE_TURNS[:1] + REMOTE_TURNS[2:], prefix="remote-after")
            after = client.wait(client.create(RemoteRepo(url=git_server.url(PLAIN)), "log it", model=model).id)
            assert after.status == "idle" and after.repo, after
    finally:
        os.close(held)
