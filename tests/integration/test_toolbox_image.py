"""The toolbox as the image runs it: a root-owned directory, imported only from itself and the stdlib.

The image runs ``python3 -I -S -u /opt/cubicle/toolbox``. The agent's commands share the
toolbox's uid and write the workspace and its environment, so what the toolbox imports must
come from places they cannot write: Python's verbose import trace (``-vv``, which names every
location it tries) shows it never looks anywhere else, even with the workspace full of
stdlib-shadowing modules, PYTHONPATH pointing at it and the workspace as the current directory.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controller.config import DEFAULT_IMAGE
from controller.sandbox import owners
from controller.sandbox.docker import raw_socket
from tests.sandbox_defaults import AGENT_UID, TEST_INSTANCE
from tests.shadow_modules import markers, plant_shadow_modules

STDLIB = re.compile(r"^/usr/lib/python3[.\d]*(/|\.zip|$)")


def run_in_image(docker_client: Any, command: list[str], repo: Path | None = None, **extra: Any) -> str:
    """Run ``command`` in a throwaway sandbox container as the agent's uid; its output, stderr included."""
    out: bytes = docker_client.containers.run(DEFAULT_IMAGE, command, **_options(repo), **extra)
    return out.decode("utf-8", "replace")


def _options(repo: Path | None) -> dict[str, Any]:
    options: dict[str, Any] = {
        "user": f"{AGENT_UID}:{AGENT_UID}",
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "network_mode": "none",
        "labels": owners.labels(TEST_INSTANCE, "test-" + secrets.token_hex(4)),
        "remove": True,
        "stdout": True,
        "stderr": True,
    }
    if repo is not None:
        options["volumes"] = {str(repo): {"bind": "/workspace", "mode": "rw"}}
    return options


def serve_in_image(
    docker_client: Any, command: list[str], requests: bytes, until: str, repo: Path, **extra: Any
) -> str:
    """Run the toolbox as ``command`` in a throwaway container as the agent's uid, on stdin held open as a sandbox
    does, send it ``requests``, and return all it printed (stderr included) once that holds ``until`` and an
    answer to each request. The log is read while the container runs: read after its end, the engine may not
    have copied the last of a long stderr yet."""
    options = {**_options(repo), "stdin_open": True, **extra}
    for only_for_run in ("remove", "stdout", "stderr"):
        del options[only_for_run]
    container = docker_client.containers.create(DEFAULT_IMAGE, command, **options)
    try:
        attached = docker_client.api.attach_socket(container.id, {"stdin": 1, "stream": 1})
        stdin = raw_socket(attached)
        container.start()
        stdin.sendall(requests)
        deadline = time.monotonic() + 30
        while True:
            printed = bytes(container.logs(stdout=True, stderr=True)).decode("utf-8", "replace")
            if until in printed and printed.count('"ok":') >= requests.count(b"\n"):
                stdin.close()
                return printed
            assert time.monotonic() < deadline, f"the toolbox did not answer: {printed[-2000:]}"
            time.sleep(0.1)
    finally:
        container.remove(force=True)


