"""The client's table of routes stays the API's: the same body fields, and a known exception for every status."""

from __future__ import annotations

import inspect

from controller.client import ERROR_OF, ROUTES, AsyncClient, Client
from controller.errors import ConflictError, SandboxError
from controller.server.api import STATUS_OF
from controller.wire.bodies import CreateSession


def test_create_sends_exactly_the_fields_of_the_apis_request() -> None:
    for create in (ROUTES.create, Client.create, AsyncClient.create):
        keywords = {name for name in inspect.signature(create).parameters if name != "self"}
        assert keywords == set(CreateSession.model_fields), create


def test_both_clients_have_the_same_methods() -> None:
    def public(cls: type) -> set[str]:
        return {name for name in vars(cls) if not name.startswith("_")}

    assert public(Client) - {"close"} == public(AsyncClient) - {"aclose"}


def test_every_status_the_api_maps_an_error_to_has_its_exception() -> None:
    for kind, code in STATUS_OF:
        raised = ERROR_OF[code]
        # 409 also comes from RepoChangedError and 503 from ConfigError: the client raises the broader kind
        assert issubclass(kind, raised) or (code, raised) in {(409, ConflictError), (503, SandboxError)}, kind
