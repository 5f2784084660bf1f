"""compose.yaml brought up through the engine's own API, as Compose v2 would bring it up.

No Compose v2 is in the suite: the only one the machines reach is a third-party PyPI wheel of a prebuilt
binary, which would get the Docker socket (docs/guides/controllers.md). So the test reads compose.yaml
itself and makes what it declares: the project network, and per service of the profiles asked for the
image, entrypoint, command, environment (interpolated from the variables given, `${VAR:-default}` and
`${VAR:?message}` as Compose does), volumes (as Compose v2 makes them: see ``_volumes``), ports, init,
restart policy and network mode, started in `depends_on` order and waited for as each condition says. A key this module does not
translate fails the test, so compose.yaml cannot drift from what is tested. A service's `build` is not
run: its context and Dockerfile must be the ones a prebuilt image (the suite's own) was built from.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from docker.types import Mount

from tests.eventually import eventually

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|\$(?P<bare>\w+)|\$\$")
_TRANSLATED = {
    "build",
    "image",
    "entrypoint",
    "command",
    "environment",
    "volumes",
    "ports",
    "init",
    "restart",
    "network_mode",
    "depends_on",
    "profiles",
}


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """``value`` (a parsed compose document or part of it) with its variables replaced as Compose does."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if isinstance(value, str):
        return _VARIABLE.sub(lambda match: _substitute(match, env), value)
    return value


def _substitute(match: re.Match[str], env: Mapping[str, str]) -> str:
    if match.group(0) == "$$":
        return "$"
    name = match.group("name") or match.group("bare")
    op, arg = match.group("op"), match.group("arg") or ""
    value = env.get(name)
    unset = value is None or (op is not None and op.startswith(":") and value == "")
    if op in ("-", ":-") and unset:
        return arg
    if op in ("?", ":?") and unset:
        raise ValueError(f"compose refuses to start: {arg}")
    return value or ""


@dataclass(frozen=True)
class Build:
    """A prebuilt image standing for a service's ``build``: the context and Dockerfile it was built from."""

    image: str
    context: Path
    dockerfile: Path


@dataclass
class Stack:
    """One project of compose.yaml (plus override services, as a second ``-f`` file would add) on the engine."""

    client: Any
    project: str
    services: dict[str, Any]
    root: Path
    builds: dict[str, Build] = field(default_factory=dict)
    containers: dict[str, Any] = field(default_factory=dict)
    network: Any = None

    @classmethod
    def load(cls, client: Any, compose_file: Path, project: str, env: Mapping[str, str], **kw: Any) -> Stack:
        document = interpolate(yaml.safe_load(compose_file.read_text()), env)
        unknown = set(document) - {"services", "volumes"}
        assert not unknown, f"compose.yaml has top-level keys this test does not make: {unknown}"
        return cls(client, project, document["services"], compose_file.parent, **kw)

    def default_profile(self) -> list[str]:
        """The services ``docker compose up`` starts with no ``--profile``."""
        return [name for name, spec in self.services.items() if not spec.get("profiles")]

    @contextlib.contextmanager
    def up(self, names: list[str]) -> Iterator[Stack]:
        """Start ``names`` in ``depends_on`` order; on leaving, stop and remove them and the network."""
        try:
            self.network = self.client.networks.create(f"{self.project}_default", labels={PROJECT_LABEL: self.project})
            for name in _ordered(self.services, names):
                self._start(name)
            yield self
        finally:
            self.down()

    def down(self) -> None:
        for container in reversed(list(self.containers.values())):
            with contextlib.suppress(Exception):
                container.stop(timeout=10)  # Compose's default grace: the controller removes its sandboxes on SIGTERM
            with contextlib.suppress(Exception):
                container.remove(force=True, v=True)
        if self.network is not None:
            with contextlib.suppress(Exception):
                self.network.remove()

    def _start(self, name: str) -> None:
        spec = self.services[name]
        unknown = set(spec) - _TRANSLATED
        assert not unknown, f"compose.yaml's {name} uses {unknown}, which this test does not make: teach it"
        for needed, condition in _conditions(spec.get("depends_on")).items():
            self._wait(needed, condition)
        image = self._image(name, spec)
        options = _container_options(spec, self.project, name)
        container = self.client.containers.create(image, **options)
        self.containers[name] = container
        if spec.get("network_mode") is None:
            self.network.connect(container, aliases=[name])
        container.start()

    def _image(self, name: str, spec: dict[str, Any]) -> str:
        """The service's image; for a built one, the prebuilt image that stands for the build, tagged as compose tags it."""
        if "build" not in spec:
            return str(spec["image"])
        build, given = spec["build"], self.builds[name]
        assert set(build) <= {"context", "dockerfile"}, f"{name}'s build uses {set(build)}: teach this test"
        context = (self.root / build["context"]).resolve()
        dockerfile = (context / build.get("dockerfile", "Dockerfile")).resolve()
        assert (context, dockerfile) == (given.context.resolve(), given.dockerfile.resolve()), (
            f"compose.yaml builds {name} from {context} with {dockerfile}; the suite's image of it is built from "
            f"{given.context} with {given.dockerfile}"
        )
        if "image" in spec:
            self.client.images.get(given.image).tag(spec["image"])
            return str(spec["image"])
        return given.image

    def _wait(self, name: str, condition: str) -> None:
        container = self.containers[name]
        if condition == "service_completed_successfully":
            status = container.wait(timeout=120)["StatusCode"]
            assert status == 0, f"{name} exited {status}: {container.logs(tail=20)!r}"
        elif condition == "service_healthy":
            eventually(lambda: self.health(name), until=lambda s: s == "healthy", what=f"{name} healthy", timeout=120)
        else:
            assert condition == "service_started", condition

    def health(self, name: str) -> str | None:
        """The engine's health status of the service's container (its image's HEALTHCHECK or the service's)."""
        container = self.containers[name]
        container.reload()
        return container.attrs["State"].get("Health", {}).get("Status")

    def port(self, name: str, container_port: int) -> int:
        container = self.containers[name]
        container.reload()
        return int(container.ports[f"{container_port}/tcp"][0]["HostPort"])


