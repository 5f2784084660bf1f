"""The viewer's session page holding 2,002 events, rendered in headless Chromium (target: ≤ 1 s).

A finished session's record and its events (per step: two text deltas, a tool call, its
result with 40 lines of output, a usage event; the mix a long run leaves) are written to a
fresh data directory's database, and `cubicle serve` runs on it (loopback, no token; the
session is over, so no model and no container is involved). Headless Chromium (Debian's, via
Selenium and chromedriver) opens the session's page; the page itself reports, on the first
animation frame where every tool call is shown, the time since navigation began. The baseline,
same browser and same run: a bare EventSource reading the same events on a page of the same
origin, rendering nothing — what is left is the page's own work.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.measure import Report, ms, plain_main, smoke
from bench.stored import store_session
from controller.wire.events import (
    Event,
    SessionFinished,
    SessionStarted,
    TextDelta,
    ToolCall,
    ToolResult,
    Usage,
    UsageEvent,
)

STEPS = 400
EVENTS = 5 * STEPS + 2
TARGET_S = 1.0
TOOL_SELECTOR = '[data-testid="tool-call"]'
"""What the page shows once per tool call..."""
PENDING_SELECTOR = '[data-testid="tool-pending"]'
"""...and in it until the call's result is shown."""
CHROMIUM = os.environ.get("CUBICLE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CUBICLE_CHROMEDRIVER", "/usr/bin/chromedriver")

SHOWN = """
const [selector, pending, want, done] = [arguments[0], arguments[1], arguments[2], arguments[arguments.length - 1]];
function check() {
  if (document.querySelectorAll(selector).length >= want && !document.querySelector(pending)) done(performance.now());
  else requestAnimationFrame(check);
}
check();
"""
"""Milliseconds from navigation to the first frame showing ``want`` tool calls, none of them still waiting for its result."""

STREAM_ONLY = """
const [url, done] = [arguments[0], arguments[arguments.length - 1]];
const start = performance.now();
let count = 0;
const source = new EventSource(url);
source.onmessage = () => {};
for (const kind of ["session_started", "text", "tool_call", "tool_result", "usage", "session_finished"]) {
  source.addEventListener(kind, () => {
    count += 1;
    if (kind === "session_finished") { source.close(); done([performance.now() - start, count]); }
  });
}
"""
"""The baseline: the same events through a bare EventSource, counted and dropped."""


def session_events(session_id: str) -> list[Event]:
    """A finished session of ``STEPS`` steps: 5 events a step, plus its start and its finish."""
    events: list[Event] = [SessionStarted(session_id=session_id, repo="/repo", task="Fix the flaky tests", model="m")]
    total = Usage()
    output = "\n".join(f"tests/test_module_{n:02d}.py::test_case PASSED [{n * 2:3d}%]" for n in range(40))
    for step in range(1, STEPS + 1):
        call_id = f"toolu_{step:05d}"
        total = Usage(input_tokens=total.input_tokens + 900, output_tokens=total.output_tokens + 60)
        events += [
            TextDelta(session_id=session_id, text=f"Step {step}: let me run the tests "),
            TextDelta(session_id=session_id, text="again to see what changed.\n"),
            ToolCall(session_id=session_id, id=call_id, name="run_command", input={"command": "python -m pytest -q"}),
            ToolResult(
                session_id=session_id,
                id=call_id,
                name="run_command",
                is_error=False,
                output=output,
                model_chars=len(output),
                duration_s=0.4,
                exit_code=0,
            ),
            UsageEvent(session_id=session_id, step=step, turn=total, session=total),
        ]
    events.append(SessionFinished(session_id=session_id, reason="end_turn", steps=STEPS, usage=total))
    return events


def write_session(data_dir: Path, repo: Path) -> str:
    session_id = "s_bench" + secrets.token_hex(4)
    return store_session(data_dir, session_id, repo, "Fix the flaky tests", session_events(session_id), STEPS)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serving(data_dir: Path, roots: Path) -> Iterator[str]:
    """`cubicle serve` on loopback over ``data_dir``; its base URL until the block ends."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUBICLE_", "ANTHROPIC_"))}
    env |= {"CUBICLE_DATA_DIR": str(data_dir), "CUBICLE_REPO_ROOTS": str(roots), "ANTHROPIC_API_KEY": "unused"}
    command = [sys.executable, "-m", "controller", "serve", "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"cubicle serve did not start: {server.stderr.read() if server.stderr else b''!r}")
            time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


def browser() -> Any:
    """Headless Debian Chromium through chromedriver (``--no-sandbox``: benchmarks run as root in CI)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_script_timeout(60)
    return driver


def table(report: Report, quick: bool) -> None:
    """Render the 2,000-event page a few times, and read its events with a bare EventSource as many."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        raise RuntimeError(
            f"the page benchmark needs {CHROMIUM} and {CHROMEDRIVER}: apt-get install chromium chromium-driver"
        )
    runs = 1 if smoke() else 3 if quick else 7
    with tempfile.TemporaryDirectory(prefix="cubicle-bench-page-") as tmp:
        roots = Path(tmp) / "roots"
        (roots / "repo" / ".git").mkdir(parents=True)
        session_id = write_session(Path(tmp) / "data", roots / "repo")
        with serving(Path(tmp) / "data", roots) as url:
            driver = browser()
            try:
                rendered, streamed, counted = [], [], 0
                for _ in range(runs):
                    driver.get(f"{url}/ui/#/sessions/{session_id}")
                    rendered.append(driver.execute_async_script(SHOWN, TOOL_SELECTOR, PENDING_SELECTOR, STEPS) / 1000)
                    driver.get(f"{url}/ui/assets/style.css")  # same origin, no script of the page's
                    elapsed, counted = driver.execute_async_script(STREAM_ONLY, f"/v1/sessions/{session_id}/events")
                    streamed.append(elapsed / 1000)
            finally:
                driver.quit()
    page, bare = statistics.median(rendered), statistics.median(streamed)
    met = report.check(page <= TARGET_S, f"the session page with {EVENTS} events rendered in {ms(page)} > {TARGET_S} s")
    report.extra.append(
        (
            f"Viewer: a session page holding {EVENTS} events ({STEPS} tool calls) in headless Chromium, {runs} loads "
            f"(target: ≤ {TARGET_S:.0f} s)",
            ["", "p50", "max", "met"],
            [
                [
                    "page shown: navigation to every tool call on screen",
                    ms(page),
                    ms(max(rendered)),
                    "yes" if met else "**no**",
                ],
                [
                    f"baseline: the same {counted} events through a bare EventSource, nothing drawn",
                    ms(bare),
                    ms(max(streamed)),
                    "",
                ],
            ],
        )
    )


def main() -> int:
    return plain_main("page", __doc__, "3 loads instead of 7", table)


if __name__ == "__main__":
    sys.exit(main())
