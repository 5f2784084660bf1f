"""Environment images: the environment's base (a local image, or the repository's Dockerfile) plus the toolbox.

``ensure_image`` returns the tag a sandbox runs. The default environment uses the sandbox
image as it is. Any other is built once and tagged ``cubicle-env:<key>``, where the key
hashes what the image is made of: the Dockerfile and its build context (or the base image's
id), the build arguments and target, the toolbox's sources and the CA bundle, and the
checkout's path or the remote's URL (so ``cubicle gc`` can keep the newest image of each; see
``cachekeys``: a new commit of a remote whose build is unchanged reuses the image). A tag that
exists is reused without building (an image inspect and the context's hash: milliseconds
for a small context). Setup, env and network are not part of the key: changing them does not
rebuild the image (the definition hash, which covers everything, is a label and is returned).

The image an environment names (``image``) is pulled when the engine lacks it, unless ``pull`` is off (see
``pull``); Cubicle's own sandbox image is built, never pulled, and builds never pull (a Dockerfile's ``FROM``
must exist on the engine). The repository's Dockerfile is sent with its context as a tar Cubicle packs itself (see
``buildcontext``), with the CA lines inserted after each FROM (see ``dockerfile``); then the
toolbox layer is built on the result. Both stream progress lines to ``on_line``; a failure
raises ``EnvironmentBuildError`` with the build's last lines and removes what it left
(intermediate containers always, ``forcerm``; the failed build's untagged layers too). A
build runs with the engine's ordinary build isolation, not the sandbox's hardening (as
``docker build`` would), bounded in memory and time.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import os
import re
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from ..errors import ConfigError, EnvironmentBuildError, ImageMissingError
from ..sandbox import images
from ..wire.envspec import Environment
from . import buildcontext, cachekeys, dockerfile
from . import pull as pull_image
from .definition import Materials, definition_hash, materials
from .files import real_root

TAG_PREFIX = "cubicle-env"
CA_TAG_PREFIX = "cubicle-ca"
ROLE = "org.cubicle.role"
DEFINITION = "org.cubicle.env.definition"
KEY = "org.cubicle.env.key"
REPO = "org.cubicle.env.repo"
SOURCE = "org.cubicle.env.source"
LAYER_FORMAT = "1"
"""Part of every key: change it when the layer changes in a way its sources do not show."""
FRESH_S = 600.0
"""``sweep`` leaves an image made this recently: another process may be about to run it."""
BUILD_TIMEOUT_S = 3600
BUILD_MEMORY = 4 << 30
MAX_CA_BYTES = 8 << 20
TAIL_LINES = 20
REPO_DOCKERFILE = ".dockerfile.cubicle"
"""The name the rewritten Dockerfile gets in the context tar; listed in .dockerignore, so the engine drops it."""
_LAYER_ID = re.compile(r"^ ---> ([0-9a-f]{12,64})$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""The engine colours a RUN step's stderr; the colour codes are dropped from every line."""

OnLine = Callable[[str], None]


@dataclass(frozen=True)
class EnvironmentImage:
    """What a session runs: ``tag`` (give it to ``sandbox.Deployment(image=...)``)."""

    tag: str
    definition_hash: str
    built: bool
    """True when this call built it; False for a reused tag and for the default environment."""
    default: bool
    """True when the environment is the default one: ``tag`` is the sandbox image itself."""


@dataclass(frozen=True)
class ImageOptions:
    """How ``ensure_image`` finds or makes an image.

    ``sandbox_image`` is the default environment's image, and the toolbox layer copies its init and shims from
    it; it is built when missing if ``auto_build_sandbox``. ``ca_bundle`` goes into every image built. With
    ``build`` False a missing image is an error instead of a build. The repository's Dockerfile and the toolbox
    layer each stop after ``timeout_s``; the Dockerfile builds on ``network_mode``, with ``proxy``'s variables as
    build arguments (see ``ensure_image``). With ``pull`` the environment's ``image`` is pulled when missing
    (bounded by ``pull_timeout_s``); without it, a missing one is an error saying how to allow it.
    """

    sandbox_image: str
    ca_bundle: Path | None = None
    build: bool = True
    auto_build_sandbox: bool = True
    timeout_s: float = BUILD_TIMEOUT_S
    network_mode: str = "bridge"
    proxy: dict[str, str] = field(default_factory=dict)
    pull: bool = True
    pull_timeout_s: float = pull_image.PULL_TIMEOUT_S


