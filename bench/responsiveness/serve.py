"""The controller's rows: a cancel through the API, and /healthz while a session's sandbox attacks the machine.

Both run a real ``cubicle serve`` (bench.flood's ``Controller``) with the scripted model server in this process."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.flood import Controller, health_sampler
from bench.measure import Sample
from bench.responsiveness.measured import Measured, repeat, until
from bench.rows import INSTANCE, make_repo
from controller.agent.scripted import Scenario, ScriptedServer, serve_in_thread
from controller.workspace.layer import open_layer

DATA = "responsiveness-data"


@contextlib.contextmanager
def served(root: Path, image: str) -> Iterator[tuple[Controller, ScriptedServer]]:
    """A ``cubicle serve`` on the sandbox image, and the scripted model server it asks."""
    model = ScriptedServer([Scenario(name="default", turns=[])])
    with serve_in_thread(model.app) as url:
        controller = Controller(url, root, INSTANCE, data=DATA, image=image)
        try:
            yield controller, model
        finally:
            controller.close()


def scenario(model: ScriptedServer, command: str, timeout_s: int) -> str:
    """A model that runs ``command`` once, then says it is done; its name."""
    name = f"responsive-{secrets.token_hex(4)}"
    call = {"type": "tool_use", "name": "run_command", "input": {"command": command, "timeout_s": timeout_s}}
    turns = [{"content": [call]}, {"content": [{"type": "text", "text": "done"}]}]
    model.scenarios |= {name: Scenario.model_validate({"name": name, "turns": turns})}
    return name


def start(controller: Controller, repo: Path, model: str, limits: dict[str, Any]) -> str:
    body = {"repo": str(repo), "task": "go", "model": model, "limits": limits}
    response = controller.http.post("/v1/sessions", json=body)
    response.raise_for_status()
    return str(response.json()["id"])


async def api_cancel(client: Any, image: str, root: Path, quick: bool) -> list[Measured]:
    """``POST /v1/sessions/{id}/cancel`` mid-command, until the session's record has ended (the turn stopped, the container removed)."""
    del client
    repo = make_repo(root, "responsive-cancel")
    cancels, reads = [], []
    with served(root, image) as (controller, model):
        name = scenario(model, "touch started; sleep 300", 600)
        for _ in range(repeat(quick)):
            sid = start(controller, repo, name, {"command_timeout_s": 600})
            upper = open_layer(root / DATA, sid).upper
            await until((upper / "started").exists, "the session's command runs")
            reads += [await asyncio.to_thread(_timed_get, controller, f"/v1/sessions/{sid}") for _ in range(3)]
            took, ended = await asyncio.to_thread(_cancel, controller, sid)
            assert ended["status"] == "cancelled", ended
            purge(controller, sid)
            cancels.append(took)
    return [
        Measured(
            "serve.api_cancel",
            "POST /cancel of a session mid-command, until its record has ended",
            Sample(cancels),
            "GET /v1/sessions/{id}",
            Sample(reads),
            2.5,
        )
    ]


def _timed_get(controller: Controller, path: str) -> float:
    start = time.perf_counter()
    controller.http.get(path).raise_for_status()
    return time.perf_counter() - start


def purge(controller: Controller, sid: str) -> None:
    """Remove the session whole (its container, its layer: mounted, it would outlive the server)."""
    controller.http.delete(f"/v1/sessions/{sid}", params={"purge": "true"}).raise_for_status()


def _cancel(controller: Controller, sid: str) -> tuple[float, dict[str, Any]]:
    """Seconds from ``POST /cancel`` until the session's record has ended (the answer says so, or a read after it:
    the answer comes after two seconds at most, the turn still ending on a busy machine); the ended record."""
    start = time.perf_counter()
    record = controller.http.post(f"/v1/sessions/{sid}/cancel").raise_for_status().json()
    while record["status"] == "running":
        time.sleep(0.01)
        record = controller.http.get(f"/v1/sessions/{sid}").raise_for_status().json()
    return time.perf_counter() - start, dict(record)


ATTACKS = {
    "a fork bomb": ("bomb() { bomb | bomb & }; bomb; sleep 6", 5),
    "16 CPU spinners": ("for i in $(seq 16); do (while :; do :; done) & done; sleep 6", 5),
    "its tmpfs filled": (
        "dd if=/dev/zero of=/tmp/fill bs=1M count=200; dd if=/dev/zero of=$HOME/fill bs=1M count=200",
        60,
    ),
}
"""What the session's sandbox (one CPU) runs while /healthz is sampled every 10 ms: tests/security/test_resources.py's
attacks that load the machine."""


async def health_during_attacks(client: Any, image: str, root: Path, quick: bool) -> list[Measured]:
    """/healthz's slowest answers during each attack, beside the same sampling with no session running."""
    del client, quick  # one run of each attack is the measurement (its whole length is sampled)
    repo = make_repo(root, "responsive-attack")
    measured = []
    with served(root, image) as (controller, model):
        with health_sampler(controller.url) as idle:
            await asyncio.sleep(3)
        quiet = Sample(list(idle))
        for what, (command, timeout_s) in ATTACKS.items():
            sid = start(controller, repo, scenario(model, command, timeout_s), {"cpus": 1.0})
            with health_sampler(controller.url) as health:
                await asyncio.to_thread(controller.finished, sid)
            purge(controller, sid)
            measured.append(
                Measured(
                    f"serve.health_during.{what.split()[-1]}",
                    f"/healthz while a session's sandbox runs {what}",
                    Sample(list(health)),
                    "/healthz, no session",
                    quiet,
                    1.0,
                )
            )
    return measured
