"""Red-team findings against the viewer, in a real browser against a real `cubicle serve` (see conftest).

Each test asserts the property that should hold; a failing test is an open finding.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import httpx
from selenium.webdriver.remote.webdriver import WebDriver

from controller.wire import inert
from tests.agent_harness import register, text, tool
from tests.browser.conftest import Viewer, another_port, idle_session
from tests.browser.test_viewer import find, open_session, sign_in, texts, wait, wait_finished


def test_finding_a_server_on_another_port_receives_a_working_sign_in_cookie(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    """FINDING (high): cookies are not isolated by port. Once signed in, the browser sends the
    HttpOnly, SameSite=Strict sign-in cookie to every server on 127.0.0.1 it visits (a dev server,
    a container's published port, any local process listening there). That server reads it from
    its request headers, and since the cookie alone authenticates /v1 and the Origin check only
    looks at a header a non-browser client writes itself, it can read every session and drive
    every write route (apply, revert, discard, rewind, follow-ups, new sessions)."""
    sid = idle_session(viewer, model_server, "cookie-port")
    sign_in(driver, viewer)
    with another_port(b"<!doctype html><title>my dev server</title>hello") as (url, received):
        driver.get(url)
        wait(lambda: received or None, "the dev server's page to be requested")

    cookie = received[0]
    with httpx.Client(base_url=viewer.url, timeout=30) as attacker:  # the dev server's process, not a browser
        read = attacker.get("/v1/sessions", headers={"Cookie": cookie})
        write = attacker.post(f"/v1/sessions/{sid}/cancel", headers={"Cookie": cookie, "Origin": viewer.url})
    assert (read.status_code, write.status_code) == (401, 401), (
        f"a server on another port got {cookie[:40]!r}…, read /v1/sessions ({read.status_code}) "
        f"and posted a write ({write.status_code})"
    )


# Characters controller/cli/terminal.py shows escaped, one or two of each kind: line and paragraph separators,
# C1 controls, the Arabic letter mark, zero-width and other format characters, blank-looking letters, tags.
SPOOFERS = "\u2028\u2029\u0085\u009b\u061c\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e\u3164\u2800\u115f\U000e0041"


def test_finding_the_page_shows_invisible_and_line_breaking_characters_raw(driver: WebDriver, viewer: Viewer) -> None:
    """FINDING (low): dom.js `visible()` makes C0 controls, DEL and bidi overrides/isolates visible,
    but not what the terminal (controller/cli/terminal.py) also escapes: U+2028/U+2029 and NEL (line
    breaks inside one "line" of a tool summary or a path), zero-width and format characters (a file
    `src/\u200bapp.py` reads exactly as `src/app.py` in the changes list: a new file passes for an edit
    of an existing one), U+061C (a bidi mark, while U+200E/U+200F are escaped), blank-looking letters
    and tag characters. Everything the terminal hides should be made visible on the page too."""
    assert all(inert.hidden(c) for c in SPOOFERS), [c for c in SPOOFERS if not inert.hidden(c)]
    sign_in(driver, viewer)
    script = """
      const done = arguments[arguments.length - 1];
      import("/ui/assets/dom.js").then((dom) => done(
        Array.from(arguments[0]).filter((c) => dom.visible(`a${c}b`) === `a${c}b`)));
    """
    raw: list[str] = driver.execute_async_script(script, SPOOFERS)
    assert raw == [], "shown raw: " + ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in raw)


def test_the_page_and_the_terminal_spell_out_exactly_the_same_characters(driver: WebDriver, viewer: Viewer) -> None:
    """One table (invisible.json) drives both; walked over every code point in the browser, the page's
    ``visible()`` changes exactly the characters ``controller.cli.terminal`` escapes, and the page's own look-alikes
    (the Control Pictures and the bracket it draws hidden characters with, spelled out when written as themselves,
    so that no two texts show alike on the page)."""
    sign_in(driver, viewer)
    script = """
      const done = arguments[arguments.length - 1];
      import("/ui/assets/dom.js").then((dom) => {
        const ranges = [];
        let start = -1;
        for (let code = 0; code <= 0x10ffff; code++) {
          const c = String.fromCodePoint(code);
          const changed = dom.visible(c) !== c;
          if (changed && start < 0) start = code;
          if (!changed && start >= 0) { ranges.push([start, code - 1]); start = -1; }
        }
        if (start >= 0) ranges.push([start, 0x10ffff]);
        done(ranges);
      }, (err) => done(String(err)));
    """
    driver.set_script_timeout(60)
    page: list[list[int]] = driver.execute_async_script(script)
    terminal_ranges: list[list[int]] = []
    look_alikes = {*range(0x2400, 0x2422), 0x27E6}
    for code in range(0x110000):
        if inert.hidden(chr(code)) or code in look_alikes:
            if terminal_ranges and terminal_ranges[-1][1] == code - 1:
                terminal_ranges[-1][1] = code
            else:
                terminal_ranges.append([code, code])
    assert page == terminal_ranges


def test_finding_added_lines_starting_with_plus_plus_are_uncounted_and_styled_as_file_headers(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    """FINDING (low): changes.js counts a diff line as added when it starts with "+" but not "+++",
    and styles "+++"/"---" as a file header anywhere in the diff. A file whose lines start with "++"
    (or "--" for removed ones) is written in full while the page counts +0 and draws those lines as
    headers. Only the first two lines of the diff are headers; the counts should match the hunks."""
    content = "".join(f"++ b/harmless-{i}.txt\n" for i in range(5))
    scenario = register(
        model_server,
        prefix="rt",
        turns=[{"content": [tool("write_file", path="payload.sh", content=content)]}, {"content": [text("done")]}],
    )
    sid = viewer.api.create(str(viewer.make_repo("plusplus")), scenario)["id"]
    open_session(driver, viewer, sid)
    wait_finished(driver)
    wait(lambda: find(driver, "change"), "the changes listed")
    counts = driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-testid=change] .counts .plus'), (e) => e.textContent)"
    )
    headers = texts(driver, "diff-file")
    assert counts == ["+5"], f"page counts {counts} for a file of 5 added lines"
    assert len(headers) == 2, f"{len(headers)} lines styled as file headers: {headers}"


def test_finding_the_changes_response_grows_without_bound_with_the_number_of_files(
    viewer: Viewer, model_server: Any
) -> None:
    """FINDING (medium, availability): a diff is capped per file (64 Ki characters) but nothing caps the
    number of files or the total, and control characters are valid "text" that JSON spells as six
    bytes (\\u0001). The page fetches GET .../changes?diff=true as soon as a session is opened and
    after every changes event, so a hostile session that writes N files of 60 KB of \\x01 makes the
    controller build (and the browser parse and lay out) a response of about 6 x 60 KB x N: 80 files
    (under 5 MB on disk) are a response of ~30 MB, and the layer has no disk quota."""
    files, size = 80, 60_000
    command = (
        f"head -c {size} /dev/zero | tr '\\0' '\\1' > f0 && "
        f"for i in $(seq 1 {files - 1}); do cp f0 f$i; done && du -sk ."
    )
    scenario = register(
        model_server,
        prefix="rt",
        turns=[{"content": [tool("run_command", command=command)]}, {"content": [text("done")]}],
    )
    sid = viewer.api.create(str(viewer.make_repo("many-diffs", {"README.md": "hi\n"})), scenario)["id"]
    viewer.api.wait_for(sid, lambda r: r["status"] == "idle", timeout=120)
    response = viewer.api.http.get(f"/v1/sessions/{sid}/changes", params={"diff": "true"}, timeout=120)
    assert response.status_code == 200
    on_disk = files * size
    assert len(response.content) <= 8 * 1024 * 1024, (
        f"{len(response.content) / 1e6:.1f} MB of changes for {on_disk / 1e6:.1f} MB written by the sandbox"
    )