def ensure_image(
    client: Any,
    env: Environment,
    repo: Path,
    options: ImageOptions,
    on_line: OnLine | None = None,
    url: str | None = None,
) -> EnvironmentImage:
    """The image ``env`` runs in, built if it is missing (or ``ImageMissingError`` when ``build`` is False); blocking.

    ``url``: the remote ``repo`` is a commit's tree of (the record's ``source.url``); the image is then kept per
    URL rather than per tree (``cachekeys.image_scope``).

    The repository's Dockerfile builds on ``network_mode`` with ``proxy``'s variables as build
    arguments (Docker passes the ``*_PROXY`` ones to every ``RUN`` without an ``ARG``): sessions
    and ``cubicle env build`` give it the setup's network (``environments.Environments.build``).
    The toolbox layer and the CA image build with no network.

    Raises ``DefinitionError`` (a path out of the repository, a context too large),
    ``ImageMissingError`` (the base image is not on the engine), ``EnvironmentBuildError``,
    ``ConfigError`` (an unreadable CA bundle) and ``SandboxError`` for the engine's failures.
    """
    if not builds(env, options.ca_bundle):
        images.ensure(client, options.sandbox_image, options.auto_build_sandbox, on_line)
        return EnvironmentImage(options.sandbox_image, definition_hash(env, repo), built=False, default=True)
    recipe = _recipe(client, env, repo, options, on_line, url)
    if _exists(client, recipe.tag):
        return recipe.image(built=False)
    if not options.build:
        raise ImageMissingError(
            f"The environment image of {repo} ({env.source}) is not built yet.", hint="Run `cubicle env build`."
        )
    with _building(recipe.key):
        if _exists(client, recipe.tag):  # another thread built it while this one waited
            return recipe.image(built=False)
        _make(client, recipe, options, on_line)
    return recipe.image(built=True)


def builds(env: Environment, ca_bundle: Path | None) -> bool:
    """Whether ``env`` runs in an image of its own: it names an image, a Dockerfile or packages, or it has a setup
    and this machine a CA bundle. The sandbox image holds Debian's CAs only; a setup that reaches a registry
    through a TLS-intercepting proxy needs the machine's, as a build does, so it runs in the sandbox image with
    the toolbox layer (and the CA) added again: built once per checkout, in seconds."""
    return env.builds or bool(env.setup and ca_bundle)


@dataclass(frozen=True)
class _Recipe:
    """What an environment's image is made of, read from the checkout, and the key and tag that follow from it."""

    env: Environment
    repo: Path
    found: Materials
    ca: _Ca | None
    base_id: str
    """The local base image's id; empty when the repository's Dockerfile is the base (built in ``_make``)."""
    scope: str
    """What the image is kept per: the checkout's real path or the remote's URL (``cachekeys.image_scope``)."""
    key: str

    @property
    def tag(self) -> str:
        return f"{TAG_PREFIX}:{self.key[:16]}"

    def labels(self) -> dict[str, str]:
        """What the image says about itself: ``sweep`` and ``cubicle gc`` find it by them."""
        return {
            ROLE: "environment",
            DEFINITION: self.found.definition_hash,
            KEY: self.key,
            REPO: self.scope,
            SOURCE: self.env.source,
        }

    def image(self, built: bool) -> EnvironmentImage:
        return EnvironmentImage(self.tag, self.found.definition_hash, built=built, default=False)


def _recipe(
    client: Any, env: Environment, repo: Path, options: ImageOptions, on_line: OnLine | None, url: str | None
) -> _Recipe:
    """Read what ``env``'s image is made of, and key it (a DefinitionError, ConfigError or ImageMissingError first);
    the base image is pulled first when it is missing and ``options`` allow it."""
    found = materials(env, repo)
    ca = _ca(options.ca_bundle)
    base_id = ""
    if env.image:
        base_id = _local_base(client, env, options, on_line)
    elif not env.dockerfile:  # packages on the sandbox image
        base_id = str(images.ensure(client, options.sandbox_image, options.auto_build_sandbox, on_line).id)
    scope = cachekeys.image_scope(real_root(repo), url)
    key = cachekeys.image_key(found.build_hash, layer_digest(), ca.digest if ca else "", base_id, scope)
    return _Recipe(env, repo, found, ca, base_id, scope, key)


