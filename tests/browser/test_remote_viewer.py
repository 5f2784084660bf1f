"""A session on a git remote in the viewer (see conftest): its row and page show the URL and the commit, its
changes offer the patch for download and a push in place of apply, apply selected and revert, which the server
refuses there; the downloaded patch is the API's, and the pushed branch is cloned back from the git server."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from bench import gitserver
from controller.agent.scripted import free_port
from controller.client import Client
from controller.wire.bodies import RemoteRepo
from tests.agent_harness import register, text, tool
from tests.browser.conftest import TOKEN, Viewer
from tests.browser.test_viewer import find, one, open_session, screenshot, sign_in, wait
from tests.integration.api_helpers import Api, serve_env, serve_subprocess
from tests.integration.conftest import GIT_PASSWORD, INFLECTION
from tests.sandbox_defaults import TEST_INSTANCE

NAME = "plain"
WORKFLOW = ".github/workflows/ci.yml"


@pytest.fixture
def remote_viewer(model_server: Any) -> Iterator[tuple[Viewer, gitserver.GitServer]]:
    """A `cubicle serve` that fetches from the suite's git server, and that server holding the project (without
    its devcontainer, whose Dockerfile a server builds only when allowed)."""
    root = Path(tempfile.mkdtemp(prefix="cubicle-remote-viewer-"))
    with gitserver.serving(GIT_PASSWORD) as server:
        plain = root / "source"
        shutil.copytree(INFLECTION, plain, ignore=shutil.ignore_patterns(".devcontainer"))
        server.create(NAME, source=plain)
        (root / "data").mkdir()
        credentials = root / "data" / "credentials"
        credentials.write_text(f"http://tester:{GIT_PASSWORD}@127.0.0.1:{server.port}\n")
        env = serve_env(model_server.url, TOKEN, root, TEST_INSTANCE) | {
            "CUBICLE_GIT_REMOTES": f'["http://127.0.0.1:{server.port}/private/*"]',
            "CUBICLE_GIT_CREDENTIALS": str(credentials),
        }
        port = free_port()
        log = root / "serve.log"
        process = serve_subprocess(env, port, log)
        url = f"http://127.0.0.1:{port}"
        try:
            yield Viewer(url=url, root=root, api=Api(url, TOKEN), log=log), server
        finally:
            process.terminate()
            process.wait(timeout=60)
            shutil.rmtree(root, ignore_errors=True)


def test_a_remote_session_shows_its_url_and_offers_its_patch_and_a_push_instead_of_apply(
    driver: WebDriver, remote_viewer: tuple[Viewer, gitserver.GitServer], model_server: Any, screenshots: Path
) -> None:
    viewer, server = remote_viewer
    model = register(
        model_server,
        prefix="remote-view",
        turns=[
            {"content": [tool("write_file", path="NOTES.md", content="n\n")]},
            {"content": [tool("write_file", path=WORKFLOW, content="on: push  # <img src=x onerror=alert(1)>\n")]},
            {"content": [text("done")]},
        ],
    )
    with Client(viewer.url, TOKEN) as client:
        record = client.create(RemoteRepo(url=server.url(NAME)), "note", model=model)
        record = client.wait(record.id)  # made at once; its commit is known once the fetch is done
        assert record.source is not None
        expected = client.patch(record.id)
    commit = record.source.commit
    sign_in(driver, viewer)
    row = wait(
        lambda: [r for r in find(driver, "session-row") if r.get_attribute("data-session-id") == record.id], "the row"
    )
    assert one(row[0], "session-repo").text == f"private/{NAME}.git @ {commit[:12]}"

    downloads = Path(tempfile.mkdtemp(prefix="cubicle-downloads-"))
    try:
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        open_session(driver, viewer, record.id, "/changes")
        assert one(driver, "session-repo").text == f"{server.url(NAME)} @ {commit[:12]}"
        wait(lambda: one(driver, "patch").is_displayed() or None, "the patch button")
        wait(lambda: one(driver, "changes-summary").text.endswith("to patch and push") or None, "the summary")
        assert not one(driver, "apply").is_displayed() and not one(driver, "apply-selected").is_displayed()
        assert not one(driver, "revert").is_displayed() and not find(driver, "change-select")
        one(driver, "patch").click()
        saved = downloads / f"{record.id}.patch"
        # Chromium writes a download under a .crdownload name and renames it into place once it is whole
        wait(lambda: (saved.is_file() and not list(downloads.glob("*.crdownload"))) or None, "the downloaded patch")
        assert saved.read_bytes() == expected and b"NOTES.md" in expected
    finally:
        shutil.rmtree(downloads, ignore_errors=True)
    _push_from_the_page(driver, viewer, server, record.id, commit, screenshots)
    screenshot(driver, screenshots, "remote-push")


def _outcome(driver: WebDriver, state: str) -> WebElement:
    """The push's outcome once it is ``state`` (done, error)."""
    return wait(
        lambda: ((box := one(driver, "push-outcome")).get_attribute("data-state") == state and box) or None,
        f"the push's outcome ({state})",
    )


