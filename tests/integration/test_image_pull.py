"""Images a definition names are pulled when the engine lacks them, from a real registry on loopback.

The registry is Debian's ``docker-registry`` (the distribution project's registry), run here as a subprocess on
127.0.0.1 with a storage directory of its own; the engine treats 127.0.0.0/8 registries as insecure, so it
speaks plain HTTP. An image made here (the sandbox image and a marker file) is pushed to it and removed from
the engine; each session then names it, by tag or by digest, and the agent's command reads the marker. With
pulls forbidden, or an image the registry lacks, or a registry that does not answer, the session ends before the
model is asked, with an error naming the image and its registry, and no image is left behind.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound

from controller.config import DEFAULT_IMAGE
from controller.environment.build import REPO, ROLE
from controller.environment.files import real_root
from controller.environment.pull import pull
from controller.errors import ImagePullError
from tests.integration.cli_helpers import cubicle
from tests.integration.controllers_helpers import stop
from tests.integration.pty_helpers import owned_by, scenario_file
from tests.sandbox_defaults import TEST_INSTANCE

pytestmark = pytest.mark.integration
INSTANCE = f"{TEST_INSTANCE}-pull"  # the xdist worker is part of it: a worker sees only its own containers
NAME = "cubicle-test-pull"
MARKER = "/opt/cubicle-pull-marker"
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Asks the registry directly, whatever proxy this process's environment names."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A registry on 127.0.0.1:<free port>, storing under a temporary directory; its address."""
    binary = shutil.which("docker-registry")
    if binary is None:
        message = "Debian's docker-registry is needed (apt-get install docker-registry)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = tmp_path_factory.mktemp("registry")
    address = f"127.0.0.1:{_free_port()}"
    config = root / "config.yml"
    config.write_text(
        f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"  delete:\n    enabled: true\nhttp:\n  addr: {address}\n"
    )
    with open(root / "log", "wb") as log:
        process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for(address, process, root / "log")
        yield address
    finally:
        stop(process)


