"""The workspace layer's life over HTTP: review, apply, revert, conflicts, rewind, discard, the repository's pin.

A real engine and the scripted model; the checkout is compared entry by entry (``.git``
included) with how it was, as its owner's git would see it.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from controller.client import Client
from tests.agent_harness import text, tool
from tests.eventually import eventually
from tests.integration.helpers import containers_of
from tests.integration.layer_api import TOKEN, LayerApi, commands
from tests.integration.layer_host import OWNER, Host, chown_tree, tree


@pytest.fixture
def host(layer_base: Path) -> Host:
    return Host(layer_base, "h-" + secrets.token_hex(4))


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def files(host: Host) -> dict[str, str]:
    """The checkout's regular files outside .git, with their text."""
    return {
        p: (host.repo / p).read_text()
        for p, (kind, *_) in tree(host.repo).items()
        if not p.startswith(".git/") and (host.repo / p).is_file() and not (host.repo / p).is_symlink()
    }


def user_edit(host: Host, rel: str, content: str) -> None:
    (host.repo / rel).write_text(content)
    os.chown(host.repo / rel, OWNER, OWNER)


def test_an_unapplied_session_leaves_the_checkout_byte_identical_even_after_a_wipe(
    layer_api: LayerApi, host: Host
) -> None:
    before = tree(host.repo)
    sid = layer_api.session(host.repo, commands("rm -rf /workspace/* /workspace/.git /workspace/.gitignore; ls -A"))
    events = layer_api.events(sid)
    assert kinds(events).index("changes") == len(events) - 2  # just before session_finished
    assert events[-2]["summary"]["deleted"] >= 4 and events[-2]["checkpoint"] == 1
    changes = layer_api.changes(sid)
    assert changes["README.md"]["kind"] == "deleted" and changes[".git"]["disposition"] == "discarded"
    assert tree(host.repo) == before
    assert layer_api.http.delete(f"/v1/sessions/{sid}").status_code == 200
    assert not layer_api.layer(sid).exists()
    assert layer_api.http.get(f"/v1/sessions/{sid}/changes").status_code == 404
    assert tree(host.repo) == before
    host.check()


def test_revert_after_apply_restores_the_checkout_byte_for_byte(layer_api: LayerApi, host: Host) -> None:
    before = tree(host.repo)
    sid = layer_api.session(
        host.repo,
        commands(
            "echo edited >> README.md; rm docs/a.txt; echo new > new.txt; chmod 755 src/app.py;"
            "rm -rf src && mkdir src && echo fresh > src/app.py; rm .gitignore && mkdir .gitignore && touch .gitignore/x"
        ),
    )
    applied = layer_api.apply(sid)
    assert {"README.md", "docs/a.txt", "new.txt", "src/app.py", ".gitignore/x"} <= set(applied["applied"])
    assert (host.repo / "new.txt").read_text() == "new\n" and (host.repo / ".gitignore").is_dir()
    reverted = layer_api.post(sid, "revert")
    assert reverted.status_code == 200, reverted.text
    assert reverted.json()["record"] == applied["record"]
    assert tree(host.repo) == before
    assert [k for k in kinds(layer_api.events(sid)) if k in ("applied", "reverted")] == ["applied", "reverted"]
    assert layer_api.post(sid, "revert").status_code == 404  # nothing left to revert


def test_a_user_edit_conflicts_and_force_overwrites_only_the_named_path(layer_api: LayerApi, host: Host) -> None:
    sid = layer_api.session(
        host.repo, commands("echo agent > README.md; echo agent > src/app.py; echo agent > new.txt")
    )
    user_edit(host, "README.md", "# the user's README\n")
    user_edit(host, "src/app.py", "# the user's app\n")
    user_edit(host, "docs/a.txt", "the user's own note\n")  # a path the agent never touched
    before = tree(host.repo)
    refused = layer_api.post(sid, "apply")
    assert refused.status_code == 409, refused.text
    assert [c["path"] for c in refused.json()["conflicts"]] == ["README.md", "src/app.py"]
    assert tree(host.repo) == before, "a conflicted apply wrote something"
    still = layer_api.post(sid, "apply", force=["README.md"])
    assert still.status_code == 409 and [c["path"] for c in still.json()["conflicts"]] == ["src/app.py"]
    assert tree(host.repo) == before
    layer_api.apply(sid, force=["README.md", "src/app.py"])
    assert files(host) | {".gitignore": ""} == {
        "README.md": "agent\n",
        "src/app.py": "agent\n",
        "new.txt": "agent\n",
        "docs/a.txt": "the user's own note\n",
        ".gitignore": "",
    }
    host.check()


