"""Hostile model output: every case gives a bounded, valid result; nothing escapes; memory stays bounded."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controller.agent import tools
from controller.sandbox.docker import DockerSandbox
from controller.wire.events import ToolResult
from controller.wire.protocol import Failure, ListFiles, ListFilesArgs, ReadResult
from tests.agent_harness import LIMITS, text, tool
from tests.integration.helpers import call, sh


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


async def test_binary_and_invalid_utf8_output(run_scenario: Callable[..., Any]) -> None:
    run = await run_scenario(
        [
            {"content": [tool("run_command", command="head -c 100000 /dev/urandom; printf '\\377\\376 tail'")]},
            {"content": [text("ok")]},
        ]
    )
    (result,) = run.results(1)
    json.dumps(run.requests[-1])  # the whole request stays valid JSON
    assert result["content"].startswith("exit code 0") and "\ufffd" in result["content"]
    assert run.outcome.reason == "end_turn"


async def test_a_gigabyte_of_output(run_scenario: Callable[..., Any]) -> None:
    """A gigabyte through a sandbox of 512 MB: a capture that grew with the stream would be killed for memory
    long before its end, and the controller could not hold it under 100 MB. ``exit code 0`` says the toolbox read
    every byte (``tr`` ends 0 only once all of it went into the pipe) and lived; the texts stay within their caps.
    (It was two gigabytes: under gVisor that cost a minute of CPU, and one proves the same bounds.)"""
    before = rss_mb()
    run = await run_scenario(
        [
            {"content": [tool("run_command", command="head -c 1000000000 /dev/zero | tr '\\0' x", timeout_s=120)]},
            {"content": [text("ok")]},
        ],
        limits=LIMITS.model_copy(update={"command_timeout_s": 120}),
    )
    (result,) = run.results(1)
    assert result["content"].startswith("exit code 0 after"), result["content"][:300]
    assert len(result["content"]) < LIMITS.model_output_chars + 300
    event = next(e for e in run.events if isinstance(e, ToolResult))
    assert len(event.output) < LIMITS.event_output_chars + 300 and "1000000000 bytes" not in event.output[:100]
    assert rss_mb() - before < 100


async def test_hundred_megabyte_argument(box: DockerSandbox) -> None:
    before = rss_mb()
    outcome = await tools.execute("write_file", {"path": "big.txt", "content": "a" * 100_000_000}, box, LIMITS)
    assert outcome.is_error and "content: String should have at most" in outcome.model_text
    assert len(outcome.model_text) < 1000
    assert rss_mb() - before < 250
    command = await tools.execute("run_command", {"command": "x" * 100_000_000}, box, LIMITS)
    assert command.is_error and "command:" in command.model_text


@pytest.mark.parametrize("depth", [20, 60])
async def test_deeply_nested_arguments(run_scenario: Callable[..., Any], depth: int) -> None:
    run = await run_scenario([{"content": [tool("read_file", path=nested(depth))]}, {"content": [text("ok")]}])
    (result,) = run.results(1)
    assert result["is_error"] is True and "path: Input should be a valid string" in result["content"]
    assert run.outcome.reason == "end_turn"


@pytest.mark.parametrize("depth", [100, 900, 5000])
async def test_nesting_too_deep_becomes_an_error_result(run_scenario: Callable[..., Any], depth: int) -> None:
    raw = '{"path": ' + '{"a": ' * depth + "{}" + "}" * depth + "}"
    run = await run_scenario(
        [{"content": [{"type": "tool_use", "name": "read_file", "raw_input": raw}]}, {"content": [text("ok")]}]
    )
    (result,) = run.results(1)
    assert result["is_error"] is True and "could not be read" in result["content"] and len(result["content"]) < 1000
    assert run.outcome.reason == "end_turn"


async def test_reads_of_special_files(box: DockerSandbox, run_scenario: Callable[..., Any]) -> None:
    await sh(
        box,
        "mkfifo fifo; ln -s /dev/zero zero; ln -s /dev/urandom rnd; truncate -s 50G sparse; yes | tr -d '\\n' | head -c 100M > oneline",
    )
    outcomes = [await call(box, "read_file", path=p) for p in ("fifo", "zero", "rnd", "sparse", "oneline")]
    assert [o.kind for o in outcomes[:4] if isinstance(o, Failure)] == [
        "not_regular",
        "not_regular",
        "not_regular",
        "binary",
    ]
    endless = outcomes[4]
    assert isinstance(endless, ReadResult) and endless.truncated and endless.lines == 1
    assert endless.content.startswith("     1\ty") and "[line truncated: 67108864 bytes]" in endless.content
    assert len(endless.content) < 3000


async def test_listing_a_directory_ten_thousand_levels_deep(box: DockerSandbox) -> None:
    made = await sh(
        box, "python3 -c \"import os\nfor _ in range(10000):\n    os.mkdir('d'); os.chdir('d')\"", timeout_s=60
    )
    try:
        assert made.exit_code == 0
        listing = await call(box, "list_files", path=".", depth=10)
        assert not isinstance(listing, Failure) and len(listing.entries) < 1000  # type: ignore[union-attr]
        too_long = ListFilesArgs.model_construct(path="/".join(["d"] * 3000), depth=2)  # past MAX_PATH: the
        deep = await box.call(ListFiles(args=too_long), 60)  # toolbox is checked on what a check would stop
        assert isinstance(deep, Failure) and deep.kind == "name_too_long"
        searched = await call(box, "search", pattern="nothing-here")
        assert not isinstance(searched, Failure)
    finally:  # pytest's own cleanup would recurse too deep on this tree, and gVisor's rm -rf gives up on it (climbing
        # down and up it in the sandbox took 11 s under gVisor): the host's rm, which any depth suits, once it is stopped
        await box.stop()
        tree = box.layer.upper / "d"
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(tree)], check=True, timeout=60)
    assert not tree.exists()
