"""The seam between backends: the agent, the server, the workspace and the environment reach an engine only through
``sandbox.backends`` and the neutral modules beside it, and import neither SDK (``docker``, ``kubernetes``).

What still does is named in ``STILL``, each with why; an entry that no longer holds fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast

from tests.unit.imports import imports, modules, tree

LAYERS = ("agent", "server", "workspace", "environment")
SDKS = {"docker", "kubernetes", "kubernetes_asyncio"}
NEUTRAL = {
    "sandbox",
    "sandbox.sandboxes",  # the Sandbox protocol and what a backend's sandboxes are given
    "sandbox.toolboxes",  # the sandbox that speaks the toolbox protocol, over any launcher's stream
    "sandbox.channel",  # the toolbox protocol's JSON lines, over any stream
    "sandbox.backends",  # the seam itself: Backend, and open_backend, which alone picks an engine
    "sandbox.owners",  # labels and a controller's identity; its Docker sweep is reached through Backend.sweep
}
"""The sandbox modules the layers above may import: every other one belongs to an engine (Docker, Kubernetes)."""

_SETUPS = (
    "a setup runs in a container of its own on the Docker engine's client (Backend.builder): not yet behind the seam"
)
_BUILDS = "environment images are built, pulled and swept with the Docker engine's client (Backend.builder)"
_PATTERNS = "the .dockerignore rules as the Docker SDK parses and translates them (a pure function of names, no engine)"
STILL: dict[str, dict[str, str]] = {
    "environment.setups": {
        "docker": _SETUPS,
        "sandbox.docker": "a setup's container takes the sandbox's own options (container_options) and volume",
        "sandbox.egress": "a setup's container is given the route (egress.Route) its network policy leads through",
    },
    "environment.preparation": {
        "docker": _BUILDS,
        "sandbox.egress": "a setup's proxy is started here for the setup's network policy",
        "sandbox.images": "an environment's image is held for its session until a container runs it",
        "sandbox.isolation": "a setup's container runs under the setups' own OCI runtime (isolation.SETUP)",
    },
    "environment.build": {"docker": _BUILDS, "sandbox.images": "an environment's image is built on the sandbox's"},
    "environment.pull": {"docker": _BUILDS},
    "environment.dockerfile": {"sandbox.isolation": "the image's Dockerfile names the runtimes' helper files"},
    "environment.refusals": {"sandbox.egress": "what a setup's or a build's proxy refused is read from the proxy"},
    "workspace.dockerignore": {"docker": _PATTERNS},
}


def _sdks(module: str) -> set[str]:
    """The SDKs ``module`` imports anywhere (at its top, in a function, or for type checking only)."""
    found = set()
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found & SDKS


def _engine_modules(module: str) -> set[str]:
    return {name for name in imports(module) if name.split(".")[0] == "sandbox" and name not in NEUTRAL}


def test_the_layers_above_reach_no_engine_but_through_the_seam() -> None:
    found = {
        module: sorted(_sdks(module) | _engine_modules(module))
        for module in modules()
        if module.split(".")[0] in LAYERS
    }
    assert {module: names for module, names in found.items() if names} == {
        module: sorted(why) for module, why in STILL.items()
    }


def test_the_neutral_modules_name_no_sdk() -> None:
    """``owners`` imports the Docker SDK inside its sweep only; the others not at all."""
    assert {module: sorted(_sdks(module)) for module in NEUTRAL - {"sandbox.backends", "sandbox.owners"}} == {
        module: [] for module in NEUTRAL - {"sandbox.backends", "sandbox.owners"}
    }