def _push(driver: WebDriver, branch: str | None = None, message: str = "", lease: bool = False) -> None:
    if branch is not None:
        one(driver, "push-branch").clear()
        one(driver, "push-branch").send_keys(branch)
    one(driver, "push-message").clear()
    one(driver, "push-message").send_keys(message)
    if one(driver, "push-lease").is_selected() != lease:
        one(driver, "push-lease").click()
    wait(lambda: one(driver, "push").is_enabled() or None, "the push button")
    one(driver, "push").click()


def _push_from_the_page(
    driver: WebDriver, viewer: Viewer, server: gitserver.GitServer, session_id: str, commit: str, screenshots: Path
) -> None:
    """The push form: prefilled with the server's prefix, each refusal shown by its status, a held-back path
    pushed only when ticked, and the branch as the git server then holds it."""
    branch = wait(lambda: one(driver, "push-branch").get_attribute("value"), "the prefilled branch")
    assert branch == f"cubicle/{session_id}"
    assert not find(driver, "change-select")  # nothing is applied here, but the held-back workflow may be pushed
    (tick,) = find(driver, "change-force")  # the workflow file's, not its directory's (no git entry)

    _push(driver, message="Notes from the viewer")
    done = _outcome(driver, "done")
    assert one(done, "push-result-branch").text == branch
    first = one(done, "push-result-commit").text
    assert len(first) == 40 and "(created)" in one(done, "push-done").text
    assert any(WORKFLOW in item.text and "held back" in item.text for item in find(done, "push-left"))
    cloned = _clone(server, branch, viewer.root / "first")
    assert (cloned / "NOTES.md").read_text() == "n\n" and not (cloned / WORKFLOW).exists()
    assert _git(cloned, "log", "-1", "--format=%P %s") == f"{commit} Notes from the viewer"

    _push(driver, message="Again")  # another commit, to a branch that exists, without the lease
    refused = _outcome(driver, "error")
    assert refused.get_attribute("data-status") == "409" and "409" in one(refused, "push-error").text
    assert branch in one(refused, "push-error-detail").text
    screenshot(driver, screenshots, "remote-push-refused")

    _push(driver, branch="main")
    refused = _outcome(driver, "error")
    assert refused.get_attribute("data-status") == "422" and "cubicle/" in one(refused, "push-error-detail").text

    credentials = viewer.root / "data" / "credentials"
    right = credentials.read_text()
    credentials.write_text(right.replace(GIT_PASSWORD, "not-the-password"))
    try:
        _push(driver, branch=branch, lease=True)
        refused = _outcome(driver, "error")
        assert refused.get_attribute("data-status") == "424" and "credentials" in one(refused, "push-error").text
    finally:
        credentials.write_text(right)

    tick.click()
    wait(lambda: "1 held-back path" in one(driver, "push-forced").text or None, "the ticked path counted")
    _push(driver, message="With the workflow", lease=True)  # the lease names the page's last push there
    assert one(driver, "push-expected").text == f"only if it still names {first[:12]}, this page's last push"
    done = _outcome(driver, "done")
    assert "(replaced)" in one(done, "push-done").text and one(done, "push-result-commit").text != first
    assert one(driver, "view").find_elements(By.CSS_SELECTOR, "img, script, iframe") == []  # its text stayed text
    cloned = _clone(server, branch, viewer.root / "second")
    assert (cloned / WORKFLOW).read_text() == "on: push  # <img src=x onerror=alert(1)>\n"
    assert _git(cloned, "rev-parse", "HEAD") == one(done, "push-result-commit").text


def _clone(server: gitserver.GitServer, branch: str, where: Path) -> Path:
    url = server.url(NAME).replace("http://", f"http://tester:{GIT_PASSWORD}@")
    env = gitserver.plain_git_env(where.parent)
    subprocess.run(["git", "clone", "-q", "--branch", branch, url, str(where)], check=True, timeout=120, env=env)
    return where


def _git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip()
