"""A session's environment: resolved when the session is created, made ready before its first turn.

``resolve`` reads the repository's definition from the real checkout (never from the
agent's layer) and lays the request's fields over it; an image named by a request must be
the default image or on ``Settings.allowed_images``. ``preparer`` returns what the
sandbox runs before its first container (``sandbox.Preparer``): the environment's image
(built once per content hash, see ``environment.build``), then its setup command, run once
per key (``setups``) with its own network policy, whose tree goes beneath the session's
layer; a remote session's image and setup are kept per URL, not per commit (``cachekeys``).
That policy (the build's too) is the environment's ``setup_network``, the server's default, or
the default with the environment's hosts added (``defaults,allow=...``); what its proxy refused or could
not reach is named, with the setting that allows it (``refused_text``). Both stream their output as
``setup_output`` events; a failure is a SetupError, which ends the turn with reason ``error`` before any
model request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from docker.errors import ImageNotFound

from ..config import Settings
from ..errors import CubicleError, DockerUnavailableError, ImageNotAllowedError, SetupError
from ..sandbox import egress, images, owners
from ..sandbox import isolation as runtimes
from ..sandbox.egress import Egress, Route
from ..sandbox.sandboxes import Prepared, Preparer
from ..wire.envspec import MAX_ENV_VALUE, MAX_SETUP_CHARS, Environment, EnvironmentRequest
from ..wire.events import EventSink, SetupOutput
from ..wire.limits import Limits
from ..wire.network import NONE, DefaultsPlus, NetworkPolicy
from ..wire.sessionrecord import Source
from ..workspace import Layer
from . import build as environment_image
from . import cachekeys, load, setup_inputs_hash, setups
from .build import EnvironmentImage, ImageOptions, OnLine
from .definition import requested
from .devcontainer import expand_container_env
from .refusals import refused_by, refused_text
from .setups import SetupCommand, SetupRun, Setups

Told = Callable[[str], Awaitable[None]]
BUILD_FIELDS = ("dockerfile", "context", "target", "build_args")
"""What a request may not choose: what is built (a build runs outside the sandbox), only the repository may."""


DETECTED_NOTE = "a definition (.cubicle/environment.toml, even an empty one) replaces what was detected"


class Environments:
    """Resolve a session's environment from its repository and request; prepare it for the sandbox."""

    def __init__(self, settings: Settings, clear_as_root: Callable[[Path], None]) -> None:
        self.settings = settings
        self.setups = Setups(settings.data_dir, clear_as_root)

    def resolve(self, repo: Path, request: EnvironmentRequest | None = None) -> Environment:
        """The repository's definition (DefinitionError when invalid) with ``request`` laid over it."""
        environment = load(repo)
        if request is None:
            return environment
        chosen = [name for name in BUILD_FIELDS if getattr(request, name) is not None]
        if chosen:
            raise ImageNotAllowedError(
                f"A request may not choose what is built ({', '.join(chosen)}): a build runs the repository's "
                "code outside the sandbox, so only the repository's own definition says what it builds."
            )
        if request.image is not None and not self.image_allowed(request.image):
            raise ImageNotAllowedError(
                f"The image {request.image!r} may not be named by a request on this server; "
                f"allowed: the default image {self.settings.image}"
                + "".join(f", {image}" for image in self.settings.allowed_images)
                + "."
            )
        return requested(request, environment)

    def image_allowed(self, image: str) -> bool:
        return image == self.settings.image or image in self.settings.allowed_images

    def agent_network(self, environment: Environment, limits: Limits, by_request: bool) -> tuple[Limits, Environment]:
        """The session's limits with the network ``environment`` asks for, under the server's maximum, and the
        environment with a note saying so. A repository's own definition may ask for ``allow`` at most: a cloned
        repository must not give a model it can steer the open network (only --network or a request can)."""
        asked = environment.network or NONE
        ceiling = self.settings.max_limits.network
        if not by_request and asked.level == "open":
            ceiling = NONE.clamp(ceiling)
        granted = asked.clamp(ceiling)
        note = f"the agent's network is {granted}, as {environment.source} asks"
        if granted != asked:
            note = f"{environment.source} asks for the agent's network {asked}; it runs with {granted} (--network grants more)"
        noted = environment.model_copy(update={"warnings": (*environment.warnings, note)})
        return limits.model_copy(update={"network": granted}), noted

    def setup_network(self, environment: Environment) -> NetworkPolicy:
        """The setup's policy (an image build's too), under the server's maximum: the environment's own, else the
        server's default; ``defaults,allow=...`` is the default with those hosts added."""
        asked = environment.setup_network or self.settings.setup_network
        if isinstance(asked, DefaultsPlus):
            try:
                asked = asked.over(self.settings.setup_network)
            except ValueError as err:
                raise SetupError(f"The setup network of {environment.source}: {err}.") from None
        return asked.clamp(self.settings.max_limits.network)

    async def build(
        self,
        client: Any,
        environment: Environment,
        repo: Path,
        name: str,
        on_line: OnLine | None = None,
        url: str | None = None,
    ) -> EnvironmentImage:
        """The environment's image, its Dockerfile built with the setup's network (``setup_network``): no
        network, a proxy of its own to the allowed hosts (named after ``name``), or the bridge. A build runs
        the repository's code outside the sandbox, so it reaches no more than the setup may. ``url``: the remote
        whose commit ``repo`` is (the image is kept per URL)."""
        settings = self.settings
        async with self.route(client, self.setup_network(environment), name, environment) as route:
            options = ImageOptions(
                sandbox_image=settings.image,
                ca_bundle=settings.ca_bundle,
                auto_build_sandbox=settings.auto_build_image,
                pull=settings.pull_images != "never",
                network_mode=route.network,
                proxy=route.environment(),
            )
            return await asyncio.to_thread(
                environment_image.ensure_image, client, environment, repo, options, on_line, url
            )

    @contextlib.asynccontextmanager
    async def route(
        self, client: Any, policy: NetworkPolicy, session_id: str, environment: Environment, told: Told | None = None
    ) -> AsyncIterator[Route]:
        """A network for ``policy``: a proxy of its own for ``allow`` (an internal network, gone after), else direct.

        What the proxy refused or could not reach is said (``refused_text``, naming the setting of ``environment``
        that allows more): added to a SetupError raised inside, else ``told`` when given.
        Its containers carry ``session_id``'s labels, so a crash leaves nothing ``gc`` cannot find."""
        if policy.level != "allow":
            yield egress.direct(policy)
            return
        settings = self.settings
        gate = Egress(
            client,
            session_id=f"{session_id}-env",
            policy=policy,
            labels=owners.labels(settings.instance, session_id),
            image=settings.proxy_image,
            outside=settings.outside(),
            auto_build=settings.auto_build_image,
        )
        try:
            yield await asyncio.to_thread(gate.start)
        except SetupError as err:
            said = refused_text(await refused_by(gate, settle=True), environment)
            if said:
                raise type(err)(f"{err.args[0]}\n{said}", err.hint) from None
            raise
        else:
            said = refused_text(await refused_by(gate), environment)
            if said and told is not None:
                await told(said + "\n")
        finally:
            await asyncio.to_thread(gate.stop)

    def preparer(
        self,
        session_id: str,
        layer: Layer,
        environment: Environment,
        limits: Limits,
        sink: EventSink,
        source: Source | None = None,
    ) -> Preparer | None:
        """What makes ``environment`` ready for the session's sandbox; None when there is nothing to do.

        ``source``: a remote session's (its record's), whose URL keys the image and the setup instead of the
        commit's tree (``cachekeys``)."""
        if not (
            environment.builds or environment.setup or environment.env or environment.warnings or environment.detected
        ):
            return None

        async def prepare(client: Any) -> Prepared:
            url = source.url if source is not None else None
            return await Preparation(self, session_id, layer, environment, limits, sink, url).run(client)

        return prepare


