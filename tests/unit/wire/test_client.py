"""The client's table of routes stays the API's: the same body fields, and a known exception for every status."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

from controller.client import ROUTES, AsyncClient, Client
from controller.wire.bodies import CreateSession
from controller.wire.statuses import ERROR_OF, STATUSES


def test_create_sends_exactly_the_fields_of_the_apis_request() -> None:
    for create in (ROUTES.create, Client.create, AsyncClient.create):
        keywords = {name for name in inspect.signature(create).parameters if name != "self"}
        assert keywords == set(CreateSession.model_fields), create


def test_both_clients_have_the_same_methods() -> None:
    def public(cls: type) -> set[str]:
        return {name for name in vars(cls) if not name.startswith("_")}

    assert public(Client) - {"close"} == public(AsyncClient) - {"aclose"}


def test_every_status_the_api_answers_an_error_with_is_read_as_one_error() -> None:
    statuses = [code for _, code, _ in STATUSES]
    read = [code for _, code, reads in STATUSES if reads]
    assert sorted(set(statuses)) == sorted(read)  # each status once, so the client's reading is never ambiguous
    assert all(ERROR_OF[code] is kind for kind, code, reads in STATUSES if reads)


def test_importing_the_client_loads_neither_docker_nor_fastapi_nor_the_controller() -> None:
    """A program that only talks to a Cubicle server imports the client, its bounded reads and the wire models, and
    nothing else of ours."""
    code = "import sys, json, controller.client; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True).stdout)
    heavy = {"docker", "fastapi", "starlette", "uvicorn", "anthropic", "testcontainers", "mcp", "psycopg"}
    assert {name.split(".")[0] for name in loaded} & heavy == set()
    ours = {name for name in loaded if name.split(".")[0] == "controller"}
    assert ours - {"controller", "controller.client", "controller.answers", "controller.errors"} == {
        name for name in ours if name.startswith("controller.wire")
    }
