"""Per-session disk and inode quotas on a real engine: what the agent writes stops at its quota, inside the sandbox.

Small quotas keep the runs cheap: 64 MiB and 2,048 files. Each session's layer is a loop-mounted
ext4 filesystem of that size (``controller.workspace.quota``); these tests look at it from the host too:
its image's allocated bytes, the host's free space, and the mounts and loop devices left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from controller.agent.scripted import ScriptedServer, serve_in_thread
from controller.config import DEFAULT_IMAGE, Settings
from controller.server.api import create_app
from tests.agent_harness import register, text, tool
from tests.eventually import eventually
from tests.integration.api_helpers import Api
from tests.integration.cli_helpers import cubicle, environment, scripted_run, tree
from tests.integration.helpers import container_running
from tests.sandbox_defaults import SANDBOX_LIMITS, TEST_INSTANCE, TEST_RUNTIMES

TOKEN = "quota-token"
QUOTA_MB = 64
QUOTA = {"disk_mb": QUOTA_MB, "inodes": 2048}
SLACK = 16 << 20
"""What else the data directory may take meanwhile (the database, baselines, the image's own metadata)."""

FILL_FILES = (
    "python3 -c \"\nimport os\nos.mkdir('many')\nn = 0\ntry:\n    while n < 2000000:\n"
    "        open(f'many/f{n}', 'x').close()\n        n += 1\nexcept OSError as e:\n"
    "    print('made', n, 'then', e.strerror)\n\""
)
QUOTA_TURNS = [
    {"content": [tool("run_command", command=FILL_FILES)]},
    # at the exact file quota, a file of the checkout, the mount's first whiteout, in a directory not yet written
    {"content": [tool("run_command", command="rm src/app.py && echo deleted")]},
    {"content": [tool("run_command", command="rm -r many && echo deleted")]},  # and what the agent made
    {"content": [tool("run_command", command="fallocate -l 50G big; echo rc=$?; rm -f big")]},
    {"content": [tool("run_command", command="dd if=/dev/zero of=fill bs=1M count=200 2>&1; echo rc=$?")]},
    {"content": [tool("write_file", path="note.txt", content="x" * 1_000_000)]},
    # at the size quota: a file of the checkout (it needs a whiteout) and one the agent made are deleted
    {"content": [tool("run_command", command="rm README.md fill && echo deleted")]},
    {"content": [tool("write_file", path="after.txt", content="room again")]},
    {"content": [text("Done.")]},
]


@pytest.fixture
def api(tmp_path: Path, model_server: ScriptedServer, sandbox_runtime: str) -> Iterator[Api]:
    limits = SANDBOX_LIMITS.model_copy(update={"runtime": sandbox_runtime})
    settings = Settings(
        api_key="test",
        base_url=model_server.url,
        api_token=TOKEN,
        repo_roots=[tmp_path],  # type: ignore[attr-defined]
        data_dir=tmp_path / "data",
        instance=TEST_INSTANCE,
        limits=limits,
        sse_heartbeat_s=1,
    )
    with serve_in_thread(create_app(settings)) as url:
        client = Api(url, TOKEN)
        yield client
        client.http.close()


def loops_backed_by(directory: Path) -> list[str]:
    """The loop devices whose backing file is under ``directory``."""
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            if backing.read_text().strip().startswith(str(directory)):
                found.append(backing.parent.parent.name)
    return found


def mounts_under(directory: Path) -> list[str]:
    """Mount points under ``directory`` (this process shares the engine's mount namespace in CI)."""
    points = [line.split(" ")[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p.startswith(str(directory) + "/")]


def used_bytes(*roots: Path) -> int:
    """The blocks the files under ``roots`` hold on the host's disk (no mount point below a root is entered).

    What the test may have written, wherever it could land: its own directory (the data dir with the
    layer's image) and the engine's volumes. Not the filesystem's free space: anything else on the
    machine writes there too, and a test beside a busy neighbour would count the neighbour's bytes."""
    total = 0
    for root in roots:
        if not root.is_dir():
            continue
        device = root.stat().st_dev
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if os.lstat(os.path.join(folder, d)).st_dev == device]
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total


def results(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "tool_result"]


@pytest.mark.parametrize("sandbox_runtime", TEST_RUNTIMES)  # the quota holds under gVisor too
def test_every_write_stops_at_the_quota_inside_the_sandbox_and_nothing_outside_notices(
    api: Api, model_server: ScriptedServer, make_repo: Callable[..., Path], tmp_path: Path, docker_client: Any
) -> None:
    data = tmp_path / "data"
    volumes = Path(docker_client.info()["DockerRootDir"]) / "volumes"
    before = used_bytes(tmp_path, volumes)
    filler = api.create(str(make_repo()), register(model_server, QUOTA_TURNS, prefix="fill"), limits=QUOTA)
    calm_turns = [
        {"content": [tool("run_command", command="echo calm > calm.txt && cat calm.txt")]},
        {"content": [text("ok")]},
    ]
    calm = api.create(str(make_repo("calm")), register(model_server, calm_turns, prefix="calm"))
    health = []  # /healthz's answers while the sandbox fills its quota (how fast: bench/responsiveness.py)
    while api.get(filler["id"])["status"] == "running":
        health.append(api.http.get("/healthz").status_code)
        time.sleep(0.2)  # a sampling interval, not a wait for anything
    events = api.events(filler["id"])
    assert api.get(filler["id"])["status"] == "idle", events[-3:]
    files, delete_checkout, delete_files, fallocate, dd, note, delete, after = results(events)

    assert "No space left on device" in fallocate["output"] and "rc=1" in fallocate["output"], fallocate
    assert "No space left on device" in dd["output"] and "rc=1" in dd["output"], dd
    made = re.search(r"made (\d+) then No space left on device", files["output"])
    assert made and 1000 < int(made.group(1)) < 2048, files["output"]
    assert note["is_error"] and "disk quota" in note["output"], (note["output"], dd["output"])
    assert "deleted" in delete["output"] and not delete["is_error"], delete
    assert "deleted" in delete_checkout["output"] and not delete_checkout["is_error"], delete_checkout
    assert "deleted" in delete_files["output"] and not delete_files["is_error"], delete_files
    assert not after["is_error"], after  # and free room again
    listed = api.http.get(f"/v1/sessions/{filler['id']}/changes").json()
    assert [(c["path"], c["kind"]) for c in listed] == [
        ("README.md", "deleted"),
        ("after.txt", "added"),
        ("src/app.py", "deleted"),
    ], "the deletions, not the write that failed, nor how the deletions were made possible"

    image = next((data / "workspaces").glob("*/disk.img"))  # the filler's only: the calm session got the default
    for layer in (data / "workspaces").iterdir():
        if (layer / "layer.json").is_file() and json.loads((layer / "layer.json").read_text())["disk"]["mb"] == 64:
            image = layer / "disk.img"
    assert image.stat().st_blocks * 512 <= (QUOTA_MB << 20), image.stat()
    assert used_bytes(tmp_path, volumes) - before <= (QUOTA_MB << 20) + SLACK

    assert api.wait_for(calm["id"], lambda s: s["status"] != "running")["status"] == "idle"
    assert "calm" in results(api.events(calm["id"]))[0]["output"]
    assert health and set(health) == {200}, health  # the controller kept answering

    assert len(loops_backed_by(data)) == 2  # idle sessions keep their containers, and so their layers, a while
    for session in (filler["id"], calm["id"]):
        assert api.http.post(f"/v1/sessions/{session}/discard").status_code == 200
    assert not image.exists()
    assert mounts_under(data) == [] and loops_backed_by(data) == []
    assert used_bytes(tmp_path, volumes) - before <= SLACK  # the space is back


def test_a_killed_run_leaves_its_layer_mounted_until_the_next_controller_or_gc(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    data = tmp_path / "data"
    env = {"CUBICLE_DATA_DIR": str(data), "CUBICLE_INSTANCE": TEST_INSTANCE}
    scenario = tmp_path / "sleep.json"
    turns = [{"content": [tool("run_command", command="sleep 299.173", timeout_s=300)]}, {"content": [text("never")]}]
    scenario.write_text(json.dumps({"name": "sleep", "turns": turns}))
    args = [
        sys.executable,
        "-m",
        "controller",
        "run",
        str(make_repo()),
        "sleep",
        "--json",
        "--no-apply",
        "--command-timeout",
        "300",
        "--disk",
        "64",
        "--inodes",
        "2048",
        "--scenario",
        str(scenario),
    ]
    process = subprocess.Popen(args, env=environment(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        eventually(lambda: container_running(docker_client, "sleep 299.173"), timeout=60, what="the command runs")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()
    assert loops_backed_by(data) and mounts_under(data), "a killed run leaves its layer's filesystem mounted"

    done = cubicle("gc", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert mounts_under(data) == [] and loops_backed_by(data) == [], (mounts_under(data), loops_backed_by(data))
    layers = list((data / "workspaces").iterdir())
    assert len(layers) == 1 and (layers[0] / "disk.img").is_file()  # the layer is kept: its changes are reviewable
    listed = cubicle("changes", layers[0].name, env=env)
    assert listed.returncode == 0, listed.stderr  # mounted again to be read, and unmounted after
    assert mounts_under(data) == [] and loops_backed_by(data) == []


def test_a_request_for_more_than_the_servers_maximum_is_clamped_or_refused(
    api: Api, make_repo: Callable[..., Path]
) -> None:
    response = api.http.post(
        "/v1/sessions", json={"repo": str(make_repo()), "task": "t", "model": "m", "limits": {"disk_mb": 8}}
    )
    assert response.status_code == 422 and "disk_mb" in response.text, response.text


def test_an_apply_that_cannot_keep_its_backups_in_the_quota_writes_nothing_and_says_why(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    """An apply saves what it overwrites in the layer first; with the quota full it stops before the checkout."""
    files = {f"f{i}.bin": "y" * 1_000_000 for i in range(12)}
    repo = make_repo(files=files)
    before = tree(repo)
    rewrite = "for f in f*.bin; do echo x > $f; done; dd if=/dev/zero of=pad bs=1M count=200 2>/dev/null; true"
    turns = [{"content": [tool("run_command", command=rewrite)]}, {"content": [text("done")]}]
    env = {"CUBICLE_DATA_DIR": str(tmp_path / "data")}
    session = scripted_run(tmp_path, repo, "rewrite", turns, "--no-apply", "--disk", "40", "--inodes", "2048", env=env)
    for _ in range(2):  # a failed apply leaves nothing that trips the next one
        done = cubicle("apply", session, env=env)
        assert done.returncode == 4 and "disk quota" in done.stderr and "Nothing was written" in done.stderr, (
            done.stderr
        )
        assert tree(repo) == before
    assert mounts_under(tmp_path / "data") == []


def test_quotas_that_together_exceed_the_free_space_are_refused(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    """Images are sparse, so nothing else would stop quotas adding up to more than the disk: refused up front."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(small)], check=True)
    try:
        env = {"CUBICLE_DATA_DIR": str(small / "data"), "CUBICLE_MIN_FREE_MB": "16"}
        turns = [{"content": [text("done")]}]
        scenario = tmp_path / "noop.json"
        scenario.write_text(json.dumps({"name": "noop", "turns": turns}))
        done = cubicle(
            "run", str(make_repo()), "noop", "--no-apply", "--disk", "128", "--scenario", str(scenario), env=env
        )
        said = " ".join(done.stderr.split())
        assert done.returncode == 4 and "No room for this session's disk quota" in said, said
        layers = small / "data" / "workspaces"
        assert not layers.exists() or not any(layers.iterdir()), "nothing of the session was made"
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_an_apply_never_writes_more_than_the_quota_whatever_hardlinks_or_holes_make_it(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    """31 names of one 20 MiB file take 20 MiB in the layer and would take 620 MiB in the checkout, written whole:
    refused before anything is written (as would be files that are mostly one hole)."""
    repo = make_repo()
    before = tree(repo)
    links = "head -c 20M /dev/urandom > f0 && for i in $(seq 1 30); do ln f0 f$i; done"
    turns = [{"content": [tool("run_command", command=links)]}, {"content": [text("done")]}]
    env = {"CUBICLE_DATA_DIR": str(tmp_path / "data")}
    session = scripted_run(tmp_path, repo, "links", turns, "--no-apply", "--disk", "100", env=env)
    done = cubicle("apply", session, env=env)
    said = " ".join(done.stderr.split())
    assert (
        done.returncode == 4 and "Nothing was written: the apply would need 620.0 MiB (bytes in the checkout)" in said
    ), said
    assert tree(repo) == before
    assert cubicle("discard", session, env=env).returncode == 0


@pytest.mark.parametrize("sandbox_runtime", TEST_RUNTIMES)  # an environment's image under gVisor too
def test_a_volume_the_environment_image_declares_is_a_sized_tmpfs_and_leaves_nothing(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any, sandbox_runtime: str
) -> None:
    """A Dockerfile's VOLUME would be an anonymous volume on the host's disk, outside the quota, kept after the
    container: it is a tmpfs of the sandbox's tmpfs size instead, like /tmp."""
    dockerfile = (
        f"FROM {DEFAULT_IMAGE}\nUSER root\nRUN mkdir -p /data && chmod 1777 /data\nVOLUME /data/\n"  # uncleaned
    )
    repo = make_repo(files={".cubicle/environment.toml": 'dockerfile = "Dockerfile"\n', "Dockerfile": dockerfile})
    volumes_before = {v.name for v in docker_client.volumes.list()}
    fill = "df -k /data | tail -n 1; dd if=/dev/zero of=/data/big bs=1M count=300 2>&1 | tail -n 1; echo rc=$?"
    turns = [{"content": [tool("run_command", command=fill)]}, {"content": [text("done")]}]
    env = {
        "CUBICLE_DATA_DIR": str(tmp_path / "data"),
        "CUBICLE_LIMITS__TMPFS_MB": "64",
        "CUBICLE_LIMITS__RUNTIME": sandbox_runtime,
    }
    scenario = tmp_path / "volume.json"
    scenario.write_text(json.dumps({"name": "volume", "turns": turns}))
    done = cubicle(
        "run", str(repo), "volume", "--json", "--no-apply", "--scenario", str(scenario), env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    output = next(e for e in map(json.loads, done.stdout.splitlines()) if e["type"] == "tool_result")["output"]
    # a 64 MiB filesystem (gVisor's df names its tmpfs "none"), and no more than that is written
    assert re.search(r"\n(tmpfs|none) +65536 ", output) and "(67 MB, 64 MiB) copied" in output, output
    session_id = json.loads(done.stdout.splitlines()[0])["session_id"]

    def left_behind() -> set[str]:
        """New volumes no container uses (``dangling``), but the layers and setup steps of other tests' sessions. A
        test running meanwhile may build an image with a VOLUME too (this one's other runtime): its build's
        intermediate containers hold anonymous volumes for a moment, removed with them. A leak stays."""
        dangling = {v.name for v in docker_client.volumes.list(filters={"dangling": True})} - volumes_before
        return {
            name for name in dangling if session_id in name or not name.startswith(("cubicle-ws-", "cubicle-setup-"))
        }

    eventually(left_behind, until=lambda left: not left, what="no volume is left behind", timeout=120, interval=1)


def test_two_starts_at_once_cannot_both_claim_the_same_free_space(
    tmp_path: Path, model_server: ScriptedServer, make_repo: Callable[..., Path]
) -> None:
    """The free-space check and the row it counts on are one step: of two starts whose quotas fit the disk only
    one at a time, sent together, one is refused."""
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400m", "tmpfs", str(small)], check=True)
    try:
        settings = Settings(
            api_key="test",
            base_url=model_server.url,
            api_token=TOKEN,
            repo_roots=[tmp_path],  # type: ignore[attr-defined]
            data_dir=small / "data",
            instance=TEST_INSTANCE,
            limits=SANDBOX_LIMITS,
            min_free_mb=16,
            session_events_mb=16,
        )
        turns = [{"content": [tool("run_command", command="sleep 5")]}, {"content": [text("done")]}]
        model = register(model_server, turns, prefix="admit")
        repos = [str(make_repo(f"r{i}")) for i in range(2)]
        with serve_in_thread(create_app(settings)) as url, ThreadPoolExecutor(2) as pool:
            api = Api(url, TOKEN)
            body = {"task": "t", "model": model, "limits": {"disk_mb": 200}}
            answers = list(pool.map(lambda repo: api.http.post("/v1/sessions", json={**body, "repo": repo}), repos))
            codes = sorted(a.status_code for a in answers)
            assert codes == [201, 507], [a.text for a in answers]
            started = next(a.json()["id"] for a in answers if a.status_code == 201)
            api.wait_for(started, lambda s: s["status"] != "running")
            api.http.close()
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


@pytest.mark.parametrize("sandbox_runtime", TEST_RUNTIMES)  # the throttle binds under gVisor too
def test_fsynced_writes_are_throttled_on_the_layers_own_loop_device(
    api: Api, model_server: ScriptedServer, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    turns = [
        {"content": [tool("run_command", command="dd if=/dev/zero of=big bs=1M count=12 conv=fsync 2>&1 | tail -1")]},
        {"content": [text("done")]},
    ]
    sid = api.create(str(make_repo()), register(model_server, turns, prefix="io"), limits={**QUOTA, "io_mbps": 4})["id"]
    api.wait_for(sid, lambda s: s["status"] != "running")
    (container,) = docker_client.containers.list(filters={"label": f"org.cubicle.session={sid}"})
    throttles = container.attrs["HostConfig"]["BlkioDeviceWriteBps"]
    assert [t["Rate"] for t in throttles] == [4 << 20] and throttles[0]["Path"].startswith("/dev/loop"), throttles
    (result,) = results(api.events(sid))
    rate = re.search(r"copied, ([\d.]+) s", result["output"])
    assert rate and float(rate.group(1)) >= 2.0, result["output"]  # 12 MiB at 4 MiB/s: about 3 s, never much less
    assert api.http.post(f"/v1/sessions/{sid}/discard").status_code == 200