class Preparation:
    """One preparation of one session's environment: the image, then the setup tree. ``url``: the remote the
    session's files are a commit of (None for a checkout)."""

    def __init__(
        self,
        owner: Environments,
        session_id: str,
        layer: Layer,
        environment: Environment,
        limits: Limits,
        sink: EventSink,
        url: str | None = None,
    ) -> None:
        self.owner = owner
        self.settings = owner.settings
        self.session_id = session_id
        self.layer = layer
        self.environment = environment
        self.limits = limits
        self.sink = sink
        self.url = url

    async def run(self, client: Any) -> Prepared:
        """The image, then the setup tree; a failure of either (or of what they read) is a SetupError."""
        if self.environment.detected:
            await self.note(f"detected: {self.environment.detected}; {DETECTED_NOTE}\n")
        for warning in self.environment.warnings:
            await self.note(f"warning: {warning}\n")
        try:
            image = await self.image(client)
            env, command = await asyncio.to_thread(self.expanded, client, image)
            tree = await self.setup(client, image, env, command) if command else None
        except (SetupError, DockerUnavailableError):
            raise
        except CubicleError as err:  # a base image missing, a Dockerfile or input moved out of the repository since
            raise SetupError(f"The environment of {self.layer.repo} ({self.environment.source}): {err}") from None
        return Prepared(image=image, env=env, setup=tree)

    def expanded(self, client: Any, image: str) -> tuple[dict[str, str], str]:
        """The environment's variables and setup command, each ``${containerEnv:NAME}`` the definition left in them
        made the value the running container has: the image's ``ENV``, under the definition's own variables."""
        env, command = dict(self.environment.env), self.environment.setup or ""
        if "${containerEnv:" not in command and not any("${containerEnv:" in value for value in env.values()):
            return env, command
        listed = client.images.get(image).attrs.get("Config", {}).get("Env") or []
        known = dict(item.split("=", 1) for item in listed if "=" in item)
        env = expand_container_env(env, known, MAX_ENV_VALUE)
        return env, expand_container_env({"": command}, {**known, **env}, MAX_SETUP_CHARS)[""]

    async def note(self, text: str) -> None:
        """Cubicle's own line about the preparation: phase ``environment``, which no build or command writes."""
        await self.output("environment", text)

    async def output(self, phase: str, text: str) -> None:
        await self.sink.emit(SetupOutput(session_id=self.session_id, phase=phase, text=text))  # type: ignore[arg-type,unused-ignore]

    async def image(self, client: Any) -> str:
        """The environment's image (built when its content hash is new); the sandbox image for no definition."""
        settings = self.settings
        if not environment_image.builds(self.environment, settings.ca_bundle):
            return settings.image
        loop = asyncio.get_running_loop()
        shown = [0]

        def on_line(line: str) -> None:
            """A build line as an event, cut to a line's cap; past the setup's line cap, one note and then nothing."""
            shown[0] += 1
            if shown[0] <= setups.MAX_EVENT_LINES:
                event = self.output("build", line[: setups.MAX_LINE_CHARS] + "\n")
            elif shown[0] == setups.MAX_EVENT_LINES + 1:
                event = self.note("more build output not shown\n")
            else:
                return
            asyncio.run_coroutine_threadsafe(event, loop).result()

        labels = owners.labels(settings.instance, self.session_id)
        for _ in range(images.HOLD_ATTEMPTS):  # a sweep that removed the image between its build and the hold
            repo, url = self.layer.repo, self.url
            made = await self.owner.build(client, self.environment, repo, self.session_id, on_line, url)
            with contextlib.suppress(ImageNotFound):
                await asyncio.to_thread(images.hold, client, made.tag, labels)
                return made.tag
            await self.note(f"the image {made.tag} was removed by a sweep before this session held it; again\n")
        raise SetupError(f"The environment image of {self.layer.repo} was removed by a sweep each time it was made.")

    async def setup(self, client: Any, image: str, env: dict[str, str], command: str) -> Path:
        """The finished setup tree for this environment (run now unless an identical one was made before).

        A session keeps the tree it began with for its whole life (its layer was written over it),
        even when its inputs change in the checkout meanwhile; a new session gets a new setup.
        """
        pinned = Path(self.layer.info.setup) if self.layer.info.setup else None
        if pinned is not None and self.owner.setups.finished(pinned.parent.name):
            await self.note(f"this session keeps its setup ({pinned.parent.name[:12]})\n")
            return pinned
        environment = self.environment
        network = self.owner.setup_network(environment)
        image_id = (await asyncio.to_thread(client.images.get, image)).id
        key = await self.setup_key(image_id, command, env, str(network))
        if self.owner.setups.finished(key):
            await self.note(f"reusing the setup made before ({key[:12]})\n")
            return self.owner.setups.tree(key)
        async with self.owner.route(client, network, self.session_id, environment, self.note) as route:
            setup = SetupCommand(command, image, env, environment.setup_timeout_s)
            run = SetupRun(
                layer=self.layer,
                setup=setup,
                route=route,
                limits=self.limits.model_copy(update={"network": network, "runtime": runtimes.SETUP}),
                instance=self.settings.instance,
                session_id=self.session_id,
            )
            return await self.owner.setups.ensure(client, key, run, lambda text: self.output("setup", text), self.note)

    async def setup_key(self, image_id: str, command: str, env: dict[str, str], network: str) -> str:
        """The setup tree's key (``cachekeys.setup_key``). A remote's is its URL's, unless the tree of that key,
        made on another commit, would replace or hide a file of this one (``setups.shadowing``): then this
        commit's own, whose setup runs over this commit's files."""
        inputs = await asyncio.to_thread(setup_inputs_hash, self.environment, self.layer.repo)
        origin = cachekeys.setup_origin(self.layer, self.url)
        key = cachekeys.setup_key(image_id, command, env, network, origin, inputs)
        if self.url is None or not self.owner.setups.finished(key):
            return key
        try:
            hidden = await asyncio.to_thread(setups.shadowing, self.owner.setups.tree(key), self.layer.repo)
        except OSError as err:  # swept since, or a directory the setup made unreadable: not shared, to be safe
            hidden = [f"(the tree could not be compared: {err.strerror})"]
        if not hidden:
            return key
        shown = ", ".join(hidden[:10]) + (f" and {len(hidden) - 10} more" if len(hidden) > 10 else "")
        await self.note(f"the setup made before ({key[:12]}) would hide files of this commit ({shown}); not reused\n")
        origin = cachekeys.setup_origin(self.layer, self.url, own_tree=True)
        return cachekeys.setup_key(image_id, command, env, network, origin, inputs)


__all__ = ["Environments", "Preparation", "setups"]