def test_force_overwrites_only_the_forced_path_and_applies_the_rest(layer_api: LayerApi, host: Host) -> None:
    sid = layer_api.session(host.repo, commands("echo agent > README.md; echo agent > new.txt"))
    user_edit(host, "README.md", "# the user's README\n")
    user_edit(host, "docs/a.txt", "the user's own note\n")
    refused = layer_api.post(sid, "apply")
    assert refused.status_code == 409 and [c["path"] for c in refused.json()["conflicts"]] == ["README.md"]
    assert (host.repo / "README.md").read_text() == "# the user's README\n" and not (host.repo / "new.txt").exists()
    assert layer_api.apply(sid, force=["README.md"])["applied"] == ["README.md", "new.txt"]
    assert (host.repo / "README.md").read_text() == "agent\n"
    assert (host.repo / "docs/a.txt").read_text() == "the user's own note\n"


def test_rewind_to_turn_one_after_a_second_turn_then_apply_gives_turn_ones_files(
    layer_api: LayerApi, host: Host
) -> None:
    turns = [
        {"content": [tool("run_command", command="echo one > turn.txt; rm README.md; mkdir -p d; echo d1 > d/d.txt")]},
        {"content": [text("first turn")]},
        {
            "content": [
                tool("run_command", command="echo two > turn.txt; echo two > two.txt; echo back > README.md; rm -rf d")
            ]
        },
        {"content": [text("second turn")]},
    ]
    sid = layer_api.session(host.repo, turns)
    second = layer_api.follow_up(sid, "more")
    assert [e["checkpoint"] for e in second if e["type"] == "changes"] == [1, 2]
    listed = layer_api.http.get(f"/v1/sessions/{sid}/checkpoints").json()
    assert [c["turn"] for c in listed] == [1, 2]
    rewound = layer_api.post(sid, "rewind", turn=1)
    assert rewound.status_code == 200, rewound.text
    assert "rewound" in kinds(layer_api.events(sid))
    assert {p: c["kind"] for p, c in layer_api.changes(sid).items()} == {
        "README.md": "deleted",
        "d": "added",
        "d/d.txt": "added",
        "turn.txt": "added",
    }
    layer_api.apply(sid)
    assert files(host) == {
        "src/app.py": "def total(items):\n    return sum(items)\n",
        "docs/a.txt": "a\n",
        ".gitignore": "build/\n",
        "turn.txt": "one\n",
        "d/d.txt": "d1\n",
    }
    transcript = layer_api.http.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    assert "rewound to how they were at the end of turn 1" in transcript[-1]["content"][0]["text"]
    assert layer_api.post(sid, "rewind", turn=2).status_code == 404  # later checkpoints go with the rewind