def test_the_toolbox_imports_only_from_its_directory_and_the_stdlib(
    docker_client: Any, make_repo: Callable[..., Path]
) -> None:
    repo = make_repo()
    plant_shadow_modules(repo)
    (repo / "toolbox").mkdir()
    (repo / "toolbox" / "__init__.py").write_text("open('/workspace/HIJACKED-toolbox', 'w').write('x')\n")
    cmd = docker_client.images.get(DEFAULT_IMAGE).attrs["Config"]["Cmd"]
    assert cmd == ["/usr/bin/python3", "-I", "-S", "-u", "/opt/cubicle/toolbox"]
    environment = {"PYTHONPATH": "/workspace", "PYTHONHOME": "/workspace", "PYTHONSTARTUP": "/workspace/json.py"}
    # A command and a search, so the modules the toolbox loads only after its first answer are loaded too.
    requests = b'{"id":1,"op":"run_command","args":{"command":"true"}}\n{"id":2,"op":"search","args":{"pattern":"x"}}\n'
    trace = serve_in_image(
        docker_client,
        [*cmd[:-1], "-vv", cmd[-1]],
        requests,
        "import 'toolbox.search'",
        repo,
        environment=environment,
        working_dir="/workspace",
    )
    assert '"id":1,"ok":true' in trace and '"id":2,"ok":true' in trace, trace[-2000:]

    # Not anchored at line starts: two threads import at once (the commands' modules load beside the first command),
    # and -vv writes a message and its newline separately, so one thread's line may begin inside another's.
    tried = {m.rsplit("/", 1)[0] for m in re.findall(r"# trying ([^\s#]+)", trace)}
    loaded = set(re.findall(r"# code object from '?([^'\s#]+)", trace))
    assert tried and loaded, trace[-2000:]
    assert {d for d in tried if not STDLIB.match(d)} == {"/opt/cubicle", "/opt/cubicle/toolbox"}
    toolbox_code = {p for p in loaded if not STDLIB.match(p)}
    # the guardian (and its seccomp filter) is imported only by a toolbox started as root (runtimes.guarded)
    expected = {f"/opt/cubicle/toolbox/{p.name}" for p in _package_sources() if p.name not in GUARDED_ONLY}
    assert {_source_of(p) for p in toolbox_code} == expected
    assert all("/__pycache__/" in p for p in toolbox_code), "the toolbox starts from the bytecode the image compiled"
    assert "import 'toolbox.protocol'" in trace and "import 'protocol'" not in trace
    assert markers(repo) == []


def test_the_toolbox_files_are_root_owned_and_read_only_to_the_agent(docker_client: Any) -> None:
    script = (
        "import os, json; top = '/opt/cubicle'; paths = [top] + [os.path.join(d, n) for d, ds, fs in os.walk(top) "
        "for n in ds + fs]; print(json.dumps({p: [os.lstat(p).st_uid, os.lstat(p).st_mode & 0o7777, "
        "os.access(p, os.W_OK), os.path.islink(p)] for p in paths}))"
    )
    listing = json.loads(run_in_image(docker_client, ["/usr/bin/python3", "-I", "-S", "-c", script]))
    sources = {f"/opt/cubicle/toolbox/{p.name}" for p in _package_sources()}
    expected = {"/opt/cubicle", "/opt/cubicle/toolbox", BYTECODE} | sources
    expected |= set(GUARDED_FILES)  # what the runsc start needs: readable tini, the interpreter's path, the shim
    bytecode = {p for p in listing if p.startswith(BYTECODE + "/")}
    assert set(listing) - bytecode == expected  # nothing else that could be imported
    assert sorted(map(_source_of, bytecode)) == sorted(sources)  # the image's Python compiled each source, once
    for path, (uid, mode, writable, link) in listing.items():
        # a symlink's own mode is always 777; its target (/usr/bin/python3) is the root filesystem's
        assert uid == 0 and (link or not mode & 0o022) and not writable, (path, uid, oct(mode), writable)
    assert listing["/opt/cubicle/bin/tini-readable"][1] == 0o755  # runsc loads it itself: it must be readable


GUARDED_ONLY = {"guardian.py", "relay.py", "seccomp.py"}
BYTECODE = "/opt/cubicle/toolbox/__pycache__"


def _source_of(path: str) -> str:
    """The source a path of the toolbox's code stands for: its bytecode (``__pycache__/name.cpython-311.pyc``)
    names ``name.py``."""
    return re.sub(r"/__pycache__/([^/.]+)\.[^/]+\.pyc$", r"/\1.py", path)


GUARDED_FILES = (
    "/opt/cubicle/bin",
    "/opt/cubicle/bin/python3",
    "/opt/cubicle/bin/tini-readable",
    "/opt/cubicle/lib",
    "/opt/cubicle/lib/statx.so",
)


def _package_sources() -> list[Path]:
    import toolbox

    return sorted(Path(toolbox.__file__).parent.glob("*.py"))
