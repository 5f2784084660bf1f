"""Shared fixtures. Integration fixtures need a Docker engine and the sandbox image."""

from __future__ import annotations

import os
import tempfile

# testcontainers' reaper image cannot be pulled offline; our fixtures clean up by label instead.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
# The host's pids ledger of this test process alone (each xdist worker its own, not its parent's): test runs of
# other checkouts and workers beside it would otherwise share the host's budget with it, and a test of a small
# budget would count their sandboxes. The `cubicle` processes a test starts share the test's.
os.environ["CUBICLE_HOST_PIDS_LEDGER"] = tempfile.mkdtemp(prefix="cubicle-pids-")
import gc
import hashlib
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound

from controller import workspace
from controller.config import Settings
from controller.sandbox import engine, images, owners
from controller.sandbox.docker import DockerSandbox
from controller.sandbox.sandboxes import Deployment
from controller.wire.limits import Limits
from controller.workspace.quota import _loops, _mounts
from tests.databases import postgres_schema
from tests.sandbox_defaults import AGENT_UID, SANDBOX_LIMITS, TEST_INSTANCE

# The image the fixtures' sandboxes run: CUBICLE_IMAGE, as for a user, so a branch can test its own toolbox in an
# image tagged for it (`cubicle image build --tag cubicle-sandbox:mine`) while others use the default one.
SANDBOX_IMAGE = Settings().image

# Fixture projects are data for the tests (a real project an agent works on), not tests of ours.
collect_ignore = ["fixtures"]

# The run_scenario fixture: the real agent loop on a scripted scenario, for any test that names it.
pytest_plugins = ["tests.agent_harness"]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what the imports and the collection made (modules, classes, the tests themselves): the collector
    then passes over it, and ``gc_after_each_test`` costs about a millisecond instead of a tenth of a second."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def gc_after_each_test() -> Iterator[None]:
    """Collect garbage at each test's teardown: an object the test leaked (a database connection, a socket)
    warns from its finalizer now, during the test that leaked it, and the warning fails that test."""
    yield
    gc.collect()