def _wait_for(address: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60  # a bound against a hang, not a speed
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"docker-registry exited with {process.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), _direct.open(f"http://{address}/v2/", timeout=5) as answer:
            if answer.status == 200:
                return
        time.sleep(0.2)
    pytest.fail(f"docker-registry did not answer on {address}: {log.read_text()[-2000:]}")


@dataclass(frozen=True)
class Pushed:
    """An image in the registry and not on the engine: its reference by tag, by digest, and its marker's text."""

    by_tag: str
    by_digest: str
    marker: str


@pytest.fixture(scope="module")
def pushed(docker_client: Any, registry: str) -> Iterator[Pushed]:
    marker = f"pulled-{secrets.token_hex(8)}"
    repository = f"{registry}/{NAME}"
    tag = secrets.token_hex(4)
    local = _marked_image(docker_client, f"{repository}:{tag}", marker)
    made = [local]
    try:
        said = [json.loads(line) for line in docker_client.images.push(repository, tag=tag).splitlines() if line]
        errors = [chunk["error"] for chunk in said if "error" in chunk]
        assert not errors, errors
        digests = docker_client.images.get(local).attrs["RepoDigests"]
        digest = next(d for d in digests if d.startswith(repository + "@")).rpartition("@")[2]
        made.append(f"{repository}@{digest}")
        image_id = docker_client.images.get(local).id
        docker_client.images.remove(image_id, force=True)  # every tag and digest of it: the engine lacks it now
        yield Pushed(f"{repository}:{tag}", f"{repository}@{digest}", marker)
    finally:
        for reference in made:  # a test that failed may have left it pulled, by tag or by digest only
            _forget(docker_client, reference)


def _marked_image(client: Any, tag: str, marker: str) -> str:
    """The sandbox image with the marker file added, built locally as ``tag``."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        for name, text in (("Dockerfile", f"FROM {DEFAULT_IMAGE}\nCOPY marker {MARKER}\n"), ("marker", marker + "\n")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text.encode()))
    data.seek(0)
    client.images.build(fileobj=data, custom_context=True, tag=tag, rm=True, forcerm=True, pull=False)
    return tag


def _forget(client: Any, reference: str) -> None:
    """Remove the image ``reference`` names (with its other tags and digests), when the engine has it."""
    with contextlib.suppress(ImageNotFound):
        client.images.remove(client.images.get(reference).id, force=True)


@pytest.fixture
def cleanup(docker_client: Any) -> Iterator[Callable[[Path, str], None]]:
    """Registers a repository and the image its definition names; afterwards removes the environment images built
    for the repository and the pulled image, so the next test finds it missing again."""
    made: list[tuple[Path, str]] = []
    yield lambda repo, image: made.append((repo, image))
    for repo, image in made:
        root = str(real_root(repo))
        for env_image in docker_client.images.list(filters={"label": [f"{ROLE}=environment", f"{REPO}={root}"]}):
            docker_client.images.remove(env_image.id, force=True)
        _forget(docker_client, image)


SCENARIO = {
    "name": "read-marker",
    "turns": [
        {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": f"cat {MARKER}"}}]},
        {"content": [{"type": "text", "text": "done"}]},
    ],
}


def _run(repo: Path, tmp_path: Path, env: dict[str, str] | None = None) -> tuple[int, list[dict[str, Any]], str]:
    settings = {"CUBICLE_DATA_DIR": str(tmp_path / "data"), "CUBICLE_INSTANCE": INSTANCE, **(env or {})}
    done = cubicle(
        "run",
        str(repo),
        "read the marker",
        "--json",
        "--no-apply",
        "--scenario",
        scenario_file(tmp_path, SCENARIO),
        env=settings,
        timeout=600,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr


def _definition(make_repo: Callable[..., Path], kind: str, image: str) -> Path:
    if kind == "environment.toml":
        return make_repo("repo", files={"README.md": "# demo\n", ".cubicle/environment.toml": f'image = "{image}"\n'})
    return make_repo(
        "repo", files={"README.md": "# demo\n", ".devcontainer/devcontainer.json": json.dumps({"image": image})}
    )


@pytest.mark.parametrize(
    ("kind", "by"), [("environment.toml", "tag"), ("devcontainer", "digest"), ("environment.toml", "tag-and-digest")]
)
def test_a_session_pulls_the_image_its_definition_names_and_the_agent_runs_in_it(
    docker_client: Any,
    make_repo: Callable[..., Path],
    tmp_path: Path,
    pushed: Pushed,
    cleanup: Callable[[Path, str], None],
    kind: str,
    by: str,
) -> None:
    image = {
        "tag": pushed.by_tag,
        "digest": pushed.by_digest,
        # A tag beside a digest is ignored, as `docker pull` ignores it: the one pulled is the digest's.
        "tag-and-digest": pushed.by_tag.rpartition(":")[0] + ":not-this-tag@" + pushed.by_digest.rpartition("@")[2],
    }[by]
    repo = _definition(make_repo, kind, image)
    cleanup(repo, pushed.by_digest)
    with pytest.raises(ImageNotFound):
        docker_client.images.get(pushed.by_digest)
    code, events, stderr = _run(repo, tmp_path)
    assert code == 0, stderr[-3000:]
    build = "".join(e["text"] for e in events if e["type"] == "setup_output" and e["phase"] == "build")
    registry = image.split("/")[0]
    assert f"pulling {image} from {registry}" in build and f"pulled {image}" in build, build[-2000:]
    agent = next(e for e in events if e["type"] == "tool_result")["output"]
    assert pushed.marker in agent
    pulled = docker_client.images.get(pushed.by_digest)  # by digest or by tag, the image pushed
    assert pushed.by_digest in pulled.attrs["RepoDigests"]
    assert pulled.tags == ([pushed.by_tag] if by == "tag" else [])  # a digest's pull tags nothing
    code, events, stderr = _run(repo, tmp_path)
    assert code == 0, stderr[-3000:]
    again = "".join(e["text"] for e in events if e["type"] == "setup_output" and e["phase"] == "build")
    assert "pulling" not in again, again[-2000:]  # the next session finds it, however the definition wrote it
    assert owned_by(docker_client, INSTANCE) == []


def test_a_missing_image_is_refused_when_pulls_are_forbidden(
    docker_client: Any, make_repo: Callable[..., Path], tmp_path: Path, pushed: Pushed
) -> None:
    repo = _definition(make_repo, "environment.toml", pushed.by_tag)
    code, events, stderr = _run(repo, tmp_path, {"CUBICLE_PULL_IMAGES": "never"})
    assert code == 4, stderr[-3000:]
    error = next(e for e in events if e["type"] == "error")
    assert error["kind"] == "setup", error
    assert f"The image {pushed.by_tag!r}" in error["message"] and "CUBICLE_PULL_IMAGES=never" in error["message"]
    assert f"docker pull {pushed.by_tag}" in error["message"]  # what to do
    assert not [e for e in events if e["type"] in ("tool_call", "usage")]
    with pytest.raises(ImageNotFound):
        docker_client.images.get(pushed.by_tag)


@pytest.mark.parametrize("case", ["unknown-tag", "unknown-digest", "unreachable-registry"])
def test_a_pull_that_fails_names_the_image_and_registry_and_leaves_nothing(
    docker_client: Any, make_repo: Callable[..., Path], tmp_path: Path, registry: str, case: str
) -> None:
    image, said = {
        "unknown-tag": (f"{registry}/{NAME}:absent-{secrets.token_hex(4)}", "manifest unknown"),
        "unknown-digest": (f"{registry}/{NAME}@sha256:{'0' * 64}", "manifest unknown"),
        "unreachable-registry": (f"127.0.0.1:{_free_port()}/{NAME}:any", "connection refused"),
    }[case]
    registry_named = image.split("/")[0]
    repo = _definition(make_repo, "environment.toml", image)
    code, events, stderr = _run(repo, tmp_path)
    assert code == 4, stderr[-3000:]
    error = next(e for e in events if e["type"] == "error")
    message = error["message"]
    assert error["kind"] == "setup" and f"Pulling the image {image!r} from {registry_named} failed" in message, error
    assert said in message.lower(), message
    assert not [e for e in events if e["type"] in ("tool_call", "usage")]
    with pytest.raises(ImageNotFound):
        docker_client.images.get(image)
    assert owned_by(docker_client, INSTANCE) == []


def test_a_pull_past_its_time_is_stopped_and_leaves_nothing(docker_client: Any, pushed: Pushed) -> None:
    lines: list[str] = []
    with pytest.raises(ImagePullError, match="took longer than 0 s") as caught:
        pull(docker_client, pushed.by_tag, timeout_s=0, on_line=lines.append)
    assert str(caught.value).startswith(f"Pulling the image {pushed.by_tag!r} from {pushed.by_tag.split('/')[0]}")
    assert lines[0] == f"pulling {pushed.by_tag} from {pushed.by_tag.split('/')[0]}"
    time.sleep(5)  # a pull the engine went on with would have tagged the image by now
    with pytest.raises(ImageNotFound):
        docker_client.images.get(pushed.by_tag)
