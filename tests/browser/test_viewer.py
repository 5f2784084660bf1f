"""The session viewer at /ui/ in a real browser, against a real `cubicle serve`, the scripted model and Docker.

What is asserted is what the page shows (elements, their text, counts), compared with the API's own answers.
"""

from __future__ import annotations

import secrets
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.select import Select

from controller.agent.scripted import free_port
from tests.agent_harness import open_gate, register, text, tool
from tests.browser.conftest import LISTING, TOKEN, Viewer, another_port, cookie_client, idle_session
from tests.eventually import eventually
from tests.integration.helpers import container_running

UI_WAIT = 60


def find(parent: WebDriver | WebElement, testid: str) -> list[WebElement]:
    return parent.find_elements(By.CSS_SELECTOR, f'[data-testid="{testid}"]')


def one(parent: WebDriver | WebElement, testid: str) -> WebElement:
    found = find(parent, testid)
    assert len(found) == 1, f"{len(found)} elements with data-testid={testid}"
    return found[0]


def wait(check: Callable[[], Any], what: str, timeout: float = UI_WAIT, until: Callable[[Any], object] = bool) -> Any:
    """``check()``'s first value that satisfies ``until``; on time out, the failure shows the last value."""
    return eventually(
        check,
        what=what,
        until=until,
        timeout=timeout,
        interval=0.05,
        ignoring=(StaleElementReferenceException, NoSuchElementException, AssertionError),
    )


def texts(driver: WebDriver, testid: str) -> list[str]:
    """The elements' text as in the DOM (textContent: also inside closed <details>), read in one go in the page,
    so a list the page rebuilds meanwhile cannot leave a stale element behind."""
    script = "return Array.from(document.querySelectorAll(arguments[0]), (e) => e.textContent)"
    found: list[str] = driver.execute_script(script, f'[data-testid="{testid}"]')
    return found


LOADS = 3
"""How many times ``load`` opens a page whose requests Chromium failed with ERR_NETWORK_CHANGED (and only then)."""
GAVE_UP = "the page gave up"


def load(
    driver: WebDriver,
    url: str | None = None,
    ready: Callable[[], Any] | None = None,
    what: str = "the page's script to run",
    gave_up: Callable[[], Any] = lambda: False,
    timeout: float = 45,
) -> Any:
    """Open ``url`` (None: reload) and wait until ``ready()`` (by default: the viewer's script has run); its value.

    A bound against a hang (a loaded CI run once took over 15 s to run the page's module). Whenever another test
    creates or removes a Docker network (a session's egress proxy's), the host gets or loses a bridge with an
    address, and Chromium fails the requests it has in flight with ERR_NETWORK_CHANGED (CI's console showed it
    for a module and for Swagger UI's schema; `docker network create` and `rm` beside a page's fetches do it
    every time): the server never sees them. A page whose module failed so stays at "Loading…", and Swagger UI
    shows its error; such a page is loaded again, only when the browser's console names that error, at most
    ``LOADS`` times. ``gave_up()`` says early that the page will not get ready (Swagger UI's error box).
    """
    ready = ready or (lambda: one(driver, "view").text != "Loading…" or None)
    attempt = 0
    while True:
        attempt += 1
        driver.get(url) if url is not None else driver.refresh()
        try:
            found = wait(lambda: ready() or (gave_up() and GAVE_UP), what, timeout=timeout)
        except AssertionError as error:
            failure = str(error)
        else:
            if found != GAVE_UP:
                return found
            failure = f"{GAVE_UP} before {what}"
        # Reading the console empties it: what it said goes into the failure, or the report would show nothing.
        console = [f"{entry['level']} {entry['message']}" for entry in driver.get_log("browser")]
        if attempt == LOADS or not any("ERR_NETWORK_CHANGED" in line for line in console):
            raise AssertionError(f"{failure}\nthe browser's console (load {attempt}):\n" + "\n".join(console))


def sign_in(driver: WebDriver, viewer: Viewer) -> None:
    load(driver, viewer.url + "/")
    wait(lambda: find(driver, "sign-in-form") or find(driver, "sessions-table"), "the sign-in form or the list")
    if find(driver, "sign-in-form"):
        one(driver, "token-input").send_keys(TOKEN)
        one(driver, "sign-in").click()
        wait(lambda: find(driver, "sessions-table"), "the sessions list after signing in")


