"""The runtime: what a session runs on, assembled from Settings in one place for the CLI and the API alike.

It owns the sandbox backend and the model SDK client (each connected once, on first use)
and builds each session's sandbox and each turn's agent from them. A new capability (a
workspace layer, another kind of environment, MCP tools) is a module of its own plus a
line here, not a branch in the CLI and the API.

Where sandboxes run is the backend's (``sandbox.backends``, chosen by ``Settings.backend``):
this module asks it for a session's sandbox, an image, a sweep or a removal, and never talks to
an engine itself. Tests pass a ``sandbox_factory`` in code to run without one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..agent import tools
from ..agent.compactor import Compactor
from ..agent.loop import NO_HOOKS, Agent, Hooks
from ..agent.model import SYSTEM_PROMPT, Model
from ..config import Settings
from ..environment.preparation import Environments
from ..sandbox import owners
from ..sandbox.backends import open_backend
from ..sandbox.docker import Sandbox
from ..wire.envspec import Environment
from ..wire.events import EventSink
from ..wire.limits import Limits
from ..wire.network import NetworkPolicy, briefing
from ..wire.policies import ContextPolicy
from ..workspace.manager import Workspaces
from ..workspace.offload import Offload

if TYPE_CHECKING:
    import anthropic

SandboxFactory = Callable[[Path, str, Limits], Sandbox]
"""Makes the sandbox of session ``id`` on ``repo`` with ``limits``; only code passes one in, never Settings."""


class Runtime:
    """The engine, the model client, and the sandboxes and agents made from them."""

    def __init__(self, settings: Settings, sandbox_factory: SandboxFactory | None = None) -> None:
        self.settings = settings
        self.backend = open_backend(settings)
        self._sandbox_factory = sandbox_factory
        self.workspaces = Workspaces(
            settings.data_dir,
            self.backend.clear_as_root,
            None if sandbox_factory is not None else self.backend.disks(),  # such sandboxes never mount the layer
            Offload(settings.walk_memory_mb, timeout_s=settings.walk_timeout_s),
            settings.listing_entries,
        )
        self.environments = Environments(settings, self.backend.clear_as_root)
        self._model_client: anthropic.AsyncAnthropic | None = None

    def check_model(self) -> None:
        """Make the model client now, so a missing API key fails before any container exists."""
        self._client()

    async def ensure_image(self, network: NetworkPolicy | None = None) -> None:
        """Make sure the sandbox image is there (building it when allowed), and the egress proxy's too when
        ``network`` is an allow policy."""
        await self.backend.ensure_image(network)

    async def sweep(self, dead_only: bool = False) -> owners.Sweep:
        """Remove the containers of this instance's dead controllers (and, unless ``dead_only``, this process's own:
        a controller starting has none yet). Sandboxes from a ``sandbox_factory`` run none, and with ``dead_only``
        nothing is asked of the backend then."""
        if dead_only and self._sandbox_factory is not None:
            return owners.Sweep([], [])
        return await self.backend.sweep(dead_only)

    async def remove_containers(self, session_id: str) -> None:
        """Remove the session's container and volume wherever they came from (a sandbox of another process too).

        Sandboxes from a ``sandbox_factory`` run no containers, so there is nothing to ask the backend then.
        """
        if self._sandbox_factory is None:
            await self.backend.remove(session_id)

    def sandbox(
        self,
        repo: Path,
        session_id: str,
        limits: Limits,
        environment: Environment | None = None,
        sink: EventSink | None = None,
    ) -> Sandbox:
        """The session's sandbox over its workspace layer (made by ``workspaces.create`` with the session); it
        prepares ``environment`` first, its progress going to ``sink``."""
        if self._sandbox_factory is not None:
            return self._sandbox_factory(repo, session_id, limits)
        layer = self.workspaces.open(session_id)
        preparer = None
        if environment is not None and sink is not None:
            preparer = self.environments.preparer(session_id, layer, environment, limits, sink)
        return self.backend.sandbox(session_id, layer, limits, preparer, self.workspaces)

    def agent(
        self,
        *,
        session_id: str,
        model: str,
        sandbox: Sandbox,
        sink: EventSink,
        limits: Limits,
        context: ContextPolicy | None = None,
        hooks: Hooks = NO_HOOKS,
    ) -> Agent:
        """One turn's agent: the model ``model`` through the shared client, working in ``sandbox``.

        ``context`` is the session's own policy; without one, the server's (``Settings.context``).
        """
        policy = context or self.settings.context
        return Agent(
            session_id=session_id,
            model=self._model(model, policy),
            sandbox=sandbox,
            sink=sink,
            limits=limits,
            system=self.system(limits),
            context=policy,
            hooks=hooks,
        )

    def compactor(
        self, session_id: str, model: str, sink: EventSink, limits: Limits, context: ContextPolicy | None
    ) -> Compactor:
        """What compacts a session's context between turns (``POST /compact``), as its agent would: the same
        system prompt and tools, so the summary request reads the agent's cached prefix."""
        return Compactor(
            session_id,
            self._model(model),
            self.system(limits),
            tools.definitions(),
            context or self.settings.context,
            sink.emit,
        )

    def system(self, limits: Limits) -> str:
        """The session's system prompt: the configured or built-in one, and what its network allows."""
        return f"{self.settings.system_prompt or SYSTEM_PROMPT}\n{briefing(limits.network)}"

    async def close(self) -> None:
        """Close both clients; the sandboxes are their owners' to stop first. Layer filesystems still mounted
        after their last use (a helper's linger) are unmounted first, while the engine answers."""
        if self._model_client is not None:
            await self._model_client.close()
        await asyncio.to_thread(self.workspaces.close)
        await asyncio.to_thread(self.backend.close)

    def _client(self) -> anthropic.AsyncAnthropic:
        if self._model_client is None:
            from ..agent.anthropic_model import make_client

            self._model_client = make_client(self.settings)
        return self._model_client

    def _model(self, name: str, context: ContextPolicy | None = None) -> Model:
        from ..agent.anthropic_model import AnthropicModel

        edits = context.server_edits() if context is not None else None
        return AnthropicModel(self._client(), name, self.settings.max_tokens, edits)