# --------------------------------------------------------------------------- the key


@functools.cache
def layer_digest() -> str:
    """The toolbox's sources and the layer's own text: a new Cubicle version gets new images."""
    hasher = hashlib.sha256(f"cubicle-layer-v{LAYER_FORMAT}\0".encode())
    for path in _toolbox_files():
        hasher.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for text in (dockerfile.CHECK, dockerfile.PREPARE_SOURCE, dockerfile.toolbox_layer("BASE", "SANDBOX", "CA")):
        hasher.update(text.encode() + b"\0")
    return hasher.hexdigest()


def _toolbox_files() -> list[Path]:
    context = images.build_context()
    if context is None:
        raise ImageMissingError(
            f"This installation of Cubicle lacks the toolbox's files ({images.CONTEXT}).",
            hint="Reinstall Cubicle (`pip install --force-reinstall cubicle`, or `pip install -e .` in a checkout).",
        )
    return sorted((context / images.TOOLBOX).glob("*.py"))


@dataclass(frozen=True)
class _Ca:
    data: bytes
    digest: str


_ca_cache: dict[tuple[str, int, int, int], _Ca] = {}


def _ca(path: Path | None) -> _Ca | None:
    """The CA bundle's bytes and digest (cached while the file is unchanged); None when there is none."""
    if path is None:
        return None
    try:
        info = os.stat(path)
        cache_key = (str(path), info.st_ino, info.st_size, info.st_mtime_ns)
        if cache_key not in _ca_cache:
            if info.st_size > MAX_CA_BYTES:
                raise ConfigError(f"The CA bundle {path} is larger than {MAX_CA_BYTES >> 20} MiB.")
            data = Path(path).read_bytes()
            _ca_cache[cache_key] = _Ca(data, hashlib.sha256(data).hexdigest())
        return _ca_cache[cache_key]
    except OSError as err:
        raise ConfigError(
            f"The CA bundle {path} cannot be read: {err.strerror}.",
            hint="Point CUBICLE_CA_BUNDLE (or SSL_CERT_FILE) at a PEM file, or set CUBICLE_CA_BUNDLE= for none.",
        ) from None


def _exists(client: Any, tag: str) -> bool:
    try:
        client.images.get(tag)
    except ImageNotFound:
        return False
    except (APIError, DockerException) as err:
        raise EnvironmentBuildError(f"The engine could not look up {tag}: {err}") from None
    return True


def _local_base(client: Any, env: Environment, options: ImageOptions, on_line: OnLine | None) -> str:
    """The id of the environment's base image: the one on the engine, else pulled when ``options`` allow it
    (the sandbox image itself is built instead: Cubicle never pulls its own images)."""
    assert env.image is not None
    found = _local_id(client, env.image)
    if found:
        return found
    if env.image == options.sandbox_image:
        return str(images.ensure(client, env.image, options.auto_build_sandbox, on_line).id)
    if not options.pull:
        raise ImageMissingError(
            f"The image {env.image!r} that {env.source} names is not on this Docker engine, and pulling is off "
            "(CUBICLE_PULL_IMAGES=never).",
            hint=f"Pull it (`docker pull {env.image}`) or build it (`docker build -t {env.image} ...`) first, "
            "set CUBICLE_PULL_IMAGES=definitions, or name a Dockerfile instead.",
        )
    return str(pull_image.pull(client, env.image, options.pull_timeout_s, on_line).id)


def _local_id(client: Any, image: str) -> str:
    """The id of ``image`` on the engine, asked as it is pulled (a digest wins over a tag beside it) and then as
    written (an image id); empty when the engine has neither."""
    for name in dict.fromkeys((pull_image.parse(image).pinned, image)):
        try:
            return str(client.images.get(name).id)
        except ImageNotFound:
            continue
        except (APIError, DockerException) as err:
            raise EnvironmentBuildError(f"The engine could not look up {image!r}: {err}") from None
    return ""


