"""A run's changes as the CLI user meets them: kept in the session's layer, reviewed, applied, reverted, discarded.

Each test runs `cubicle` as a subprocess on a scripted scenario against the real engine,
with a database and layers of its own (CUBICLE_DATA_DIR).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.agent.scripted import ScriptedServer
from controller.config import Settings
from controller.environment.inputs import definition_files
from controller.server.runtime import Runtime
from controller.server.sessions import NewSession, Sessions
from controller.server.store import Store
from controller.workspace.manager import Workspaces
from tests.agent_harness import register, text, tool
from tests.integration.cli_helpers import SESSION_ID, cubicle, environment, tree
from tests.integration.pty_helpers import Terminal, scenario_file
from tests.sandbox_defaults import AGENT_UID, SANDBOX_LIMITS, TEST_INSTANCE

HOSTILE_NAME = "evil\x1b]0;PWNED\x07.txt"
WRITES = {
    "name": "writes",
    "turns": [
        {
            "content": [
                {"type": "tool_use", "name": "write_file", "input": {"path": "notes.txt", "content": "one\ntwo\n"}},
                {
                    "type": "tool_use",
                    "name": "edit_file",
                    "input": {"path": "src/app.py", "old_string": "sum(items)", "new_string": "sum(items) or 0"},
                },
                {
                    "type": "tool_use",
                    "name": "run_command",
                    "input": {"command": "printf x > \"$(printf 'evil\\033]0;PWNED\\007.txt')\""},
                },
            ]
        },
        {"content": [{"type": "text", "text": "Done."}]},
    ],
}


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUBICLE_DATA_DIR", str(tmp_path / "data"))


def _run(tmp_path: Path, repo: Path, *flags: str, scenario: dict[str, Any] = WRITES) -> tuple[str, Any]:
    """`cubicle run` on the scenario; the session's id and the finished process."""
    done = cubicle("run", str(repo), "change things", "--scenario", scenario_file(tmp_path, scenario), *flags)
    found = SESSION_ID.search(done.stdout + done.stderr)
    assert found, done.stdout + done.stderr
    return found[0], done


def _assert_inert(output: str) -> None:
    """The hostile name is spelled out; none of its control characters reached the output raw."""
    assert "evil\\x1b]0;PWNED\\x07.txt" in output
    assert "\x1b" not in output and "\x07" not in output


