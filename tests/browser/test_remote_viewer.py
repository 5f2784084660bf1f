"""A session on a git remote in the viewer (see conftest): its row and page show the URL and the commit, its
changes offer the patch for download in place of apply, apply selected and revert, which the server refuses there,
and the downloaded patch is the API's."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from bench import gitserver
from controller.agent.scripted import free_port
from controller.client import Client
from controller.wire.bodies import RemoteRepo
from tests.agent_harness import register, text, tool
from tests.browser.conftest import TOKEN, Viewer
from tests.browser.test_viewer import find, one, open_session, sign_in, wait
from tests.integration.api_helpers import Api, serve_env, serve_subprocess
from tests.integration.conftest import GIT_PASSWORD, INFLECTION
from tests.sandbox_defaults import TEST_INSTANCE

NAME = "plain"


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


def test_a_remote_session_shows_its_url_and_offers_its_patch_instead_of_apply(
    driver: WebDriver, remote_viewer: tuple[Viewer, gitserver.GitServer], model_server: Any
) -> None:
    viewer, server = remote_viewer
    model = register(
        model_server,
        prefix="remote-view",
        turns=[{"content": [tool("write_file", path="NOTES.md", content="n\n")]}, {"content": [text("done")]}],
    )
    with Client(viewer.url, TOKEN) as client:
        record = client.create(RemoteRepo(url=server.url(NAME)), "note", model=model)
        assert record.source is not None
        client.wait(record.id)
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
        assert not one(driver, "apply").is_displayed() and not one(driver, "apply-selected").is_displayed()
        assert not one(driver, "revert").is_displayed() and not find(driver, "change-select")
        one(driver, "patch").click()
        saved = downloads / f"{record.id}.patch"
        # Chromium writes a download under a .crdownload name and renames it into place once it is whole
        wait(lambda: (saved.is_file() and not list(downloads.glob("*.crdownload"))) or None, "the downloaded patch")
        assert saved.read_bytes() == expected and b"NOTES.md" in expected
    finally:
        shutil.rmtree(downloads, ignore_errors=True)