def test_a_root_owned_repository_is_refused(layer_api: LayerApi, layer_base: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a repository owned by root needs root to create")
    repo = layer_base / f"root-{secrets.token_hex(4)}"
    repo.mkdir()
    (repo / "README.md").write_text("# root's\n")
    refused = layer_api.http.post("/v1/sessions", json={"repo": str(repo), "task": "t", "model": "any"})
    assert refused.status_code == 403 and "owned by root" in refused.json()["detail"]
    listed = layer_api.http.get("/v1/sessions", params={"limit": 100}).json()["items"]
    assert all(s["repo"] != str(repo) for s in listed)


def test_apply_on_finish_applies_after_end_turn_but_not_after_a_limit(layer_api: LayerApi, host: Host) -> None:
    finished = layer_api.session(host.repo, commands("echo done > finished.txt"), apply="on_finish")
    events = layer_api.events(finished)
    assert kinds(events)[-3:] == ["changes", "applied", "session_finished"]
    assert events[-1]["reason"] == "end_turn" and (host.repo / "finished.txt").read_text() == "done\n"
    other = Host(host.base.parent, "h-" + secrets.token_hex(4))
    limited = layer_api.session(
        other.repo, commands("echo a > a.txt", "echo b > b.txt"), apply="on_finish", limits={"max_steps": 1}
    )
    events = layer_api.events(limited)
    assert events[-1]["reason"] == "max_steps" and "applied" not in kinds(events)
    assert not (other.repo / "a.txt").exists() and "a.txt" in layer_api.changes(limited)


def test_delete_discards_the_layer_unless_it_was_applied(layer_api: LayerApi, host: Host) -> None:
    before = tree(host.repo)
    kept = layer_api.session(host.repo, commands("echo kept > kept.txt"))
    layer_api.apply(kept)
    assert layer_api.http.delete(f"/v1/sessions/{kept}").status_code == 200
    assert layer_api.layer(kept).is_dir(), "an applied layer stays, so its apply can be reverted"
    assert layer_api.post(kept, "revert").status_code == 200 and tree(host.repo) == before
    discarded = layer_api.post(kept, "discard")
    assert discarded.status_code == 200 and not layer_api.layer(kept).exists()
    assert "discarded" in kinds(layer_api.events(kept))
    dropped = layer_api.session(host.repo, commands("echo dropped > dropped.txt"))
    assert layer_api.http.delete(f"/v1/sessions/{dropped}").status_code == 200
    assert not layer_api.layer(dropped).exists() and tree(host.repo) == before


@pytest.mark.parametrize("swap", ["symlink", "directory"])
def test_a_repository_swapped_between_two_containers_fails_the_turn_and_apply(
    layer_base: Path, model_server: Any, docker_client: Any, swap: str
) -> None:
    """The session pinned the checkout's path, device and inode; a container start and an apply check them again."""
    host = Host(layer_base, "swap-" + secrets.token_hex(4))
    other = layer_base / f"other-{secrets.token_hex(4)}"
    other.mkdir()
    (other / "precious.txt").write_text("not the session's\n")
    chown_tree(other)
    other_before = tree(other)
    turns = [
        {"content": [tool("run_command", command="echo one > one.txt")]},
        {"content": [text("first")]},
        {"content": [tool("run_command", command="echo pwned > pwned.txt; ls")]},
        {"content": [text("second")]},
    ]
    with LayerApi.serve(layer_base, model_server, idle_timeout_s=0.3, data_dir=layer_base / f"data-{swap}") as api:
        sid = api.session(host.repo, turns)
        eventually(lambda: containers_of(docker_client, sid), until=lambda c: c == [], what="the idle container goes")
        host.repo.rename(host.base / "moved")
        if swap == "symlink":
            host.repo.symlink_to(other)
        else:
            (host.base / "moved").rename(other.with_name(other.name + "-old"))
            other.rename(host.repo)
        events = api.follow_up(sid, "again")
        errors = [e["message"] for e in events if e["type"] == "error"]
        assert any("no longer leads to the directory this session began on" in m for m in errors), errors
        assert events[-1]["reason"] == "error"
        refused = api.post(sid, "apply")
        assert refused.status_code == 409 and "no longer leads" in refused.json()["detail"], refused.text
        assert api.http.get(f"/v1/sessions/{sid}/changes").status_code == 409
    target = other if swap == "symlink" else host.repo
    assert tree(target) == other_before, "the swapped-in directory was written"


def test_apply_follow_up_apply_again_then_revert_both(layer_api: LayerApi, host: Host) -> None:
    """The next turn's container sees what was applied; its edits apply on top; two reverts restore the start."""
    before = tree(host.repo)
    turns = [
        {"content": [tool("run_command", command="echo one >> README.md; echo one > notes.txt")]},
        {"content": [text("first")]},
        {
            "content": [
                tool("run_command", command="grep -c one README.md notes.txt; echo two >> README.md; rm notes.txt")
            ]
        },
        {"content": [text("second")]},
    ]
    sid = layer_api.session(host.repo, turns)
    first = layer_api.apply(sid)
    assert sorted(first["applied"]) == ["README.md", "notes.txt"] and layer_api.changes(sid) == {}
    events = layer_api.follow_up(sid, "more")
    seen = [e for e in events if e["type"] == "tool_result"][-1]["output"]
    assert "README.md:1" in seen and "notes.txt:1" in seen, seen  # the fresh container reads the applied files
    second = layer_api.apply(sid)
    assert sorted(second["applied"]) == ["README.md", "notes.txt"]
    assert (host.repo / "README.md").read_text() == "# demo\none\ntwo\n" and not (host.repo / "notes.txt").exists()
    assert layer_api.post(sid, "revert").json()["record"] == second["record"]
    assert (host.repo / "notes.txt").read_text() == "one\n"
    assert layer_api.post(sid, "revert").json()["record"] == first["record"]
    assert tree(host.repo) == before


def test_apply_as_the_idle_timer_removes_the_container(layer_base: Path, model_server: Any) -> None:
    """Both remove the same container; apply waits until it is gone (it answered 503 "volume is in use")."""
    with LayerApi.serve(layer_base, model_server, idle_timeout_s=0.03, data_dir=layer_base / "data-idle") as api:
        for step in range(8):
            host = Host(layer_base, "idle-" + secrets.token_hex(4))
            sid = api.session(host.repo, commands("echo x > x.txt"))
            time.sleep(0.01 * step)  # around the moment the idle timer fires
            assert api.apply(sid)["applied"] == ["x.txt"]


def test_a_turn_past_the_names_limit_stops_after_its_command_and_the_layer_can_only_be_rewound(
    layer_api: LayerApi, host: Host
) -> None:
    links = "mkdir links && echo x > links/f && for i in $(seq 1100); do ln links/f links/$i; done"
    turns = [
        {"content": [tool("run_command", command="echo kept > kept.txt")]},
        {"content": [text("first turn")]},
        {"content": [tool("run_command", command=links)]},
        {"content": [tool("run_command", command="echo never > never.txt")]},
    ]
    before = tree(host.repo)
    sid = layer_api.session(host.repo, turns, limits={"names": 1024})
    second = layer_api.follow_up(sid, "more")
    assert second[-1]["reason"] == "too_many_entries" and "1,024 entries" in second[-1]["detail"]
    errors = [e for e in second if e["type"] == "error"]
    assert [e["kind"] for e in errors] == ["too_many_entries", "too_many_entries"]  # the turn's, then no checkpoint
    changes = [e for e in second if e["type"] == "changes"]
    assert changes[-1]["checkpoint"] is None and changes[-1]["summary"]["truncated_at"] == 1024
    listed = layer_api.http.get(f"/v1/sessions/{sid}/changes")
    assert listed.status_code == 200 and listed.headers["Cubicle-Truncated-At"] == "1024"
    assert len(listed.json()) <= 1024
    refused = layer_api.post(sid, "apply")
    assert refused.status_code == 409 and "1,024" in refused.json()["detail"], refused.text
    assert tree(host.repo) == before
    transcript = layer_api.http.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    assert "The turn was stopped" in transcript[-1]["content"][-1]["text"]  # the model reads why, next turn
    assert layer_api.post(sid, "rewind", turn=1).status_code == 200
    assert layer_api.apply(sid)["applied"] == ["kept.txt"]
    assert not (host.repo / "never.txt").exists()


def test_a_listing_past_the_servers_bound_counts_the_rest_and_apply_writes_them(
    layer_base: Path, model_server: Any, host: Host
) -> None:
    with LayerApi.serve(layer_base, model_server, listing_entries=2, data_dir=layer_base / "data-listing") as api:
        sid = api.session(host.repo, commands("echo 1 > a.txt; echo 2 > b.txt; echo 3 > c.txt"))
        listed = api.http.get(f"/v1/sessions/{sid}/changes")
        assert [c["path"] for c in listed.json()] == ["a.txt", "b.txt"] and listed.headers["Cubicle-Unlisted"] == "1"
        assert "Cubicle-Truncated-At" not in listed.headers
        with Client(str(api.http.base_url), TOKEN) as client:
            found = client.changes(sid)
        assert len(found) == 2 and found.unlisted == 1 and found.unlisted_applied == 1 and found.truncated_at is None
        assert api.events(sid)[-2]["summary"]["files"] == 3  # the turn's own count is of every change
        applied = api.apply(sid)
        assert applied["applied"] == ["a.txt", "b.txt"] and applied["more_applied"] == 1  # bounded like a listing
        assert files(host)["c.txt"] == "3\n" and api.events(sid)[-1]["more"] == 1
        reverted = api.post(sid, "revert").json()
        assert reverted["reverted"] == ["a.txt", "b.txt"] and reverted["more_reverted"] == 1
        assert not (host.repo / "c.txt").exists()
