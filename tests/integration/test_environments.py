"""Environment images on the real engine: a repository's Dockerfile plus the toolbox, run as a sandbox.

One image is built per test session (debian:bookworm-slim with python3 and bash, nothing
else: no ripgrep, no git) and shared; the failure tests use images that fail in seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import secrets
import sys
import tarfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError, ImageNotFound, NotFound
from typer.testing import CliRunner

from controller import workspace
from controller.cli import app
from controller.config import DEFAULT_IMAGE, Settings
from controller.environment import load
from controller.environment.build import ROLE, EnvironmentImage, ImageOptions, ensure_image, sweep
from controller.errors import EnvironmentBuildError, ImageMissingError
from controller.sandbox import images, owners
from controller.sandbox.docker import DockerSandbox
from controller.sandbox.sandboxes import Deployment
from controller.wire import protocol
from controller.wire.protocol import CommandResult, ListResult, ReadResult, SearchResult
from tests.sandbox_defaults import AGENT_UID, SANDBOX_LIMITS, TEST_INSTANCE

BASE = "debian:bookworm-slim"
DOCKERFILE = f"""FROM {BASE}
RUN apt-get update && apt-get install -y --no-install-recommends python3 bash \\
 && rm -rf /var/lib/apt/lists/*
COPY tools/ /opt/tools/
"""


def make_repo(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    if os.geteuid() == 0:
        for path in [root, *root.rglob("*")]:
            os.lchown(path, AGENT_UID, AGENT_UID)
    return root


def build(client: Any, repo: Path, lines: list[str] | None = None) -> EnvironmentImage:
    settings = Settings()
    say = lines.append if lines is not None else None
    return ensure_image(
        client, load(repo), repo, ImageOptions(sandbox_image=DEFAULT_IMAGE, ca_bundle=settings.ca_bundle), on_line=say
    )


@pytest.fixture(scope="session")
def env_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(
        tmp_path_factory.mktemp("env") / "repo",
        {
            ".cubicle/environment.toml": 'dockerfile = "docker/Dockerfile"\nsetup = "true"\n',
            "docker/Dockerfile": DOCKERFILE,
            "tools/hello.sh": "echo hello from the image\n",
            "src/app.py": "def total(items):\n    return sum(items)\n",
        },
    )


@pytest.fixture(scope="session")
def env_image(docker_client: Any, env_repo: Path) -> Iterator[EnvironmentImage]:
    built = build(docker_client, env_repo)
    yield built
    with contextlib.suppress(APIError):  # its checkout goes with the test session, and so does the image
        docker_client.images.remove(built.tag)


@pytest.fixture
async def env_box(
    docker_client: Any, env_repo: Path, env_image: EnvironmentImage, tmp_path: Path
) -> AsyncIterator[DockerSandbox]:
    session_id = "test-" + secrets.token_hex(4)
    box = DockerSandbox(
        lambda: docker_client,
        layer=workspace.create(tmp_path / "data", session_id, env_repo),
        session_id=session_id,
        limits=SANDBOX_LIMITS,
        deployment=Deployment(env_image.tag, TEST_INSTANCE),
    )
    await box.start()
    yield box
    await box.stop()


async def run(box: DockerSandbox, command: str) -> CommandResult:
    result = await box.call(protocol.call("run_command", command=command, timeout_s=30), 60)
    assert isinstance(result, CommandResult), result
    return result


async def test_the_toolbox_runs_in_the_environment_image(env_box: DockerSandbox, env_image: EnvironmentImage) -> None:
    assert env_image.tag.startswith("cubicle-env:") and not env_image.default
    listing = await env_box.call(protocol.call("list_files"), 30)
    assert isinstance(listing, ListResult) and "src/app.py" in {e.path for e in listing.entries}
    read = await env_box.call(protocol.call("read_file", path="src/app.py"), 30)
    assert isinstance(read, ReadResult) and "return sum(items)" in read.content
    found = await env_box.call(protocol.call("search", pattern=r"sum\(", glob="*.py"), 30)
    assert isinstance(found, SearchResult), found
    assert found.matches.text == "src/app.py:2:    return sum(items)\n" and found.exit_code == 0
    result = await run(
        env_box, "id -u; command -v rg || echo no-rg; bash /opt/tools/hello.sh; readlink /opt/cubicle/bin/python3"
    )
    assert result.exit_code == 0, result
    assert result.stdout.text.splitlines() == [str(AGENT_UID), "no-rg", "hello from the image", "/usr/bin/python3.11"]


async def test_the_image_carries_the_hosts_ca_bundle_for_the_usual_clients(env_box: DockerSandbox) -> None:
    bundle = Settings().ca_bundle
    if bundle is None:
        pytest.skip("this machine has no CA bundle")
    result = await run(
        env_box, 'sha256sum < "$SSL_CERT_FILE"; echo "$PIP_CERT $REQUESTS_CA_BUNDLE $NODE_EXTRA_CA_CERTS"'
    )
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()
    assert result.stdout.text.split()[0] == digest
    assert result.stdout.text.split()[2:] == ["/usr/local/share/cubicle/ca-certificates.crt"] * 3


def test_a_cached_image_is_reused_without_building(
    docker_client: Any, env_repo: Path, env_image: EnvironmentImage
) -> None:
    """Nothing built and nothing printed; what a cache hit costs is a benchmark row (bench/environment.py)."""
    lines: list[str] = []
    again = build(docker_client, env_repo, lines)
    assert (again.tag, again.built, again.definition_hash) == (env_image.tag, False, env_image.definition_hash)
    assert lines == []


def test_the_default_environment_is_the_sandbox_image(docker_client: Any, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "plain", {"README.md": "x\n"})
    found = build(docker_client, repo)
    assert (found.tag, found.default, found.built) == (DEFAULT_IMAGE, True, False)


def test_the_image_is_labelled_with_the_definition_and_the_repository(
    docker_client: Any, env_repo: Path, env_image: EnvironmentImage
) -> None:
    labels = docker_client.images.get(env_image.tag).labels
    assert labels[ROLE] == "environment"
    assert labels["org.cubicle.env.definition"] == env_image.definition_hash
    assert labels["org.cubicle.env.repo"] == str(env_repo.resolve())


def leftovers(client: Any, lines: list[str]) -> list[str]:
    """Containers a build's lines name that still exist, and its layers left dangling (untagged, no child).

    A layer the build took from the cache belongs to other images as well and stays.
    """
    text = "\n".join(lines)
    left = []
    for container in re.findall(r"Running in ([0-9a-f]{12})", text):
        with contextlib.suppress(NotFound):
            client.containers.get(container)
            left.append(f"container {container}")
    dangling = {image.id.split(":")[1][:12] for image in client.images.list(filters={"dangling": True})}
    left += [
        f"image {image}" for image in re.findall(r"^ ---> ([0-9a-f]{12})$", text, re.MULTILINE) if image in dangling
    ]
    return left


def test_a_failing_dockerfile_shows_its_last_lines_and_leaves_nothing(docker_client: Any, tmp_path: Path) -> None:
    marker = "marker-" + secrets.token_hex(4)
    repo = make_repo(
        tmp_path / "failing",
        {
            ".devcontainer/devcontainer.json": '{"build": {"dockerfile": "Dockerfile"}}',
            ".devcontainer/Dockerfile": f"FROM {BASE}\nRUN echo step-one > /one\nRUN echo {marker} && exit 3\n",
        },
    )
    lines: list[str] = []
    with pytest.raises(EnvironmentBuildError) as caught:
        build(docker_client, repo, lines)
    message = str(caught.value)
    assert "Building .devcontainer/Dockerfile failed" in message and "non-zero code: 3" in message
    assert marker in message.split("Last lines of the build:")[1]
    assert any("Running in" in line for line in lines)
    assert leftovers(docker_client, lines) == []
    docker_client.images.get(BASE)  # the base image itself is never removed


def test_an_image_without_python3_is_a_clear_error(docker_client: Any, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "nopython", {".cubicle/environment.toml": f'image = "{BASE}"\n'})
    lines: list[str] = []
    with pytest.raises(EnvironmentBuildError) as caught:
        build(docker_client, repo, lines)
    headline = str(caught.value).splitlines()[0]
    assert headline.startswith("The environment image cannot run Cubicle's toolbox: the image has no python3 (3.10")
    assert "toolbox needs it" in headline and "cubicle env build" in str(caught.value)
    assert leftovers(docker_client, lines) == []
    docker_client.images.get(BASE)


@pytest.fixture
def scratch_image(docker_client: Any) -> Iterator[str]:
    """An image with no shell at all (one file on scratch), made locally."""
    tag = f"cubicle-test-scratch:{secrets.token_hex(4)}"
    yield tiny_image(docker_client, tag, "FROM scratch\nCOPY hello /hello\n")
    docker_client.images.remove(tag, force=True)


def tiny_image(client: Any, tag: str, dockerfile: str) -> str:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        for name, text in (("Dockerfile", dockerfile), ("hello", "hi\n")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text.encode()))
    data.seek(0)
    client.images.build(fileobj=data, custom_context=True, tag=tag, rm=True, forcerm=True, pull=False)
    return tag


def test_an_image_without_a_shell_is_a_clear_error(docker_client: Any, tmp_path: Path, scratch_image: str) -> None:
    repo = make_repo(tmp_path / "noshell", {".cubicle/environment.toml": f'image = "{scratch_image}"\n'})
    lines: list[str] = []
    with pytest.raises(
        EnvironmentBuildError, match="has no /bin/sh; Cubicle's toolbox needs /bin/sh, bash and python3"
    ):
        build(docker_client, repo, lines)
    assert leftovers(docker_client, lines) == []


def test_a_base_image_missing_from_the_engine_is_a_clear_error_when_pulls_are_off(
    docker_client: Any, tmp_path: Path
) -> None:
    """With pulls forbidden (CUBICLE_PULL_IMAGES=never) nothing is asked of a registry; pulls themselves are
    tested against a real one in test_image_pull.py."""
    repo = make_repo(tmp_path / "missing", {".cubicle/environment.toml": 'image = "cubicle-test-absent:never"\n'})
    options = ImageOptions(sandbox_image=DEFAULT_IMAGE, pull=False)
    with pytest.raises(ImageMissingError, match="not on this Docker engine, and pulling is off") as caught:
        ensure_image(docker_client, load(repo), repo, options)
    assert "docker pull cubicle-test-absent:never" in str(caught.value)
    assert "CUBICLE_PULL_IMAGES=definitions" in str(caught.value)


def test_gc_keeps_the_newest_image_of_each_repository_and_any_in_use(docker_client: Any) -> None:
    repo_label = f"/test-gc/{secrets.token_hex(4)}"
    tags = []
    for n in range(3):
        tag = f"cubicle-env:test-gc-{secrets.token_hex(4)}"
        labels = f'LABEL {ROLE}=environment org.cubicle.env.repo="{repo_label}" n="{n}"\n'
        tags.append(tiny_image(docker_client, tag, "FROM scratch\nCOPY hello /hello\n" + labels))
        time.sleep(1.1)  # Created has one-second resolution in some engines
    # Someone's own image, built FROM an environment image: it inherits the labels, and is not Cubicle's to remove.
    derived = tiny_image(
        docker_client, f"cubicle-test-derived:{secrets.token_hex(4)}", f"FROM {tags[2]}\nUSER nobody\n"
    )
    user = docker_client.containers.create(tags[0], ["/hello"], labels={"org.cubicle.managed": "test-gc"})
    try:
        assert sweep(docker_client, repo=repo_label) == [], (
            "images made minutes ago stay: a session may be about to run one"
        )
        removed = sweep(docker_client, repo=repo_label, fresh_s=0)
        assert removed == [tags[1]]
        for tag in (tags[0], tags[2], derived):
            docker_client.images.get(tag)
    finally:
        user.remove(force=True)
        for tag in [*tags, derived]:
            with contextlib.suppress(ImageNotFound):
                docker_client.images.remove(tag, force=True)


def test_a_held_image_outlives_every_sweep_until_the_sessions_container_runs_it(docker_client: Any) -> None:
    """Between an environment image's build and the session's container, ``cubicle gc`` (or the server's
    retention sweep) saw the image unused and could remove it, failing the session. A hold is what the engine
    and the sweep respect; once released, the image is the sweep's again. Raced: a sweeper removes the older
    image whenever nothing holds it, while holds are taken on it; every hold that was taken keeps it."""
    repo_label = f"/test-hold/{secrets.token_hex(4)}"
    labels = owners.labels(TEST_INSTANCE, f"s_hold{secrets.token_hex(4)}")
    older, newer = (
        tiny_image(
            docker_client,
            f"cubicle-env:test-hold-{secrets.token_hex(4)}",
            f'FROM scratch\nCOPY hello /hello\nLABEL {ROLE}=environment org.cubicle.env.repo="{repo_label}" n="{n}"\n',
        )
        for n in range(2)
    )
    try:
        images.hold(docker_client, older, labels)
        assert sweep(docker_client, repo=repo_label, fresh_s=0) == [], "the held image is the session's"
        docker_client.containers.create(older, ["/hello"], labels=labels)  # what the session's start does
        images.release(docker_client, f"{owners.SESSION}={labels[owners.SESSION]}")
        owners.remove_session(docker_client, labels[owners.SESSION])
        assert sweep(docker_client, repo=repo_label, fresh_s=0) == [older], "released, it is the sweep's again"

        stop = threading.Event()

        def sweeper() -> None:
            while not stop.is_set():
                sweep(docker_client, repo=repo_label, fresh_s=0)

        tiny_image(  # the older one again, now under a sweeper that removes it whenever it is not held
            docker_client,
            older,
            f'FROM scratch\nCOPY hello /hello\nLABEL {ROLE}=environment org.cubicle.env.repo="{repo_label}" n="0"\n',
        )
        thread = threading.Thread(target=sweeper)
        thread.start()
        held = 0
        try:
            for _ in range(20):
                try:
                    images.hold(docker_client, older, labels)
                except ImageNotFound:  # the sweeper came first: a session builds it again (environments.py)
                    tiny_image(
                        docker_client,
                        older,
                        f'FROM scratch\nCOPY hello /hello\nLABEL {ROLE}=environment org.cubicle.env.repo="{repo_label}" n="0"\n',
                    )
                    continue
                held += 1
                time.sleep(0.05)  # the sweeper runs meanwhile
                docker_client.containers.create(older, ["/hello"], labels=labels)
                owners.remove_session(docker_client, labels[owners.SESSION])
        finally:
            stop.set()
            thread.join()
        assert held > 0
    finally:
        owners.remove_session(docker_client, labels[owners.SESSION])
        for tag in (older, newer):
            with contextlib.suppress(ImageNotFound):
                docker_client.images.remove(tag, force=True)


@pytest.fixture
def err_output(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """What the CLI writes to its error console (made at import, so no capture fixture sees it)."""
    from rich.console import Console

    app_module = sys.modules["controller.cli.app"]
    environment_module = sys.modules["controller.cli.environment"]

    text = io.StringIO()
    console = Console(file=text, width=200)
    monkeypatch.setattr(app_module, "err_console", console)
    monkeypatch.setattr(environment_module, "err_console", console)
    return text


def test_cli_env_build_prints_the_tag(
    env_repo: Path, env_image: EnvironmentImage, docker_client: Any, err_output: io.StringIO
) -> None:
    result = CliRunner().invoke(app, ["env", "build", str(env_repo)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [env_image.tag]
    assert "ready: reused" in err_output.getvalue()


def test_cli_env_build_of_a_failing_dockerfile_exits_4(
    tmp_path: Path, docker_client: Any, err_output: io.StringIO
) -> None:
    repo = make_repo(
        tmp_path / "bad",
        {".cubicle/environment.toml": 'dockerfile = "Dockerfile"\n', "Dockerfile": f"FROM {BASE}\nRUN exit 7\n"},
    )
    result = CliRunner().invoke(app, ["env", "build", str(repo)])
    assert result.exit_code == 4 and "non-zero code: 7" in err_output.getvalue()


def read_in_image(client: Any, tag: str, path: str) -> str:
    output = client.containers.run(tag, ["cat", path], entrypoint=[], remove=True, network_mode="none")
    return bytes(output).decode()


def test_a_multi_stage_dockerfile_with_target_and_build_args(docker_client: Any, tmp_path: Path) -> None:
    """The CA reaches every stage, the target's stage is the base, and the build arguments arrive."""
    stages = DOCKERFILE.replace(f"FROM {BASE}", f"FROM {BASE} AS base").replace("COPY tools/ /opt/tools/\n", "")
    repo = make_repo(
        tmp_path / "stages",
        {
            ".cubicle/environment.toml": 'dockerfile = "Dockerfile"\ntarget = "dev"\nbuild_args = { GREETING = "hi" }\n',
            "Dockerfile": stages
            + 'FROM base AS dev\nARG GREETING=none\nRUN test -s "$SSL_CERT_FILE" && echo "$GREETING" > /greeting\n'
            "FROM base AS later\nRUN false\n",
        },
    )
    built = build(docker_client, repo)
    try:
        assert read_in_image(docker_client, built.tag, "/greeting") == "hi\n"
    finally:
        docker_client.images.remove(built.tag)


def test_an_image_that_sets_another_user_still_gets_the_toolbox(
    docker_client: Any, tmp_path: Path, env_image: EnvironmentImage
) -> None:
    base = f"cubicle-test-user:{secrets.token_hex(4)}"
    tiny_image(docker_client, base, f"FROM {env_image.tag}\nUSER nobody\nCOPY hello /hello\n")
    repo = make_repo(tmp_path / "user", {".cubicle/environment.toml": f'image = "{base}"\n'})
    try:
        built = build(docker_client, repo)
        assert read_in_image(docker_client, built.tag, "/hello") == "hi\n"
        docker_client.images.remove(built.tag)
    finally:
        docker_client.images.remove(base)


def test_a_hold_on_an_image_that_declares_a_volume_makes_no_volume(docker_client: Any) -> None:
    """A hold is created, never started; an image's VOLUME would still get an anonymous volume on the host's disk
    for it (seen by a test beside it as a volume left behind), so the hold mounts a tmpfs there instead."""
    tag = tiny_image(
        docker_client,
        f"cubicle-env:test-hold-volume-{secrets.token_hex(4)}",
        "FROM scratch\nCOPY hello /hello\nVOLUME /data\n",
    )
    labels = owners.labels(TEST_INSTANCE, f"s_holdvol{secrets.token_hex(4)}")
    try:
        images.hold(docker_client, tag, labels)
        (held,) = docker_client.containers.list(
            all=True, filters={"label": f"{owners.SESSION}={labels[owners.SESSION]}"}
        )
        assert [m["Type"] for m in held.attrs["Mounts"]] == [], held.attrs["Mounts"]
    finally:
        images.release(docker_client, f"{owners.SESSION}={labels[owners.SESSION]}")
        docker_client.images.remove(tag, force=True)
