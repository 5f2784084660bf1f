"""Symlinks and `..` resolve inside the container: a secret on the host is never revealed."""

from __future__ import annotations

from pathlib import Path

from controller.protocol import Failure, ListResult, ReadResult
from controller.sandbox import DockerSandbox
from tests.integration.helpers import call, sh


async def test_symlink_to_root_shows_the_container_not_the_host(
    sandbox: DockerSandbox, sentinel: str, tmp_path: Path
) -> None:
    await sh(sandbox, f"ln -s / root; ln -s {tmp_path} hostdir; ln -s {tmp_path}/host-secret.txt secret")
    outcomes = [
        await call(sandbox, "read_file", path=f"root{tmp_path}/host-secret.txt"),
        await call(sandbox, "read_file", path="secret"),
        await call(sandbox, "read_file", path="hostdir/host-secret.txt"),
        await call(sandbox, "read_file", path="../host-secret.txt"),
        await call(sandbox, "read_file", path="../../../../host-secret.txt"),
        await call(sandbox, "read_file", path=str(tmp_path / "host-secret.txt")),
        await call(sandbox, "list_files", path="root", depth=2),
        await call(sandbox, "list_files", path=".."),
        await call(sandbox, "search", pattern="SENTINEL-", path="root/tmp"),
        await call(sandbox, "run_command", command="cat ../host-secret.txt secret; ls -la .. /"),
    ]
    for outcome in outcomes:
        assert sentinel not in outcome.model_dump_json()
    assert isinstance(outcomes[0], Failure) and isinstance(outcomes[1], Failure)
    assert isinstance(outcomes[6], ListResult) and any(e.path == "root/etc" for e in outcomes[6].entries)


async def test_whole_container_holds_no_host_secret(sandbox: DockerSandbox, sentinel: str) -> None:
    result = await sh(
        sandbox, "grep -rsl --exclude-dir=proc --exclude-dir=sys SENTINEL- / | head; echo scanned", timeout_s=120
    )
    assert result.stdout.text.endswith("scanned\n")
    assert sentinel not in result.model_dump_json()


async def test_writes_through_symlinks_stay_in_the_container(sandbox: DockerSandbox, tmp_path: Path) -> None:
    await sh(sandbox, f"ln -s / root; ln -s {tmp_path} hostdir")
    await call(sandbox, "write_file", path="root/tmp/escape.txt", content="x")
    await call(sandbox, "write_file", path="hostdir/escape.txt", content="x")
    await call(sandbox, "write_file", path="../escape.txt", content="x")
    assert not (tmp_path / "escape.txt").exists()
    assert not Path("/tmp/escape.txt").exists()
    read = await call(sandbox, "read_file", path="root/tmp/escape.txt")
    assert isinstance(read, ReadResult)