def open_session(driver: WebDriver, viewer: Viewer, sid: str, suffix: str = "") -> None:
    sign_in(driver, viewer)
    load(driver, f"{viewer.url}/ui/#/sessions/{sid}{suffix}")
    wait(lambda: one(driver, "session-id").text == sid, "the session page")


def status(driver: WebDriver) -> str:
    return str(one(driver, "status").get_attribute("data-status"))


def wait_finished(driver: WebDriver, reason: str = "end_turn", count: int = 1) -> None:
    wait(lambda: texts(driver, "finished-reason") == [reason] * count or None, f"{count} turn(s) ending with {reason}")
    wait(lambda: status(driver) != "running" or None, "the record's status after the turn")


def screenshot(driver: WebDriver, folder: Path, name: str) -> None:
    driver.save_screenshot(str(folder / f"{name}.png"))


def test_sign_in_refuses_a_wrong_token_and_signs_out(driver: WebDriver, viewer: Viewer) -> None:
    driver.delete_all_cookies()
    load(driver, viewer.url + "/")
    assert wait(lambda: driver.current_url.endswith("/ui/"), "/ redirects to /ui/")
    wait(lambda: find(driver, "token-input"), "the sign-in form")  # the page's script draws it after the load
    one(driver, "token-input").send_keys("not-the-token")
    one(driver, "sign-in").click()
    wait(lambda: one(driver, "sign-in-error").is_displayed(), "the refusal")
    assert "not the server's" in one(driver, "sign-in-error").text or "token" in one(driver, "sign-in-error").text
    assert not find(driver, "sessions-table")
    field = one(driver, "token-input")
    field.clear()
    field.send_keys(TOKEN)
    one(driver, "sign-in").click()
    wait(lambda: find(driver, "sessions-table"), "the sessions list")
    assert one(driver, "sign-out").is_displayed()
    cookie = driver.get_cookie("cubicle_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["value"] != TOKEN
    one(driver, "sign-out").click()
    wait(lambda: find(driver, "sign-in-form"), "the sign-in form after signing out")
    sign_in(driver, viewer)


LIVE = [
    {"content": [text("Looking around the repository."), tool("run_command", command="echo hello-from-the-sandbox")]},
    {"content": [text("First turn done.")], "delay_s": 1.5},  # the page must show the tool's result meanwhile
    {"content": [text("Sleeping now."), tool("run_command", command="sleep 60.613", timeout_s=120)]},
    {"content": [text("unreachable")]},
]


def test_start_from_the_form_watch_it_live_follow_up_and_cancel(
    driver: WebDriver, viewer: Viewer, model_server: Any, docker_client: Any, screenshots: Path
) -> None:
    repo = viewer.make_repo("form-repo")
    scenario = register(model_server, prefix="ui", turns=LIVE)
    sign_in(driver, viewer)
    wait(
        lambda: (
            str(repo)
            in [o.get_attribute("value") for o in find(driver, "new-repo")[0].find_elements(By.TAG_NAME, "option")]
        ),
        "the repository in the form's list",
    )
    Select(one(driver, "new-repo")).select_by_value(str(repo))
    one(driver, "new-task").send_keys("Say hello from the sandbox")
    one(driver, "new-model").send_keys(scenario)
    one(driver, "new-max-steps").send_keys("10")
    Select(one(driver, "new-network")).select_by_value("none")
    one(driver, "new-submit").click()
    wait(lambda: "#/sessions/s_" in driver.current_url, "the page of the new session")
    sid = driver.current_url.rsplit("/", 1)[1]
    record = viewer.api.get(sid)
    assert record["repo"] == str(repo) and record["limits"]["max_steps"] == 10 and record["model"] == scenario

    output = wait(
        lambda: [t for t in texts(driver, "tool-output") if "hello-from-the-sandbox" in t], "the tool's output"
    )
    assert status(driver) == "running", "the result showed only after the turn ended: not live"
    assert len(output) == 1 and "<stdout>\nhello-from-the-sandbox\n</stdout>" in output[0]
    assert texts(driver, "user-text") == ["Say hello from the sandbox"]
    assert texts(driver, "tool-name") == ["run_command"]
    assert "exit 0" in texts(driver, "tool-result-summary")[0]
    wait_finished(driver)
    assert texts(driver, "assistant-body") == ["Looking around the repository.", "First turn done."]
    assert status(driver) == "idle" and one(driver, "steps").text == "2"
    assert one(driver, "tokens").text != "0"
    screenshot(driver, screenshots, "session")

    one(driver, "followup-text").send_keys("Now sleep for a minute")
    one(driver, "followup-send").click()
    wait(
        lambda: texts(driver, "user-text") == ["Say hello from the sandbox", "Now sleep for a minute"] or None,
        "the follow-up in the transcript",
    )
    wait(lambda: "sleep 60.613" in texts(driver, "tool-summary") and find(driver, "tool-pending"), "the sleep running")
    eventually(lambda: container_running(docker_client, "sleep 60.613"), what="the command runs")  # its own only
    assert status(driver) == "running"
    one(driver, "cancel").click()  # how soon the cancel shows is the cancel's and SSE delivery's benchmark rows
    wait(lambda: status(driver) == "cancelled" and "cancelled" in texts(driver, "finished-reason"), "the cancel shown")
    assert viewer.api.get(sid)["finish_reason"] == "cancelled"
    assert one(driver, "finish-reason").text == "cancelled"
    assert texts(driver, "finished-reason") == ["end_turn", "cancelled"]
    summaries = texts(driver, "tool-result-summary")
    assert len(summaries) == 2 and summaries[1].startswith("✗")
    one(driver, "back").click()
    row = wait(lambda: [r for r in find(driver, "session-row") if r.get_attribute("data-session-id") == sid], "its row")
    assert one(row[0], "session-status").text == "cancelled"
    assert one(row[0], "session-task").text == "Say hello from the sandbox"
    assert one(row[0], "session-steps").text == "3"
    screenshot(driver, screenshots, "list")


def held(gate: str) -> list[dict[str, Any]]:
    """Five steps; the third is answered only once ``gate`` opens, so the session runs as long as the test needs."""
    steps = [
        {
            "content": [text(f"Step {i}: checking line {i}."), tool("run_command", command=f"echo line-{i}")],
            "delay_s": 0.2,
            **({"after": gate} if i == 3 else {}),
        }
        for i in range(1, 6)
    ]
    return [*steps, {"content": [text("All five lines checked.")], "delay_s": 0.2}]


def _page_matches_transcript(driver: WebDriver, viewer: Viewer, sid: str) -> None:
    messages = viewer.api.http.get(f"/v1/sessions/{sid}/messages").json()["messages"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    expected_texts = ["".join(b["text"] for b in m["content"] if b["type"] == "text") for m in assistant]
    expected_ids = [b["id"] for m in assistant for b in m["content"] if b["type"] == "tool_use"]
    assert texts(driver, "assistant-body") == [t for t in expected_texts if t]
    assert [e.get_attribute("data-tool-id") for e in find(driver, "tool-call")] == expected_ids
    assert len(find(driver, "tool-result")) == len(expected_ids)
    seqs = [
        int(str(e.get_attribute("data-seq")))
        for e in find(driver, "transcript")[0].find_elements(By.CSS_SELECTOR, ".block")
    ]
    assert seqs == sorted(set(seqs)), "a block shown twice or out of order"
    events = viewer.api.events(sid)
    assert one(driver, "transcript").get_attribute("data-last-seq") == str(events[-1]["seq"])


def test_reload_and_a_dropped_stream_show_the_transcript_whole_and_once(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    gate = f"reload-{secrets.token_hex(4)}"
    model = register(model_server, prefix="ui", turns=held(gate))
    sid = viewer.api.create(str(viewer.make_repo("reload-repo")), model)["id"]
    open_session(driver, viewer, sid)
    wait(lambda: len(find(driver, "tool-result")) >= 1 or None, "a first result")
    assert status(driver) == "running"
    load(driver)  # mid-session: replay from 0, then live
    wait(lambda: len(find(driver, "tool-result")) >= 2 or None, "results after the reload")
    assert status(driver) == "running"  # the third step waits for the gate: the session cannot have ended
    # A dropped connection: the network goes away for a moment; the page resumes from its last seq.
    driver.execute_cdp_cmd("Network.enable", {})  # type: ignore[attr-defined]
    offline = {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0}
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", offline)  # type: ignore[attr-defined]
    try:
        # Chromium's emulated outage keeps an open stream open: the page notices when the turn's stream ends and
        # its reconnect finds no network. The session goes on (offline for the page, not for this test) and ends.
        open_gate(model_server.url, gate)
        wait(lambda: one(driver, "stream-state").text != "live" or None, "the page noticing the dropped stream", 20)
        time.sleep(0.5)
    finally:
        # Back online, unthrottled (-1, as the protocol spells it), and the Network domain off again, so the reload
        # below (and the next test, which shares this browser: CI's run 6 of 2026-12-06 failed five more tests
        # offline after this one failed) starts from the browser's default state.
        online = {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", online)  # type: ignore[attr-defined]
        driver.execute_cdp_cmd("Network.disable", {})  # type: ignore[attr-defined]
    wait_finished(driver)
    assert len(find(driver, "user-message")) == 1
    _page_matches_transcript(driver, viewer, sid)
    load(driver)  # a finished session replays whole, once
    wait_finished(driver)
    _page_matches_transcript(driver, viewer, sid)


HOSTILE = (
    "<script>window.pwned='script'</script> <img src=x onerror=\"window.pwned='img'\"> "
    "[click](javascript:window.pwned='md') <a href=\"javascript:window.pwned='a'\">link</a> "
    "\x1b[31mred\x1b[0m \x1b]8;;javascript:alert(1)\x1b\\osc\x1b]8;;\x1b\\ \u202eevil"
)
HOSTILE_NAME = "<img src=x onerror=window.pwned='name'>.html"
HOSTILE_RUN = [
    {
        "content": [
            text(HOSTILE),
            tool("write_file", path=HOSTILE_NAME, content=HOSTILE + "\n"),
            tool(
                "run_command",
                command="printf '\\033[31m<script>window.pwned=1</script>\\n<img src=x onerror=window.pwned=2>\\n'",
            ),
        ]
    },
    {"content": [text("done <iframe src=\"javascript:window.pwned='iframe'\"></iframe>")]},
]


def test_hostile_text_names_and_output_stay_inert(
    driver: WebDriver, viewer: Viewer, model_server: Any, screenshots: Path
) -> None:
    scenario = register(model_server, prefix="ui", turns=HOSTILE_RUN)
    sid = viewer.api.create(str(viewer.make_repo("hostile-repo")), scenario, task=HOSTILE)["id"]
    driver.get_log("browser")  # start the console log afresh
    open_session(driver, viewer, sid)
    wait_finished(driver)
    wait(lambda: find(driver, "change"), "the changes listed")
    assert driver.execute_script("return window.pwned") is None
    view = one(driver, "view")
    assert view.find_elements(By.CSS_SELECTOR, "script, img, iframe, a, object, embed, svg") == []
    assert [e.get_attribute("href") for e in driver.find_elements(By.CSS_SELECTOR, "[href]") if e.tag_name == "a"] == [
        one(driver, "home").get_attribute("href")
    ]
    shown = HOSTILE.replace("\x1b", "␛").replace("\u202e", "⟦U+202E⟧")
    assert texts(driver, "user-text") == [shown]
    assert texts(driver, "assistant-body")[0] == shown
    assert texts(driver, "assistant-body")[1] == "done <iframe src=\"javascript:window.pwned='iframe'\"></iframe>"
    (output,) = [t for t in texts(driver, "tool-output") if "window.pwned=1" in t]
    assert "<stdout>\n␛[31m<script>window.pwned=1</script>\n<img src=x onerror=window.pwned=2>\n</stdout>" in output
    assert HOSTILE_NAME in texts(driver, "tool-summary")
    assert texts(driver, "change-path") == [HOSTILE_NAME]
    assert any(shown in line for line in texts(driver, "diff-add"))
    for entry in driver.get_log("browser"):
        assert "Content Security Policy" not in entry["message"], entry
        assert entry["level"] != "SEVERE" or "favicon" in entry["message"], entry
    screenshot(driver, screenshots, "hostile")


def test_changes_view_apply_refused_on_conflict_then_applied_and_reverted(
    driver: WebDriver, viewer: Viewer, model_server: Any, screenshots: Path
) -> None:
    repo = viewer.make_repo("changes-repo")
    turns = [
        {
            "content": [
                tool("write_file", path="notes/new.txt", content="brand new\n"),
                tool("write_file", path="src/app.py", content="def total(items):\n    return sum(items, 0)\n"),
                tool("run_command", command="chmod 666 src/app.py"),
            ]
        },
        {"content": [text("Wrote two files.")]},
    ]
    sid = viewer.api.create(str(repo), register(model_server, prefix="ui", turns=turns))["id"]
    viewer.api.wait_for(sid, lambda r: r["status"] == "idle")
    open_session(driver, viewer, sid, "/changes")
    wait(lambda: len(find(driver, "change")) == 3 or None, "the changed paths")
    assert sorted(texts(driver, "change-path")) == ["notes/", "notes/new.txt", "src/app.py"]  # the new directory too
    assert texts(driver, "change-disposition") == ["apply"] * 3
    assert [t.strip() for t in texts(driver, "change-mode")] == ["(mode 644 → 666, applied as 644)"]
    assert one(driver, "changes-summary").text == "3 path(s), 3 to apply"
    assert "+    return sum(items, 0)\n" in texts(driver, "diff-add")
    assert "-    return sum(items)\n" in texts(driver, "diff-del")
    assert [t.startswith("@@") for t in texts(driver, "diff-hunk")] == [True, True]
    screenshot(driver, screenshots, "diff")

    original = (repo / "src" / "app.py").read_text()
    (repo / "src" / "app.py").write_text("def total(items):\n    return 42\n")  # the user changed it meanwhile
    one(driver, "apply").click()
    wait(lambda: one(driver, "conflicts").is_displayed(), "the conflicts")
    assert texts(driver, "conflict-path") == ["src/app.py"]
    assert "refused" in one(driver, "changes-message").text
    assert not (repo / "notes" / "new.txt").exists(), "a refused apply wrote something"

    assert not one(driver, "revert").is_enabled(), "revert offered before anything was applied"
    (repo / "src" / "app.py").write_text(original)  # the session's bytes again: no conflict now; the button still works
    one(driver, "apply-force").click()
    # The message itself is awaited, so a failure shows what the page said instead (a refusal, a network error).
    wait(lambda: one(driver, "changes-message").text, "the apply", until=lambda t: t.startswith("Applied 3 path(s)"))
    assert not one(driver, "conflicts").is_displayed()
    assert (repo / "notes" / "new.txt").read_text() == "brand new\n"
    assert (repo / "src" / "app.py").read_text().endswith("sum(items, 0)\n")
    assert stat.S_IMODE((repo / "src" / "app.py").stat().st_mode) == 0o644, "open to others after the apply"
    wait(lambda: find(driver, "applied-event") or None, "the applied event in the transcript")
    # What was applied stays in view, marked so; nothing is left to apply, and the apply can be reverted.
    assert sorted(texts(driver, "applied-path")) == ["notes applied", "notes/new.txt applied", "src/app.py applied"]
    wait(lambda: not one(driver, "apply").is_enabled() or None, "apply disabled with nothing left to apply")
    wait(lambda: one(driver, "revert").is_enabled() or None, "revert enabled after the apply")

    one(driver, "revert").click()
    wait(lambda: one(driver, "changes-message").text, "the revert", until=lambda t: t.startswith("Reverted"))
    assert not (repo / "notes" / "new.txt").exists()
    assert (repo / "src" / "app.py").read_text() == original
    wait(lambda: find(driver, "reverted-event") or None, "the reverted event in the transcript")
    wait(lambda: not one(driver, "revert").is_enabled() or None, "revert disabled once the apply is undone")


def test_data_routes_need_the_cookie_or_token_and_cross_site_posts_are_refused(
    viewer: Viewer, model_server: Any
) -> None:
    sid = idle_session(viewer, model_server, "routes")
    with httpx.Client(base_url=viewer.url, timeout=30) as anonymous:
        for path in (
            "/v1/sessions",
            "/v1/repos",
            f"/v1/sessions/{sid}",
            f"/v1/sessions/{sid}/events",
            f"/v1/sessions/{sid}/messages",
            f"/v1/sessions/{sid}/changes",
        ):
            assert anonymous.get(path).status_code == 401, path
        assert anonymous.post(f"/v1/sessions/{sid}/cancel").status_code == 401
        assert anonymous.get("/ui/auth").json() == {"mode": "token", "signed_in": False}
        page = anonymous.get("/ui/")
        assert page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert anonymous.post("/ui/login", json={"token": "wrong"}).status_code == 401
        anonymous.cookies.set("cubicle_session", "forged")
        assert anonymous.get("/v1/sessions").status_code == 401
    with cookie_client(viewer.url) as signed:
        assert signed.get("/v1/sessions").status_code == 200
        assert signed.get("/ui/auth").json() == {"mode": "token", "signed_in": True}
        other = f"http://127.0.0.1:{free_port()}"
        refused = signed.post(f"/v1/sessions/{sid}/cancel", headers={"Origin": other})
        assert refused.status_code == 403 and "cross-origin" in refused.json()["detail"], refused.text
        no_origin = signed.post(f"/v1/sessions/{sid}/cancel")
        assert no_origin.status_code == 403, no_origin.text
        same = signed.post(f"/v1/sessions/{sid}/cancel", headers={"Origin": viewer.url})
        assert same.status_code == 200, same.text
        assert signed.post("/ui/logout").status_code == 204
        assert signed.get("/v1/sessions").status_code == 401


@pytest.mark.parametrize("name", ["app.js", "style.css", "favicon.svg"])
def test_assets_are_served_with_their_types(viewer: Viewer, name: str) -> None:
    response = httpx.get(f"{viewer.url}/ui/assets/{name}")
    assert response.status_code == 200
    kind = {"app.js": "text/javascript", "style.css": "text/css", "favicon.svg": "image/svg+xml"}[name]
    assert response.headers["content-type"].startswith(kind)


ATTACK = """<!doctype html><meta charset="utf-8"><title>another origin</title>
<form id="f" method="post" enctype="text/plain" action="API/v1/sessions/SID/messages">
<input name='{"text": "posted by a form", "x": "' value='"}'></form>
<script>
fetch("API/v1/sessions/SID/messages", {method: "POST", credentials: "include", mode: "no-cors",
  headers: {"Content-Type": "text/plain"}, body: JSON.stringify({text: "posted by fetch"})})
  .finally(() => { document.title = "fetched"; document.getElementById("f").submit(); });
</script>"""


def test_a_page_on_another_port_cannot_post_with_the_signed_in_cookie(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    """Another port on 127.0.0.1 is the same site, so the browser sends the cookie along: the Origin check stops it."""
    sid = idle_session(viewer, model_server, "cross-site")
    before = viewer.api.events(sid)
    sign_in(driver, viewer)
    with another_port(ATTACK.replace("API", viewer.url).replace("SID", sid).encode()) as (url, _):
        driver.get(url)
        wait(lambda: "/v1/sessions/" in driver.current_url or None, "the form post to land on the API")
        answer = driver.find_element(By.TAG_NAME, "body").text
        # Refused: the cookie came along (same site), but not its page key, which only the viewer's origin holds.
        assert "sign-in cookie with its key) is required" in answer, answer
    after = viewer.api.events(sid)
    assert [e["seq"] for e in after] == [e["seq"] for e in before]  # no follow-up started, nothing recorded
    assert viewer.api.get(sid)["status"] == "idle"


def test_output_not_kept_says_so(driver: WebDriver, viewer: Viewer, model_server: Any) -> None:
    """Past the session's cap of stored events (1 MiB here), a result shows its size and that it was not stored."""
    noisy = tool("run_command", command="head -c 600000 /dev/zero | tr '\\0' a")
    scenario = register(model_server, prefix="ui-cap", turns=[{"content": [noisy, noisy]}, {"content": [text("done")]}])
    sid = viewer.api.create(str(viewer.make_repo("noisy-repo")), scenario)["id"]
    open_session(driver, viewer, sid)
    wait_finished(driver)
    kept, dropped = texts(driver, "tool-output")
    assert kept.count("a") >= 600_000
    size = len(kept)
    assert (
        dropped
        == f"({size} characters of output were not stored: this session's stored events reached the server's cap)"
    )
    summaries = texts(driver, "tool-result-summary")
    assert all(f"{size} chars" in summary for summary in summaries), summaries


def test_a_layer_past_its_names_limit_is_listed_up_to_it_and_says_so(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    scenario = register(
        model_server,
        prefix="names",
        turns=[
            {"content": [tool("run_command", command="mkdir many && cd many && seq 1100 | xargs touch")]},
            {"content": [text("done")]},
        ],
    )
    sid = viewer.api.create(str(viewer.make_repo("names")), scenario, limits={"names": 1024})["id"]
    open_session(driver, viewer, sid)
    wait_finished(driver, "too_many_entries")  # past two error events: the page's stream goes on after each
    summary = wait(
        lambda: one(driver, "changes-summary"),
        "the changes summary",
        until=lambda e: e.get_attribute("data-truncated-at") == "1024",
    )
    assert "truncated at 1,024 entries" in summary.text and "never applied" in summary.text
    assert 0 < len(find(driver, "change")) <= 1024


def test_a_listing_past_the_servers_bound_says_how_many_more_apply_writes(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    scenario = register(
        model_server,
        prefix="unlisted",
        turns=[
            {"content": [tool("run_command", command=f"seq {LISTING + 20} | xargs touch")]},
            {"content": [text("done")]},
        ],
    )
    sid = viewer.api.create(str(viewer.make_repo("unlisted")), scenario)["id"]
    open_session(driver, viewer, sid)
    wait_finished(driver)
    summary = wait(
        lambda: one(driver, "changes-summary"),
        "the changes summary",
        until=lambda e: bool(e.get_attribute("data-unlisted")),
    )
    assert summary.get_attribute("data-unlisted") == "20" and "20 more not listed" in summary.text
    assert "20 of which apply writes unseen" in summary.text
    assert len(find(driver, "change")) == LISTING


LIVE_COMMAND = (
    "printf 'first \\033[31m<img src=x onerror=window.pwned=3> \\342\\200\\256\\n'; sleep 2; "
    "for i in 1 2 3; do echo more $i; sleep 0.5; done"
)


def test_a_commands_output_shows_live_inert_then_gives_way_to_its_result(
    driver: WebDriver, viewer: Viewer, model_server: Any, screenshots: Path
) -> None:
    turns = [{"content": [tool("run_command", command=LIVE_COMMAND)]}, {"content": [text("done")]}]
    sid = viewer.api.create(str(viewer.make_repo("live-repo")), register(model_server, prefix="live", turns=turns))[
        "id"
    ]
    open_session(driver, viewer, sid)
    first = "first ␛[31m<img src=x onerror=window.pwned=3> ⟦U+202E⟧\n"
    wait(lambda: texts(driver, "live-output") == [first] or None, "the first line live, before the command ends")
    assert find(driver, "tool-pending"), "the command is still running"
    assert one(driver, "view").find_elements(By.CSS_SELECTOR, "img, script") == []
    screenshot(driver, screenshots, "live-output")
    wait_finished(driver)
    assert find(driver, "live-output") == [] and driver.execute_script("return window.pwned") is None
    (result,) = find(driver, "tool-result")
    assert result.get_attribute("open") is not None, "the result replaced the live pane open"
    assert "more 3" in one(result, "tool-output").text


def test_the_viewer_shows_no_two_texts_alike(driver: WebDriver, viewer: Viewer) -> None:
    """ESC and a literal ␛, the C1 control U+009B and a literal ⟦U+009B⟧ show unlike (as the terminal's spellings
    do); a byte the review printed as ``\\x9b`` stays that text."""
    load(driver, viewer.url + "/")
    texts = ["a\x1b", "a\u241b", "n\u009b.txt", "n\u27e6U+009B\u27e7.txt", "n\\x9b.txt"]
    shown = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "import('/ui/assets/dom.js').then((dom) => done(arguments[0].map(dom.visible)), (e) => done(String(e)));",
        texts,
    )
    assert shown == ["a␛", "a⟦U+241B⟧", "n⟦U+009B⟧.txt", "n⟦U+27E6⟧U+009B⟧.txt", "n\\x9b.txt"]