_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


@contextlib.contextmanager
def _building(key: str) -> Iterator[None]:
    """One build per key at a time in this process; others wait and then reuse it."""
    with _locks_guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        yield


# --------------------------------------------------------------------------- building


def _ensure_ca(client: Any, ca: _Ca, say: OnLine) -> str:
    """The one-file image holding the CA bundle, which builds copy from (never part of a repository's context)."""
    tag = f"{CA_TAG_PREFIX}:{ca.digest[:16]}"
    if _exists(client, tag):
        return tag
    with _archive() as (fileobj, archive):
        buildcontext.add_bytes(archive, "Dockerfile", dockerfile.CA_DOCKERFILE.encode())
        buildcontext.add_bytes(archive, "ca-certificates.crt", ca.data)
        archive.close()
        fileobj.seek(0)
        _stream(client, fileobj, _Build("the CA bundle's image", 300, tag=tag, labels={ROLE: "ca-bundle"}), say)
    return tag


def _make(client: Any, recipe: _Recipe, options: ImageOptions, on_line: OnLine | None) -> None:
    """Build the image ``recipe`` names: the sandbox and CA images it copies from when missing, the repository's
    Dockerfile when it has one, then the toolbox layer on the base (a failed layer takes the built base with it)."""
    say = on_line or (lambda line: None)
    images.ensure(client, options.sandbox_image, options.auto_build_sandbox, on_line)
    ca_tag = _ensure_ca(client, recipe.ca, say) if recipe.ca else None
    made: list[str] = []  # the untagged images built here, removed again when a later step fails
    try:
        base_id = recipe.base_id
        if recipe.env.dockerfile:
            base_id = _build_base(client, recipe, ca_tag, options, say)
            made.append(base_id)
        if recipe.env.packages:
            base_id = _build_packages(client, recipe, base_id, ca_tag, options, say)
            made.append(base_id)
        _build_layer(client, recipe, base_id, ca_tag, options, say)
    except BaseException:
        for image_id in reversed(made):
            _remove_dangling(client, image_id)
        raise


def _build_base(client: Any, recipe: _Recipe, ca_tag: str | None, options: ImageOptions, say: OnLine) -> str:
    """Build the repository's Dockerfile (untagged); its image id."""
    env, found = recipe.env, recipe.found
    assert found.dockerfile is not None and found.context is not None
    text = found.dockerfile
    if ca_tag:
        text = dockerfile.after_each_from(text, dockerfile.ca_lines(ca_tag))
    context = found.context
    say(
        f"{dockerfile.MARK}building {env.dockerfile} (context {env.context}: {len(context.entries)} entries, "
        f"{context.total_bytes / (1 << 20):.1f} MiB)"
    )
    ignore = context.ignore_text + ("\n" if context.ignore_text else "") + REPO_DOCKERFILE + "\n"
    with _archive() as (fileobj, archive):
        packed = buildcontext.pack(
            context, archive, replace={buildcontext.DOCKERIGNORE: ignore.encode(), REPO_DOCKERFILE: text.encode()}
        )
        archive.close()
        if packed != found.context_digest:
            raise EnvironmentBuildError(f"The build context of {recipe.repo} changed while it was packed; try again.")
        fileobj.seek(0)
        run = _Build(
            str(env.dockerfile),
            options.timeout_s,
            dockerfile=REPO_DOCKERFILE,
            buildargs={**env.build_args, **options.proxy},
            target=env.target,
            network_mode=options.network_mode,
        )
        return _stream(client, fileobj, run, say)


def _build_packages(
    client: Any, recipe: _Recipe, base_id: str, ca_tag: str | None, options: ImageOptions, say: OnLine
) -> str:
    """Install the environment's Debian packages on ``base_id`` (untagged), with the setup's network like a
    Dockerfile; its image id."""
    packages = recipe.env.packages
    say(f"{dockerfile.MARK}installing {len(packages)} Debian package(s): {' '.join(packages)}")
    with _archive() as (fileobj, archive):
        text = dockerfile.packages_layer(base_id, packages, ca_tag)
        buildcontext.add_bytes(archive, "Dockerfile", text.encode())
        archive.close()
        fileobj.seek(0)
        run = _Build(
            "the Debian packages", options.timeout_s, buildargs=dict(options.proxy), network_mode=options.network_mode
        )
        return _stream(client, fileobj, run, say)


