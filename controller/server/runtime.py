"""The runtime: what a session runs on, assembled from Settings in one place for the CLI and the API alike.

It owns the sandbox backend and the model SDK client (each opened once, on first use: a command
that only reads the store or a layer, such as ``cubicle show`` or ``cubicle changes``, imports and
opens neither, so it starts without the engine's SDK, the agent or the environment's preparation)
and builds each session's sandbox and each turn's agent from them. A new capability (a
workspace layer, another kind of environment, MCP tools) is a module of its own plus a
line here, not a branch in the CLI and the API.

Where sandboxes run is the backend's (``sandbox.backends``, chosen by ``Settings.backend``):
this module asks it for a session's sandbox, an image, a sweep or a removal, and never talks to
an engine itself. Tests pass a ``sandbox_factory`` in code to run without one.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Settings
from ..errors import DiskError
from ..wire.envspec import Environment
from ..wire.events import EventSink
from ..wire.limits import Limits
from ..wire.network import NetworkPolicy, briefing
from ..wire.policies import ContextPolicy
from ..wire.sessionrecord import Source
from ..workspace.layer import DiskQuota
from ..workspace.manager import Workspaces
from ..workspace.offload import Offload
from ..workspace.quota import Disks, Mounter

if TYPE_CHECKING:
    import anthropic

    from ..agent.compactor import Compactor
    from ..agent.loop import Agent, Hooks
    from ..agent.model import Model
    from ..environment.preparation import Environments
    from ..sandbox import owners
    from ..sandbox.backends import Backend
    from ..sandbox.sandboxes import Sandbox

SandboxFactory = Callable[[Path, str, Limits], "Sandbox"]
"""Makes the sandbox of session ``id`` on ``repo`` with ``limits``; only code passes one in, never Settings."""


class Runtime:
    """The engine, the model client, and the sandboxes and agents made from them."""

    def __init__(
        self, settings: Settings, sandbox_factory: SandboxFactory | None = None, *, inline_small_walks: bool = False
    ) -> None:
        """``inline_small_walks``: list a small layer in this process (``Workspaces.inline_small``), for a one-shot
        command."""
        self.settings = settings
        self._sandbox_factory = sandbox_factory
        self.workspaces = Workspaces(
            settings.data_dir,
            self.clear_as_root,
            self._disks(),
            Offload(settings.walk_memory_mb, timeout_s=settings.walk_timeout_s),
            settings.listing_entries,
            inline_small=inline_small_walks,
        )
        self._model_client: anthropic.AsyncAnthropic | None = None

    @functools.cached_property
    def backend(self) -> Backend:
        """Where sandboxes run (``Settings.backend``), opened on first use."""
        from ..sandbox.backends import open_backend

        return open_backend(self.settings)

    @functools.cached_property
    def environments(self) -> Environments:
        """How a session's environment is resolved and prepared, made on first use."""
        from ..environment.preparation import Environments

        return Environments(self.settings, self.clear_as_root)

    def clear_as_root(self, directory: Path) -> None:
        """Empty ``directory`` of what only root may remove, through the backend; blocking."""
        self.backend.clear_as_root(directory)

    def host_pids(self, limits: Limits) -> int:
        """The host's process ids a sandbox of ``limits`` may hold at once, as the backend counts them."""
        return self.backend.host_pids(limits)

    def _disks(self) -> Disks | None:
        """The layers' disk quotas (None when ``CUBICLE_DISK_QUOTA=off``, or for a ``sandbox_factory``'s sandboxes,
        which never mount a layer); their mounter is the backend's, asked for when a layer with a quota is first
        made or mounted."""
        if self._sandbox_factory is not None or self.settings.disk_quota == "off":
            return None
        return Disks(_BackendMounter(self), self.settings.data_dir / "workspaces")

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
            from ..sandbox import owners

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
        source: Source | None = None,
    ) -> Sandbox:
        """The session's sandbox over its workspace layer (made by ``workspaces.create`` with the session); it
        prepares ``environment`` first, its progress going to ``sink`` (a remote session's ``source`` keys what
        that preparation keeps: ``environment.cachekeys``)."""
        if self._sandbox_factory is not None:
            return self._sandbox_factory(repo, session_id, limits)
        layer = self.workspaces.open(session_id)
        preparer = None
        if environment is not None and sink is not None:
            preparer = self.environments.preparer(session_id, layer, environment, limits, sink, source)
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
        hooks: Hooks | None = None,
    ) -> Agent:
        """One turn's agent: the model ``model`` through the shared client, working in ``sandbox``.

        ``context`` is the session's own policy; without one, the server's (``Settings.context``).
        """
        from ..agent.loop import NO_HOOKS, Agent

        policy = context or self.settings.context
        return Agent(
            session_id=session_id,
            model=self._model(model, policy),
            sandbox=sandbox,
            sink=sink,
            limits=limits,
            system=self.system(limits),
            context=policy,
            hooks=NO_HOOKS if hooks is None else hooks,
        )

    def compactor(
        self, session_id: str, model: str, sink: EventSink, limits: Limits, context: ContextPolicy | None
    ) -> Compactor:
        """What compacts a session's context between turns (``POST /compact``), as its agent would: the same
        system prompt and tools, so the summary request reads the agent's cached prefix."""
        from ..agent import tools
        from ..agent.compactor import Compactor

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
        from ..agent.model import SYSTEM_PROMPT

        return f"{self.settings.system_prompt or SYSTEM_PROMPT}\n{briefing(limits.network)}"

    async def close(self) -> None:
        """Close both clients (those opened); the sandboxes are their owners' to stop first. Layer filesystems still
        mounted after their last use (a helper's linger) are unmounted first, while the engine answers."""
        if self._model_client is not None:
            await self._model_client.close()
        await asyncio.to_thread(self.workspaces.close)
        if "backend" in vars(self):
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


class _BackendMounter:
    """The backend's mounter of layer filesystems, asked of the backend at the first make, mount or unmount: a
    command that reads only layers without a quota never opens the backend."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @functools.cached_property
    def _mounter(self) -> Mounter:
        disks = self._runtime.backend.disks()
        if disks is None:
            raise DiskError("The sandbox backend makes no disk quotas; this layer has one.")
        return disks.mounter

    @property
    def name(self) -> str:
        return self._mounter.name

    @property
    def linger_s(self) -> float:
        return self._mounter.linger_s

    def make(self, image: Path, target: Path, quota: DiskQuota) -> None:
        self._mounter.make(image, target, quota)

    def mount(self, image: Path, target: Path) -> None:
        self._mounter.mount(image, target)

    def unmount(self, target: Path) -> None:
        self._mounter.unmount(target)

    def detach_loop(self, device: str) -> None:
        self._mounter.detach_loop(device)