@pytest.fixture(autouse=True)
def host_pids_ledger_of_this_test(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each test its own host pids ledger, and the `cubicle` processes it starts share it: a test process lives for
    the whole run, and the charges of sessions an earlier test admitted in it without closing them (a ``Sessions``
    never started or closed) would stay on the ledger as long as it lives."""
    before = os.environ["CUBICLE_HOST_PIDS_LEDGER"]
    os.environ["CUBICLE_HOST_PIDS_LEDGER"] = str(tmp_path_factory.mktemp("pids-ledger"))
    yield
    os.environ["CUBICLE_HOST_PIDS_LEDGER"] = before


@pytest.fixture(params=["sqlite", "postgres"])
def each_store(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test twice: on the SQLite file in the data dir, and on a fresh PostgreSQL schema.

    Through ``CUBICLE_DATABASE_URL``, as a user chooses the store, so every Settings the test makes takes it.
    """
    if request.param == "sqlite":
        monkeypatch.delenv("CUBICLE_DATABASE_URL", raising=False)
        yield "sqlite"
        return
    with postgres_schema() as url:
        monkeypatch.setenv("CUBICLE_DATABASE_URL", url)
        yield url


ALONE = ("solo", "disruptive")
"""Marks of the tests that a parallel run (``-n``) runs one at a time after the others:
``solo`` ones load the machine on purpose (a fork storm, a flood of a toolbox's stream, a sandbox's
every CPU spinning), which every other worker's tests would feel; ``disruptive`` ones restart the
Docker engine, which would kill every other worker's containers. No test asserts how fast something
answers: that is a benchmark's row (bench/), and a test's deadlines are bounds against hangs."""


def _alone(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(mark) for mark in ALONE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that restart the Docker engine run last, so they cannot disturb the others.

    A worker of a parallel run leaves out the tests that must run alone: the main process
    runs them once every worker is done (``pytest_sessionfinish``).
    """
    if hasattr(config, "workerinput"):
        left_out = [item for item in items if _alone(item)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if not _alone(item)]
        return
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A parallel run hands out the known-long tests first (``tests/scheduling.py``), so none of them starts last."""
    if config.getvalue("dist") != "load":
        return None  # another --dist asked for: xdist's own
    from tests.scheduling import LongFirst

    return LongFirst(config, log)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The main process of a parallel run: run what its workers left out, in one process, one at a time."""
    config = session.config
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED or (config.getoption("maxfail") and exitstatus):
        return  # stopped (Ctrl-C, or -x and a failure): the rest is not wanted
    alone = " or ".join(ALONE)
    marks = config.getoption("markexpr") or ""
    command = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", *config.args]
    command += ["-m", f"({alone}) and ({marks})" if marks else alone]
    command += [f"--ignore={path}" for path in config.getoption("ignore") or []]
    if config.getoption("keyword"):
        command += ["-k", config.getoption("keyword")]
    print(f"\n\n== the tests that run alone ({alone}), one at a time, after the others ==", flush=True)
    code = subprocess.run(command, cwd=config.invocation_params.dir, check=False).returncode
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = code
    elif code == pytest.ExitCode.OK and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


@pytest.fixture(scope="session", autouse=True)
def nothing_left_mounted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After the last test of this process (every other fixture is gone by then): no layer filesystem is still
    mounted, and no loop device attached, under its temporary directories. One left is an error (what it was is
    unmounted, so the next run starts clean)."""
    yield
    base = str(tmp_path_factory.getbasetemp()) + os.sep
    mounts = [str(point) for point, _ in _mounts() if str(point).startswith(base)]
    loops = [(device, backing) for device, backing in _loops() if backing.startswith(base)]
    for point in sorted(mounts, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
    for device, _ in loops:
        subprocess.run(["losetup", "--detach", device], check=False, capture_output=True)
    assert not mounts and not loops, f"left mounted: {mounts}; loop devices left attached: {loops}"


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    client = engine.connect(Settings().docker_host)
    images.ensure(client, SANDBOX_IMAGE, auto_build=True)
    yield client
    # This run's containers and those of dead test processes; another pytest run's stay untouched.
    owners.sweep(client, TEST_INSTANCE, everything=False)
    client.close()


def _chown_tree(root: Path, uid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, uid)


@pytest.fixture
def sentinel(tmp_path: Path) -> str:
    """A random secret planted on the host outside the repository; no result may ever show it."""
    value = "SENTINEL-" + secrets.token_hex(16)
    (tmp_path / "host-secret.txt").write_text(value + "\n")
    return value


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., Path]:
    """Create a git repository owned by ``uid`` (1000 by default, when we are root)."""

    def make(name: str = "repo", uid: int | None = AGENT_UID, files: dict[str, str] | None = None) -> Path:
        repo = tmp_path / name
        (repo / ".git" / "hooks").mkdir(parents=True)
        (repo / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
        (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        for rel, text in (
            files or {"README.md": "# demo\n", "src/app.py": "def total(items):\n    return sum(items)\n"}
        ).items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        if os.geteuid() == 0 and uid is not None:
            _chown_tree(repo, uid)
        return repo

    return make


@pytest.fixture
def sandbox_runtime() -> str:
    """The OCI runtime of the sandboxes ``sandbox_factory`` makes; the security and fault batteries run under each
    of ``TEST_RUNTIMES`` (their conftest files parametrize this)."""
    return "runc"


@pytest.fixture
async def sandbox_factory(
    docker_client: Any, tmp_path: Path, sandbox_runtime: str
) -> AsyncIterator[Callable[..., DockerSandbox]]:
    """Sandboxes as sessions get them: each over a fresh workspace layer of its repository, under
    ``sandbox_runtime`` unless the limits given name another runtime."""
    made: list[DockerSandbox] = []

    def factory(repo: Path, limits: Limits | None = None, **options: Any) -> DockerSandbox:
        session_id = "test-" + secrets.token_hex(4)
        limits = limits or SANDBOX_LIMITS
        if "runtime" not in limits.model_fields_set:
            limits = limits.model_copy(update={"runtime": sandbox_runtime})
        box = DockerSandbox(
            lambda: docker_client,
            layer=workspace.create(tmp_path / "data", session_id, repo),
            session_id=session_id,
            limits=limits,
            deployment=Deployment(SANDBOX_IMAGE, TEST_INSTANCE, **options),
        )
        made.append(box)
        return box

    yield factory
    for box in made:
        await box.stop()


@pytest.fixture
async def sandbox(make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]) -> DockerSandbox:
    box = sandbox_factory(make_repo())
    await box.start()
    return box


@pytest.fixture(scope="session")
def model_server() -> Iterator[Any]:
    """One scripted Anthropic-compatible server for the run; tests register scenarios under unique model names."""
    from controller.agent.scripted import Scenario, ScriptedServer, serve_in_thread

    server = ScriptedServer([Scenario(name="default", turns=[])])
    with serve_in_thread(server.app) as url:
        server.url = url  # type: ignore[attr-defined]
        yield server


@pytest.fixture(scope="session")
def proxy_image(docker_client: Any) -> str:
    """The proxy image built from this checkout's proxy_image/ (tagged by its contents, so never a stale one)."""
    context = images.PROXY.path
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes())
    tag = f"cubicle-proxy:src-{digest.hexdigest()[:12]}"
    try:
        docker_client.images.get(tag)
    except ImageNotFound:
        images.build(docker_client, tag, context=images.PROXY)
    return tag