def _build_layer(
    client: Any, recipe: _Recipe, base_id: str, ca_tag: str | None, options: ImageOptions, say: OnLine
) -> None:
    built = "the built image" if recipe.env.dockerfile or recipe.env.packages else "the sandbox image"
    say(f"{dockerfile.MARK}adding the toolbox to {recipe.env.image or built}")
    with _archive() as (fileobj, archive):
        text = dockerfile.toolbox_layer(base_id, options.sandbox_image, ca_tag, recipe.labels())
        buildcontext.add_bytes(archive, "Dockerfile", text.encode())
        for path in _toolbox_files():
            buildcontext.add_bytes(archive, f"toolbox/{path.name}", path.read_bytes())
        buildcontext.add_bytes(archive, "prepare.py", dockerfile.PREPARE_SOURCE.encode())
        archive.close()
        fileobj.seek(0)
        _stream(client, fileobj, _Build("the toolbox layer", options.timeout_s, tag=recipe.tag), say)


@contextlib.contextmanager
def _archive() -> Iterator[tuple[IO[bytes], tarfile.TarFile]]:
    with tempfile.SpooledTemporaryFile(max_size=32 << 20) as fileobj:
        yield fileobj, buildcontext.open_archive(fileobj)


@dataclass(frozen=True)
class _Build:
    """One build for ``_stream``: ``what`` names it in errors; the rest is what the engine is asked for."""

    what: str
    timeout_s: float
    dockerfile: str = "Dockerfile"
    tag: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    buildargs: dict[str, str] = field(default_factory=dict)
    target: str | None = None
    network_mode: str = "none"


@dataclass
class _Progress:
    """What a build's stream has said so far: its last lines, the last layer made, the image, the first error."""

    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    last_layer: str = ""
    image_id: str = ""
    failure: str = ""

    def take(self, chunk: dict[str, Any], say: OnLine) -> bool:
        """Note one chunk of the stream, relaying its lines; False for an error (the first one is kept)."""
        if "error" in chunk:
            self.failure = self.failure or str(chunk.get("error") or "").strip()
            return False
        lines = _ANSI.sub("", str(chunk.get("stream") or "")).splitlines()
        for line in filter(None, map(str.rstrip, lines)):  # blank ones left out
            self.tail.append(line)
            say(line)
            layer = _LAYER_ID.match(line)
            if layer:
                self.last_layer = layer.group(1)
        self.image_id = str((chunk.get("aux") or {}).get("ID") or self.image_id)
        return True


def _stream(client: Any, fileobj: IO[bytes], run: _Build, say: OnLine) -> str:
    """Run one build, relaying its lines; its image id, or EnvironmentBuildError with its last lines."""
    progress = _Progress()
    deadline = time.monotonic() + run.timeout_s
    try:
        chunks = _start(client, fileobj, run)
        for chunk in chunks:  # read to the end even after an error: the engine then closes the stream
            if progress.take(chunk, say) and time.monotonic() > deadline:
                progress.failure = f"the build took longer than {run.timeout_s:.0f} s"
                chunks.close()  # the engine cancels a build whose client has gone
                break
    except (APIError, DockerException, OSError) as err:  # OSError covers the read timeout
        progress.failure = str(err).strip() or type(err).__name__
    if not progress.failure and not progress.image_id:
        progress.failure = "the engine reported no image"
    if progress.failure:
        if progress.last_layer:
            _remove_dangling(client, progress.last_layer)
        raise _failed(run.what, progress.failure, list(progress.tail))
    return progress.image_id


