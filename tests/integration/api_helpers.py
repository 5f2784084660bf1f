"""An HTTP client for the API under test, with a small SSE reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.eventually import eventually


class Api:
    def __init__(self, url: str, token: str) -> None:
        # a bound against a hang: a session's start makes and mounts its layer's disk, slow on a busy machine
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)

    def create(self, repo: str, scenario: str, task: str = "do it", **extra: Any) -> dict[str, Any]:
        response = self.http.post("/v1/sessions", json={"repo": repo, "task": task, "model": scenario, **extra})
        assert response.status_code == 201, response.text
        return dict(response.json())

    def get(self, sid: str) -> dict[str, Any]:
        response = self.http.get(f"/v1/sessions/{sid}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def events(self, sid: str, last_event_id: int | None = None, stop_after: int | None = None) -> list[dict[str, Any]]:
        """Read the SSE stream until it closes (or ``stop_after`` events, then disconnect)."""
        headers = {"Last-Event-ID": str(last_event_id)} if last_event_id is not None else {}
        seen: list[dict[str, Any]] = []
        with self.http.stream("GET", f"/v1/sessions/{sid}/events", headers=headers, timeout=120) as response:
            assert response.status_code == 200
            for event in parse_events(response.iter_lines()):
                seen.append(event)
                if stop_after is not None and len(seen) >= stop_after:
                    break
        return seen

    def wait_for(self, sid: str, predicate: Any, timeout: float = 60) -> dict[str, Any]:
        """The session's record once ``predicate`` holds for it."""
        what = f"session {sid} reaches the expected state"
        return eventually(lambda: self.get(sid), until=predicate, what=what, timeout=timeout, interval=0.05)

    def wait_for_event(self, sid: str, kind: str, timeout: float = 60) -> None:
        """Until the session's event stream (read live, from its start) shows a ``kind`` event."""
        what = f"a {kind} event in session {sid}"
        eventually(lambda: self._shows_event(sid, kind, timeout), what=what, timeout=timeout, interval=0.05)

    def _shows_event(self, sid: str, kind: str, timeout: float) -> bool:
        """Whether the stream shows a ``kind`` event before it closes; it is left as soon as one arrives."""
        with self.http.stream("GET", f"/v1/sessions/{sid}/events", timeout=timeout) as response:
            return any(event["type"] == kind for event in parse_events(response.iter_lines()))


def parse_events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Server-Sent Events as dicts, checking that each frame's id and event name match its data."""
    fields: dict[str, str] = {}
    for line in lines:
        if not line:
            if "data" in fields:
                event = json.loads(fields["data"])
                assert str(event["seq"]) == fields.get("id"), fields
                assert event["type"] == fields.get("event"), fields
                yield event
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value


def serve_env(model_url: str, token: str, root: Path, instance: str) -> dict[str, str]:
    """The environment of a `cubicle serve` subprocess: our variables only, never the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUBICLE_", "ANTHROPIC_"))}
    return env | {
        "ANTHROPIC_API_KEY": "test",
        "ANTHROPIC_BASE_URL": model_url,
        "CUBICLE_API_TOKEN": token,
        "CUBICLE_REPO_ROOTS": str(root),
        "CUBICLE_DATA_DIR": str(root / "data"),
        "CUBICLE_INSTANCE": instance,
    }


SERVE_READY_S = 120
"""How long `cubicle serve` may take to answer /healthz: a bound against a hang, not a speed. Before it answers it
imports its packages (seconds, on a busy machine), marks what a dead controller left running as interrupted and
removes that controller's containers through the engine, which other work may be keeping busy."""


def serve_subprocess(env: dict[str, str], port: int, log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start `cubicle serve` as its own process and wait until /healthz answers; its output goes to ``log``
    (appended), or nowhere."""
    with open(log, "ab") if log else open(os.devnull, "wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "controller", "serve", "--port", str(port)],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        eventually(
            lambda: _serving(process, port),
            what="cubicle serve answers /healthz",
            timeout=SERVE_READY_S,
            ignoring=(httpx.HTTPError,),
        )
    except BaseException:
        process.kill()
        process.wait()  # reaped: a Popen left unwaited warns from its finalizer, and fails whichever test frees it
        raise
    return process


def _serving(process: subprocess.Popen[bytes], port: int) -> bool:
    """Whether the server answers /healthz; a server that exited ends the wait at once."""
    if process.poll() is not None:
        raise AssertionError(f"cubicle serve exited with {process.returncode} before it answered /healthz")
    return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