def _ordered(services: dict[str, Any], names: list[str]) -> list[str]:
    """``names`` and what they depend on, each after its dependencies."""
    done: list[str] = []

    def visit(name: str) -> None:
        if name not in done:
            for needed in _conditions(services[name].get("depends_on")):
                visit(needed)
            done.append(name)

    for name in names:
        visit(name)
    return done


def _conditions(depends_on: Any) -> dict[str, str]:
    if depends_on is None:
        return {}
    if isinstance(depends_on, list):
        return {name: "service_started" for name in depends_on}
    return {name: spec.get("condition", "service_started") for name, spec in depends_on.items()}


def _container_options(spec: dict[str, Any], project: str, name: str) -> dict[str, Any]:
    """The engine's create options for what the service declares (besides its image and network)."""
    binds, mounts = _volumes(spec.get("volumes", []))
    options: dict[str, Any] = {
        "name": f"{project}-{name}-1",
        "labels": {PROJECT_LABEL: project, SERVICE_LABEL: name},
        "environment": {key: "" if value is None else str(value) for key, value in spec.get("environment", {}).items()},
        "volumes": binds,
        "mounts": mounts,
        "ports": _ports(spec.get("ports", [])),
        "init": spec.get("init"),
        "entrypoint": spec.get("entrypoint"),
        "command": spec.get("command"),
        "network_mode": spec.get("network_mode"),
    }
    if "restart" in spec:
        options["restart_policy"] = {"Name": spec["restart"]}
    return {key: value for key, value in options.items() if value is not None}


def _volumes(volumes: list[Any]) -> tuple[list[str], list[Mount]]:
    """Binds as Compose v2 makes them (seen with v5.6.1): one with ``create_host_path`` and no other option as a
    legacy bind, whose missing source the engine creates; any other (with propagation, say) through the mount API,
    where a missing source is an error. Short syntax is the long one with ``create_host_path``."""
    binds: list[str] = []
    mounts: list[Mount] = []
    for volume in map(_long_syntax, volumes):
        unknown = set(volume) - {"type", "source", "target", "read_only", "bind"}
        assert volume["type"] == "bind" and not unknown, f"a volume this test does not make: {volume}"
        bind = volume.get("bind", {})
        assert set(bind) <= {"propagation", "create_host_path"}, f"bind options this test does not make: {bind}"
        if set(bind) == {"create_host_path"} and bind["create_host_path"] and not volume.get("read_only"):
            binds.append(f"{volume['source']}:{volume['target']}:rw")
            continue
        mount = Mount(volume["target"], volume["source"], type="bind", read_only=bool(volume.get("read_only")))
        if "propagation" in bind:
            mount["BindOptions"] = {"Propagation": bind["propagation"]}
        mounts.append(mount)
    return binds, mounts


def _long_syntax(volume: str | dict[str, Any]) -> dict[str, Any]:
    """``SOURCE:TARGET[:OPTIONS]`` as the long syntax (an absolute SOURCE: a bind; compose.yaml names no volume)."""
    if isinstance(volume, dict):
        return volume
    source, target, *options = volume.split(":")
    flags = set(options[0].split(",")) if options else set()
    assert source.startswith("/") and flags <= {"ro", "rw", "rslave", "rshared"}, f"a volume to teach: {volume}"
    bind: dict[str, Any] = {"create_host_path": True}
    for propagation in flags - {"ro", "rw"}:
        bind["propagation"] = propagation
    return {"type": "bind", "source": source, "target": target, "read_only": "ro" in flags, "bind": bind}


def _ports(ports: list[str]) -> dict[str, tuple[str, int]] | None:
    """``HOST_IP:HOST_PORT:CONTAINER_PORT`` entries (the only form compose.yaml uses: loopback only)."""
    published: dict[str, tuple[str, int]] = {}
    for entry in ports:
        host_ip, host_port, container_port = str(entry).rsplit(":", 2)
        published[f"{container_port}/tcp"] = (host_ip, int(host_port))
    return published or None


def wait_for_http(url: str, timeout: float = 60) -> None:
    """Until ``url`` answers 200."""
    eventually(
        lambda: httpx.get(url, timeout=2).status_code == 200,
        what=f"{url} answers",
        timeout=timeout,
        interval=0.2,
        ignoring=(httpx.HTTPError,),
    )
