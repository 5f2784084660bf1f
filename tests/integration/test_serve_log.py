"""What `cubicle serve` writes to its log: never a query string, which may carry the viewer's page key."""

from __future__ import annotations

from pathlib import Path

import httpx

from controller.agent.scripted import ScriptedServer, free_port
from tests.integration.api_helpers import serve_env, serve_subprocess
from tests.integration.controllers_helpers import stop
from tests.sandbox_defaults import TEST_INSTANCE

TOKEN = "serve-log-token-0123456789abcdef0123456789"


def test_the_access_log_prints_paths_without_their_query_strings(tmp_path: Path, model_server: ScriptedServer) -> None:
    """The viewer's event stream sends its page key as ``?key=`` (an EventSource sends no header): before, the
    access log printed it for anyone who reads the server's log."""
    port = free_port()
    log = tmp_path / "serve.log"
    process = serve_subprocess(serve_env(model_server.url, TOKEN, tmp_path, f"{TEST_INSTANCE}-log"), port, log)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            listed = client.get("/v1/sessions?key=page-key-s3cret", headers={"Authorization": f"Bearer {TOKEN}"})
            assert listed.status_code == 200
            assert client.get("/healthz?token=another-s3cret").status_code == 200
    finally:
        stop(process)
    written = log.read_text()
    assert "s3cret" not in written, written
    assert '"GET /v1/sessions?… HTTP/1.1" 200' in written and '"GET /healthz?… HTTP/1.1" 200' in written, written