def _start(client: Any, fileobj: IO[bytes], run: _Build) -> Any:
    """Ask the engine for the build, its progress decoded: no pull, intermediate containers removed even when it
    fails, bounded in memory and in time."""
    return client.api.build(
        fileobj=fileobj,
        custom_context=True,
        dockerfile=run.dockerfile,
        tag=run.tag,
        labels=run.labels,
        buildargs=run.buildargs,
        target=run.target,
        rm=True,
        forcerm=True,
        pull=False,
        network_mode=run.network_mode,
        decode=True,
        timeout=run.timeout_s,
        container_limits={"memory": BUILD_MEMORY, "memswap": BUILD_MEMORY},
    )


def _failed(what: str, failure: str, tail: list[str]) -> EnvironmentBuildError:
    """The error a person reads: the toolbox check's own line when it failed, else the build's error; then the tail."""
    ours = [line[len(dockerfile.MARK) :] for line in tail if line.startswith(dockerfile.MARK) and "ready" not in line]
    if ours:
        headline = f"The environment image cannot run Cubicle's toolbox: {ours[-1]}"
    elif "/bin/sh" in failure and ("no such file" in failure or "not found" in failure):
        headline = "The environment image has no /bin/sh; Cubicle's toolbox needs /bin/sh, bash and python3 (3.10+)."
    else:
        headline = f"Building {what} failed: {failure}"
    lines = "\n".join(f"  {line}" for line in tail)
    return EnvironmentBuildError(f"{headline}\nLast lines of the build:\n{lines}" if lines else headline)


def _remove_dangling(client: Any, image_id: str) -> None:
    """Remove a failed build's last layer and, with it, its untagged parents; a tagged or used image stays."""
    try:
        image = client.images.get(image_id)
        if image.tags:
            return
        client.images.remove(image.id, force=False, noprune=False)
    except (NotFound, APIError, DockerException):  # gone, or still someone's parent: leave it
        pass


# --------------------------------------------------------------------------- gc


def sweep(client: Any, keep: int = 1, repo: str | None = None, fresh_s: float = FRESH_S) -> list[str]:
    """Remove environment images no container uses, keeping the newest ``keep`` per repository (a checkout's path,
    a remote's URL: ``cachekeys.image_scope``); blocking.

    Returns the tags removed. An image a container (running or not) was made from stays, and so does one
    made in the last ``fresh_s`` seconds (a build whose session has not held it yet: see ``images.hold``).
    ``repo`` limits the sweep to the images labelled with that path or URL. Only images Cubicle tagged
    (``cubicle-env:<key>``) are candidates: an image someone built FROM one inherits its labels, and is theirs.
    """
    wanted = [f"{ROLE}=environment", *([f"{REPO}={repo}"] if repo is not None else [])]
    listed = client.images.list(filters={"label": wanted})
    used = {c.attrs.get("ImageID", "") for c in client.containers.list(all=True, sparse=True)}
    by_repo: dict[str, list[Any]] = {}
    for image in listed:
        if _our_tags(image):
            by_repo.setdefault(image.labels.get(REPO, ""), []).append(image)  # docker-py's labels: {} when none
    removed: list[str] = []
    for group in by_repo.values():
        group.sort(key=lambda image: str(image.attrs.get("Created", "")), reverse=True)
        for image in group[keep:]:
            if image.id not in used and _age_s(image) >= fresh_s:
                removed += _untag(client, image)
    return removed


def _our_tags(image: Any) -> list[str]:
    """The image's tags that Cubicle gave it (``cubicle-env:<key>``)."""
    return [tag for tag in image.tags or () if tag.startswith(TAG_PREFIX + ":")]


def _untag(client: Any, image: Any) -> list[str]:
    """Remove Cubicle's tags of ``image`` (the image goes with its last tag); returns those removed."""
    removed: list[str] = []
    for tag in _our_tags(image):
        try:
            client.images.remove(tag, force=False, noprune=False)
            removed.append(tag)
        except (NotFound, APIError):  # in use by a container made since, or already gone
            pass
    return removed


def _age_s(image: Any) -> float:
    """Seconds since the engine made ``image`` (0 when its time cannot be read: then it counts as fresh)."""
    try:
        created = datetime.fromisoformat(str(image.attrs.get("Created", "")))
    except ValueError:
        return 0.0
    return max(0.0, time.time() - created.timestamp())