def test_a_run_keeps_its_changes_out_of_the_checkout_and_says_how_to_apply_them(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    repo = make_repo()
    before = tree(repo)
    session_id, done = _run(tmp_path, repo)  # no flag and no terminal: kept
    assert done.returncode == 0, done.stderr
    assert tree(repo) == before
    out = " ".join(done.stdout.split())
    assert "3 files changed (2 added, 1 modified) · +4 −1" in out
    assert f"review: cubicle changes {session_id} --diff" in out and f"apply: cubicle apply {session_id}" in out
    _assert_inert(done.stdout)
    listed = cubicle("sessions", env={"COLUMNS": "200"})
    assert session_id in listed.stdout and "end_turn" in listed.stdout

    session_id, done = _run(tmp_path, repo, "--no-apply")
    assert done.returncode == 0, done.stderr
    assert tree(repo) == before and f"cubicle apply {session_id}" in done.stdout


def test_run_apply_writes_the_changes_and_reports_them_as_events(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    repo = make_repo()
    _, done = _run(tmp_path, repo, "--apply", "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[-3:] == ["changes", "session_finished", "applied"]
    assert events[-3]["summary"]["files"] == 3 and events[-3]["checkpoint"] == 1
    assert sorted(events[-1]["paths"]) == sorted([HOSTILE_NAME, "notes.txt", "src/app.py"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert (repo / "notes.txt").read_text() == "one\ntwo\n"
    assert (repo / "src/app.py").read_text() == "def total(items):\n    return sum(items) or 0\n"
    assert (repo / HOSTILE_NAME).read_bytes() == b"x"
    assert (repo / "notes.txt").stat().st_uid == AGENT_UID
    assert "applied 3 paths" in done.stderr
    _assert_inert(done.stderr)


def test_run_apply_after_a_limit_keeps_the_changes(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    repo = make_repo()
    before = tree(repo)
    _, done = _run(tmp_path, repo, "--apply", "--max-steps", "1")
    assert done.returncode == 3, done.stderr
    assert "Not applied: the turn ended with max_steps" in " ".join(done.stdout.split())
    assert tree(repo) == before


def test_changes_apply_conflict_force_revert_rewind_discard(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    repo = make_repo()
    session_id, done = _run(tmp_path, repo, "--no-apply")
    assert done.returncode == 0, done.stderr

    shown = cubicle("changes", session_id, "--diff")
    assert shown.returncode == 0, shown.stderr
    assert (
        "+one" in shown.stdout
        and "-    return sum(items)" in shown.stdout
        and "+    return sum(items) or 0" in shown.stdout
    )
    _assert_inert(shown.stdout)
    listed = json.loads(cubicle("changes", session_id, "--json").stdout)
    assert {c["path"]: c["kind"] for c in listed} == {
        HOSTILE_NAME: "added",
        "notes.txt": "added",
        "src/app.py": "modified",
    }
    assert all("diff" not in c for c in listed)
    few = cubicle("changes", session_id, "--json", env={"CUBICLE_LISTING_ENTRIES": "2"})
    assert len(json.loads(few.stdout)) == 2  # the list stays a list; that it is partial is said beside it
    assert "and 1 more change not listed" in few.stderr and "apply writes 1 of them" in few.stderr

    # The user edits a file the session changed: apply writes nothing, names the path, exits 5.
    (repo / "src/app.py").write_text("def total(items):\n    return 42  # mine\n")
    os.chown(repo / "src/app.py", AGENT_UID, AGENT_UID)
    before_apply = tree(repo)
    conflict = cubicle("apply", session_id)
    assert conflict.returncode == 5, conflict.stderr
    assert "src/app.py" in conflict.stderr and "--force" in conflict.stderr
    assert tree(repo) == before_apply

    forced = cubicle("apply", session_id, "--force", "src/app.py")
    assert forced.returncode == 0, forced.stderr
    assert (repo / "src/app.py").read_text() == "def total(items):\n    return sum(items) or 0\n"
    assert (repo / "notes.txt").exists() and "applied 3 paths" in forced.stdout
    _assert_inert(forced.stdout)

    reverted = cubicle("revert", session_id)
    assert reverted.returncode == 0, reverted.stderr
    assert tree(repo) == before_apply  # byte for byte, the user's edit included
    assert cubicle("revert", session_id).returncode == 2  # nothing left to revert

    assert cubicle("checkpoints", session_id).stdout.startswith("turn 1 ")
    rewound = cubicle("rewind", session_id, "1")
    assert rewound.returncode == 0, rewound.stderr
    missing = cubicle("rewind", session_id, "9")
    assert missing.returncode == 2 and "has no checkpoint 9 (it has: 1)" in " ".join(missing.stderr.split())

    assert cubicle("discard", session_id).returncode == 0
    gone = cubicle("changes", session_id)
    assert gone.returncode == 2 and "no workspace layer" in gone.stderr
    assert tree(repo) == before_apply


def test_an_unknown_session_is_a_usage_error() -> None:
    for command in (
        ["changes", "s_nosuch"],
        ["apply", "s_nosuch"],
        ["revert", "s_nosuch"],
        ["rewind", "s_nosuch", "1"],
    ):
        done = cubicle(*command)
        assert done.returncode == 2, (command, done.stderr)
        assert "No session 's_nosuch'." in done.stderr and "Traceback" not in done.stderr


WAIT_FOR_GO = "for i in $(seq 600); do [ -e /tmp/go ] && exit 0; sleep 0.1; done; exit 1"
"""The agent's command that holds the turn open until the test says go (by touching /tmp/go in the sandbox)."""


def test_a_running_session_refuses_apply_and_a_conflicting_run_apply_exits_5(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    """While a turn runs, apply and an overlapping run are refused (5); then the user writes a path the agent wrote
    and the run's --apply exits 5."""
    repo = make_repo()
    scenario = {
        "name": "slow",
        "turns": [
            {
                "content": [
                    {"type": "tool_use", "name": "write_file", "input": {"path": "notes.txt", "content": "agent\n"}},
                    {"type": "tool_use", "name": "run_command", "input": {"command": WAIT_FOR_GO}},
                ]
            },
            {"content": [{"type": "text", "text": "Done."}]},
        ],
    }
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller",
            "run",
            str(repo),
            "x",
            "--json",
            "--apply",
            "--scenario",
            scenario_file(tmp_path, scenario),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(),
    ) as process:
        assert process.stdout is not None
        session_id = ""
        for line in process.stdout:
            event = json.loads(line)
            session_id = event["session_id"]
            if event["type"] == "tool_call" and event["name"] == "run_command":
                break
        refused = cubicle("apply", session_id)
        assert refused.returncode == 5 and "is running a turn" in refused.stderr
        overlapping = cubicle(
            "run", str(repo / "src"), "x", "--scenario", scenario_file(tmp_path, WRITES), env={"COLUMNS": "400"}
        )
        assert overlapping.returncode == 5, overlapping.stderr
        assert f"Session {session_id} is running on {repo}, which overlaps {repo / 'src'}" in overlapping.stderr
        assert "running" in cubicle("sessions", env={"COLUMNS": "200"}).stdout
        (repo / "notes.txt").write_text("mine\n")
        os.chown(repo / "notes.txt", AGENT_UID, AGENT_UID)
        (sandbox,) = docker_client.containers.list(filters={"label": f"org.cubicle.session={session_id}"})
        sandbox.exec_run(["touch", "/tmp/go"])
        rest, errors = process.communicate(timeout=120)
    assert process.returncode == 5, errors
    assert "notes.txt" in errors and f"cubicle apply {session_id}" in errors
    assert (repo / "notes.txt").read_text() == "mine\n"
    assert json.loads(rest.splitlines()[-1])["type"] == "session_finished"


def test_a_terminal_is_asked_before_the_changes_are_applied(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    repo = make_repo()
    term = Terminal(
        "run",
        str(repo),
        "x",
        "--scenario",
        scenario_file(tmp_path, WRITES),
        env={"CUBICLE_DATA_DIR": os.environ["CUBICLE_DATA_DIR"]},
    )
    try:
        shown = term.expect("[y/N] ")  # after "?", or on a line of its own where a long path wrapped the question
        assert "3 files changed" in shown and "Apply these changes to" in shown
        assert not (repo / "notes.txt").exists()
        term.send(b"y\n")
        assert term.wait(120) == 0, term.text
    finally:
        term.close()
    assert "applied 3 paths" in term.text and "\x1b]0;PWNED" not in term.text
    assert (repo / "notes.txt").read_text() == "one\ntwo\n"


def test_gc_removes_orphan_volumes_and_the_layers_of_purged_sessions(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    instance = "gc-layers-test"
    dead = {"org.cubicle.managed": "true", "org.cubicle.session": "s_dead", "org.cubicle.owner": f"{instance}:999999:1"}
    volume = docker_client.volumes.create(name=f"cubicle-ws-gc-test-{os.getpid()}", labels=dead)
    repo = make_repo()
    kept, done = _run(tmp_path, repo, "--no-apply")
    assert done.returncode == 0, done.stderr
    layers = Workspaces(tmp_path / "data")
    layers.create("s_purged", repo, definition=definition_files(repo))
    other = make_repo("other")  # its session may be about to be written: left alone
    layers.create("s_fresh", other, definition=definition_files(other))
    old = time.time() - 3600
    for session_id in ("s_purged", kept):
        os.utime(tmp_path / "data" / "workspaces" / session_id, (old, old))
    swept = cubicle("gc", env={"CUBICLE_INSTANCE": instance})
    assert swept.returncode == 0, swept.stderr
    assert f"removed {volume.name} (session s_dead)" in swept.stdout
    assert not docker_client.volumes.list(filters={"name": volume.name})
    assert "removed the workspace layer of purged session s_purged" in swept.stdout
    assert layers.sessions() == sorted([kept, "s_fresh"])


async def _two_turns(data_dir: Path, repo: Path, model_server: ScriptedServer) -> str:
    """An API session (made in this process, as `cubicle serve` makes them) whose two turns each write a file."""
    settings = Settings(
        api_key="test",
        base_url=model_server.url,
        model_retries=0,
        data_dir=data_dir,
        instance=TEST_INSTANCE,  # type: ignore[attr-defined]
    )
    turns = [{"content": [tool("write_file", path=f"turn{n}.txt", content=f"{n}\n")]} for n in (1, 2)]
    model = register(model_server, [turns[0], {"content": [text("one")]}, turns[1], {"content": [text("two")]}])
    store = Store(data_dir / "cubicle.db")
    runtime = Runtime(settings)
    sessions = Sessions(settings, store, runtime)
    try:
        record = await sessions.create(NewSession(repo, "first", model, SANDBOX_LIMITS))
        await sessions.join(record.id)
        await sessions.follow_up(record.id, "second")
        await sessions.join(record.id)
    finally:
        await sessions.close()
        await runtime.close()
        store.close()
    return record.id


async def test_rewind_an_api_session_to_its_first_turn(
    tmp_path: Path, make_repo: Callable[..., Path], model_server: ScriptedServer, docker_client: Any
) -> None:
    repo = make_repo()
    session_id = await _two_turns(tmp_path / "data", repo, model_server)
    points = cubicle("checkpoints", session_id)
    assert [line.split()[:2] for line in points.stdout.splitlines()] == [["turn", "1"], ["turn", "2"]]
    assert "A turn2.txt" in cubicle("changes", session_id).stdout
    rewound = cubicle("rewind", session_id, "1")
    assert rewound.returncode == 0, rewound.stderr
    listed = json.loads(cubicle("changes", session_id, "--json").stdout)
    assert [c["path"] for c in listed] == ["turn1.txt"]
    assert cubicle("apply", session_id).returncode == 0
    assert (repo / "turn1.txt").read_text() == "1\n" and not (repo / "turn2.txt").exists()


WIDE = "total = " + " + ".join(f"price_{n}" for n in range(40))  # 400 characters: wider than any terminal default
WIDE_EDIT = {
    "name": "wide",
    "turns": [
        {
            "content": [
                {"type": "tool_use", "name": "write_file", "input": {"path": "wide.py", "content": WIDE + "\n"}},
                {
                    "type": "tool_use",
                    "name": "edit_file",
                    "input": {"path": "src/app.py", "old_string": "sum(items)", "new_string": "sum(items) or 0"},
                },
            ]
        },
        {"content": [{"type": "text", "text": "Done."}]},
    ],
}


def test_a_piped_diff_is_never_wrapped_so_git_applies_it(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    repo = make_repo()
    session_id, done = _run(tmp_path, repo, "--no-apply", scenario=WIDE_EDIT)
    assert done.returncode == 0, done.stderr
    shown = cubicle("changes", session_id, "--diff")  # stdout is a pipe here
    assert shown.returncode == 0 and f"+{WIDE}\n" in shown.stdout, shown.stdout
    copy = tmp_path / "copy"
    (copy / "src").mkdir(parents=True)
    (copy / "src" / "app.py").write_text((repo / "src" / "app.py").read_text())
    applied = subprocess.run(
        ["git", "apply"], cwd=copy, input=shown.stdout, capture_output=True, text=True, check=False
    )
    assert applied.returncode == 0, applied.stderr
    assert (copy / "wide.py").read_text() == WIDE + "\n" and "sum(items) or 0" in (copy / "src" / "app.py").read_text()


def test_apply_some_paths_now_and_the_rest_later(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    """A path given as the review printed it (the hostile name's escapes typed as shown) applies that file only."""
    repo = make_repo()
    session_id, done = _run(tmp_path, repo)
    assert done.returncode == 0, done.stderr

    def unapplied() -> int | None:
        (record,) = [r for r in json.loads(cubicle("sessions", "--json").stdout) if r["id"] == session_id]
        return record["unapplied"]  # type: ignore[no-any-return]

    assert unapplied() == 3  # counted as the turn ended
    unknown = cubicle("apply", session_id, "notes.txt", "nope.txt")
    assert unknown.returncode == 2 and "nope.txt" in unknown.stderr, unknown.stdout + unknown.stderr
    assert not (repo / "notes.txt").exists()  # nothing was written
    part = cubicle("apply", session_id, "notes.txt", "evil\\x1b]0;PWNED\\x07.txt")
    assert part.returncode == 0, part.stdout + part.stderr
    assert (repo / "notes.txt").read_text() == "one\ntwo\n" and (repo / HOSTILE_NAME).read_text() == "x"
    assert "sum(items) or 0" not in (repo / "src/app.py").read_text()  # the rest stays in the session
    listed = json.loads(cubicle("changes", session_id, "--json").stdout)
    assert [c["path"] for c in listed] == ["src/app.py"] and unapplied() == 1
    rest = cubicle("apply", session_id)
    assert rest.returncode == 0 and "sum(items) or 0" in (repo / "src/app.py").read_text()
    assert unapplied() == 0


def _commands(*commands: str) -> dict[str, Any]:
    """A scenario of one turn running each of ``commands`` in the sandbox."""
    uses = [{"type": "tool_use", "name": "run_command", "input": {"command": command}} for command in commands]
    return {"name": "commands", "turns": [{"content": uses}, {"content": [{"type": "text", "text": "Done."}]}]}


def test_a_tools_own_ignored_cache_is_listed_as_ignored_and_not_applied(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    repo = make_repo()
    pytest_writes = (  # what `python3 -m pytest` leaves beside a project (the image has no pytest)
        "mkdir -p .pytest_cache/v/cache && printf '# Created by pytest automatically.\\n*\\n' > .pytest_cache/.gitignore"
        " && echo '[]' > .pytest_cache/v/cache/nodeids && echo '# pytest cache' > .pytest_cache/README.md"
    )
    scenario = _commands(pytest_writes, "echo 'def test_total(): pass' > test_app.py")
    session_id, done = _run(tmp_path, repo, "--no-apply", scenario=scenario)
    assert done.returncode == 0, done.stderr
    listed = {c["path"]: c for c in json.loads(cubicle("changes", session_id, "--json").stdout)}
    held = [".pytest_cache", ".pytest_cache/.gitignore", ".pytest_cache/README.md", ".pytest_cache/v/cache/nodeids"]
    assert {path: listed[path]["disposition"] for path in held} == dict.fromkeys(held, "ignored")
    assert ".pytest_cache/.gitignore, which the session's tools wrote" in listed[".pytest_cache/README.md"]["reason"]
    assert listed["test_app.py"]["disposition"] == "apply"
    applied = cubicle("apply", session_id)
    assert applied.returncode == 0, applied.stderr
    assert (repo / "test_app.py").exists() and not (repo / ".pytest_cache").exists()


def test_the_agents_ignore_file_of_everything_at_the_top_hides_none_of_its_changes(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    repo = make_repo()
    scenario = _commands("printf '*\\n' > .gitignore && echo planted >> src/app.py && mkdir new && echo n > new/n.py")
    session_id, done = _run(tmp_path, repo, "--no-apply", scenario=scenario)
    assert done.returncode == 0, done.stderr
    listed = {c["path"]: c["disposition"] for c in json.loads(cubicle("changes", session_id, "--json").stdout)}
    assert listed == {".gitignore": "apply", "src/app.py": "apply", "new": "apply", "new/n.py": "apply"}
    applied = cubicle("apply", session_id)
    assert applied.returncode == 0, applied.stderr
    assert (repo / "src/app.py").read_text().endswith("planted\n") and (repo / "new/n.py").exists()
