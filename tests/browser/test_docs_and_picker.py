"""Two conveniences of the viewer's server, in a real browser (see conftest): the API's docs open to a signed-in
browser, whose "Try it out" passes the viewer's own checks (page key, Origin), and the new-session form does
not offer Cubicle's own checkout first."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select

from controller.agent.scripted import free_port
from controller.workspace import repos
from tests.browser.conftest import TOKEN, Viewer, idle_session
from tests.browser.test_viewer import UI_WAIT, find, load, one, sign_in, wait
from tests.integration.api_helpers import serve_env, serve_subprocess
from tests.sandbox_defaults import TEST_INSTANCE

CANCEL = '[id="operations-default-cancel_session_v1_sessions__session_id__cancel_post"]'
FETCH = """
  const done = arguments[arguments.length - 1];
  fetch(arguments[0], {method: "POST", credentials: "same-origin", headers: arguments[1]})
    .then((r) => done(r.status), (e) => done(String(e)));
"""


def test_a_signed_in_browser_uses_the_docs_and_try_it_out_with_its_page_key(
    driver: WebDriver, viewer: Viewer, model_server: Any
) -> None:
    sid = idle_session(viewer, model_server, "docs")
    sign_in(driver, viewer)
    driver.get_log("browser")
    operation = load(
        driver,
        f"{viewer.url}/docs",
        ready=lambda: driver.find_elements(By.CSS_SELECTOR, CANCEL),
        what="the schema read with the page key",
        gave_up=lambda: driver.find_elements(By.CSS_SELECTOR, ".swagger-ui .loading-container .errors-wrapper"),
        timeout=UI_WAIT,
    )[0]
    operation.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    wait(lambda: operation.find_elements(By.CSS_SELECTOR, ".try-out__btn"), "Try it out")[0].click()
    operation.find_element(By.CSS_SELECTOR, "input[placeholder='session_id']").send_keys(sid)
    operation.find_element(By.CSS_SELECTOR, ".execute").click()
    status = wait(
        lambda: operation.find_elements(By.CSS_SELECTOR, ".live-responses-table .response .response-col_status"),
        "the answer",
    )[0].text
    assert status == "200", operation.text
    assert viewer.api.get(sid)["status"] == "idle"
    # The same write from this page without the key: the cookie alone is refused.
    refused = driver.execute_async_script(FETCH, f"/v1/sessions/{sid}/cancel", {})
    assert refused == 401
    for entry in driver.get_log("browser"):
        assert "Content Security Policy" not in entry["message"], entry
    load(driver, f"{viewer.url}/ui/")  # back to the viewer for the module's next test


@pytest.fixture
def own_root_server(model_server: Any) -> Any:
    """A second `cubicle serve` whose first root is Cubicle's own checkout and whose second is empty at first."""
    own = repos.own_checkout()
    if own is None:
        pytest.skip("the server does not run from a checkout")
    other = Path(tempfile.mkdtemp(prefix="cubicle-picker-"))
    env = serve_env(model_server.url, TOKEN, other, TEST_INSTANCE) | {"CUBICLE_REPO_ROOTS": f"{own},{other}"}
    port = free_port()
    process = serve_subprocess(env, port)
    try:
        yield f"http://127.0.0.1:{port}", own, other
    finally:
        process.terminate()
        process.wait(timeout=60)
        shutil.rmtree(other, ignore_errors=True)


def test_the_form_does_not_offer_cubicles_own_checkout_first(driver: WebDriver, own_root_server: Any) -> None:
    url, own, other = own_root_server
    viewer = Viewer(url=url, root=other, api=None, log=Path(tempfile.gettempdir()))  # type: ignore[arg-type]
    sign_in(driver, viewer)

    def options() -> list[str]:
        return [str(o.get_attribute("value")) for o in one(driver, "new-repo").find_elements(By.TAG_NAME, "option")]

    wait(lambda: str(own) in options() or None, "the checkout offered")
    assert Select(one(driver, "new-repo")).first_selected_option.get_attribute("value") == ""
    assert options()[0] == "" and one(driver, "new-repo").get_attribute("required") == "true"
    (other / "project" / ".git").mkdir(parents=True)
    load(driver)
    wait(lambda: str(other / "project") in options() or None, "the other repository offered")
    assert Select(one(driver, "new-repo")).first_selected_option.get_attribute("value") == str(other / "project")
    assert str(own) in options() and "" not in options()
    driver.delete_all_cookies()  # signed in to another server on this host: the next test signs in afresh
    assert find(driver, "new-repo")
