"""The browser viewer's tests: one real `cubicle serve` (token mode, scripted model, real Docker) and one
headless Chromium driven by Selenium, shared by the whole module so the file stays fast."""

from __future__ import annotations

import http.server
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from controller.agent.scripted import free_port
from tests.agent_harness import REPO_FILES, register, text
from tests.integration.api_helpers import Api, serve_env, serve_subprocess
from tests.integration.cli_helpers import cubicle
from tests.sandbox_defaults import AGENT_UID, TEST_INSTANCE

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "viewer-" + secrets.token_urlsafe(24)
LISTING = 200
"""The viewer's server lists at most this many changes (``listing_entries``): more than any other test makes."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/browser" in str(item.path):
            item.add_marker(pytest.mark.integration)


@dataclass
class Viewer:
    """The server under test: its URL, a bearer-token client for checking what the page shows, its repo root."""

    url: str
    root: Path
    api: Api
    log: Path
    """Everything the server printed (uvicorn's access log included): shown with a failing test's report."""
    repos: list[Path] = field(default_factory=list)

    def make_repo(self, name: str, files: dict[str, str] | None = None) -> Path:
        repo = self.root / name
        (repo / ".git").mkdir(parents=True)
        (repo / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
        (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        for rel, content in (files or REPO_FILES).items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(content)
        if os.geteuid() == 0:
            for path in [repo, *repo.rglob("*")]:
                os.lchown(path, AGENT_UID, AGENT_UID)
        return repo


@pytest.fixture(scope="module")
def viewer(model_server: Any, docker_client: Any) -> Iterator[Viewer]:
    root = Path(tempfile.mkdtemp(prefix="cubicle-viewer-"))
    os.chmod(root, 0o755)
    port = free_port()
    env = serve_env(model_server.url, TOKEN, root, TEST_INSTANCE) | {
        "CUBICLE_LIMITS__MEMORY_MB": "512",
        "CUBICLE_LIMITS__PIDS": "256",
        "CUBICLE_LIMITS__TMPFS_MB": "64",
        "CUBICLE_SSE_HEARTBEAT_S": "1",
        "CUBICLE_SESSION_EVENTS_MB": "1",  # small enough for test_output_not_kept to cross it with two commands
        "CUBICLE_LISTING_ENTRIES": str(LISTING),
    }
    log = Path(tempfile.mkstemp(prefix="cubicle-viewer-serve-", suffix=".log")[1])
    process = serve_subprocess(env, port, log)
    url = f"http://127.0.0.1:{port}"
    api = Api(url, TOKEN)
    try:
        yield Viewer(url=url, root=root, api=api, log=log)
    finally:
        api.http.close()
        process.terminate()
        try:
            process.wait(timeout=60)
        except Exception:  # noqa: BLE001 - whatever went wrong, it must not outlive the module
            process.kill()
            process.wait()
        # What a killed server left (its layers' filesystems still mounted) is gc's to clean, as after a crash;
        # the data directory goes next, so no later controller would.
        cubicle("gc", env=env)
        shutil.rmtree(root, ignore_errors=True)
        log.unlink(missing_ok=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing viewer test's report shows the end of the server's log and the browser's console, the two
    places that say whether the page or the server was stuck."""
    report: Any = yield
    if report.failed and call.when == "call":
        funcargs = getattr(item, "funcargs", {})
        viewer, driver = funcargs.get("viewer"), funcargs.get("driver")
        if isinstance(viewer, Viewer) and viewer.log.exists():
            lines = viewer.log.read_text(errors="replace").splitlines()[-150:]
            report.sections.append(("cubicle serve: the end of its log", "\n".join(lines)))
        if driver is not None:
            try:
                console = [f"{entry['level']} {entry['message']}" for entry in driver.get_log("browser")]
                report.sections.append(("chromium: console", "\n".join(console[-100:])))
                report.sections.append(("chromium: page", f"{driver.current_url}\n{driver.page_source[:4000]}"))
            except Exception as error:  # noqa: BLE001 - a report must not fail for want of its extras
                report.sections.append(("chromium", f"could not be asked: {error!r}"))
    return report


def _browser_paths() -> tuple[str, str] | None:
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    return (binary, driver) if binary and driver else None


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    """Headless Chromium. Missing browser: a failure on CI (the `CI` variable is set), a skip elsewhere."""
    found = _browser_paths()
    if found is None:
        message = "chromium and chromedriver are needed (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = found
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    options.add_argument("--headless=new")
    # Chromium refuses to start its own sandbox as root; CI runs the suite as root on a throwaway machine,
    # so the browser's sandbox is off there. Never do this for a browser that visits untrusted sites.
    if os.geteuid() == 0:
        options.add_argument("--no-sandbox")
    options.add_argument("--disable-dev-shm-usage")
    options.add_argument("--window-size=1280,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(options=options, service=Service(driver_path))
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()


@pytest.fixture(scope="module")
def screenshots() -> Path:
    folder = Path(os.environ.get("CUBICLE_SCREENSHOTS") or ROOT / "build" / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def cookie_client(url: str) -> Iterator[httpx.Client]:
    """A client signed in the way the page is: POST /ui/login, then the cookie and the page key it answered."""
    with httpx.Client(base_url=url, timeout=30) as client:
        response = client.post("/ui/login", json={"token": TOKEN})
        assert response.status_code == 200, response.text
        client.headers["X-Cubicle-Key"] = response.json()["key"]
        yield client


def idle_session(viewer: Viewer, model_server: Any, name: str) -> str:
    """A session of one turn that only says "done", on a repository of its own, once its turn has ended."""
    scenario = register(model_server, prefix=name, turns=[{"content": [text("done")]}])
    sid = viewer.api.create(str(viewer.make_repo(name)), scenario)["id"]
    viewer.api.wait_for(sid, lambda r: r["status"] == "idle")
    return str(sid)


@contextmanager
def another_port(page: bytes) -> Iterator[tuple[str, list[str]]]:
    """A server on another port of 127.0.0.1 (the same site as the viewer, another origin) answering ``page``
    to every GET; its URL, and the Cookie header of each request it got."""
    cookies: list[str] = []

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            cookies.append(self.headers.get("Cookie", ""))
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", cookies
    finally:
        server.shutdown()
        server.server_close()
