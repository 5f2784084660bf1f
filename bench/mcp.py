"""MCP: a read_file round trip through `cubicle mcp` (stdio client → sandbox → back), beside the agent's own path.

Four measurements, each after a warm-up, in one run on the same repository and image:

- the official Python SDK client (``stdio_client`` + ``ClientSession``) calling read_file on a real
  ``python -m controller mcp REPO`` process: what an MCP client pays; the target (p50 ≤ 2 ms) is
  judged on this row;
- a bare JSON-RPC client on the same server (one line written, one read): the server's share, with
  no client library in it;
- the official client against a do-nothing server of the same SDK (a tool that returns its
  arguments): the floor the SDK's own framing, validation and dispatch set, which no server goes under;
- the agent's own path: ``tools.execute("read_file")`` in-process on a sandbox of the same image,
  which is what Cubicle's agent loop pays per call.

``python -m bench.mcp`` prints this table alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.measure import Report, Row, Sample, ms, repetitions, time_async, time_sync
from bench.rows import INSTANCE, LIMITS, make_repo, sandbox, section_main
from controller.agent import tools

TARGET_S = 0.002
ECHO_SERVER = """
import anyio, mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[types.Tool(name="read_file", input_schema={"type": "object"})])

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text=repr(params.arguments))])

async def main():
    server = Server("echo", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""
READ = {"path": "README.md"}


def _server_command(repo: Path, data: Path, image: str) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "CUBICLE_DATA_DIR": str(data), "CUBICLE_INSTANCE": INSTANCE, "CUBICLE_IMAGE": image}
    return [sys.executable, "-m", "controller", "mcp", str(repo)], env


async def _official(command: list[str], env: dict[str, str], n: int) -> Sample:
    """p50 of read_file through the SDK's own client on the server ``command`` starts."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("read_file", READ)  # the container starts on the first call
            return await time_async(lambda: session.call_tool("read_file", READ), n, warmup=20)


def _bare(command: list[str], env: dict[str, str], n: int) -> Sample:
    """p50 of read_file with a JSON-RPC line written and one read back, no client library."""
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert process.stdin is not None and process.stdout is not None
    ids = iter(range(1, 1_000_000))

    def send(message: dict[str, Any]) -> None:
        assert process.stdin is not None
        process.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        process.stdin.flush()

    def call() -> None:
        send({"id": next(ids), "method": "tools/call", "params": {"name": "read_file", "arguments": READ}})
        assert process.stdout is not None
        reply = json.loads(process.stdout.readline())
        assert reply["result"]["isError"] is False, reply

    try:
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
        send({"id": 0, "method": "initialize", "params": init})
        process.stdout.readline()
        send({"method": "notifications/initialized"})
        call()
        return time_sync(call, n, warmup=20)
    finally:
        process.stdin.close()
        process.wait(timeout=30)


async def table(report: Report, client: Any, image: str, root: Path, quick: bool) -> None:
    n = repetitions(300 if quick else 1000)
    repo = make_repo(root, "mcp")
    command, env = _server_command(repo, root / "mcp-data", image)
    started = time.perf_counter()
    official = await _official(command, env, n)
    bare = await asyncio.to_thread(_bare, command, env, n)
    floor = await _official([sys.executable, "-c", ECHO_SERVER], env, n)
    box = sandbox(client, image, repo)
    try:
        await box.start()
        agent = await time_async(lambda: tools.execute("read_file", READ, box, LIMITS), n, warmup=20)
    finally:
        await box.stop()
    met = report.check(
        official.p50 <= TARGET_S, f"MCP read_file round trip p50 {ms(official.p50)} > {ms(TARGET_S)} (official client)"
    )
    report.rows.append(
        Row(
            "MCP read_file round trip (official client, stdio)",
            official,
            "the agent's own path (in-process)",
            agent,
            f"p50 ≤ {ms(TARGET_S)}",
            met,
        )
    )
    rows = [
        [
            "official SDK client → `cubicle mcp` → sandbox",
            ms(official.p50),
            ms(official.p95),
            "p50 ≤ 2 ms",
            "yes" if met else "**no**",
        ],
        ["bare JSON-RPC client → `cubicle mcp` → sandbox (the server's share)", ms(bare.p50), ms(bare.p95), "", ""],
        ["official SDK client → do-nothing SDK server (the SDK's floor)", ms(floor.p50), ms(floor.p95), "", ""],
        ["the agent's own path: tools.execute in-process", ms(agent.p50), ms(agent.p95), "", ""],
    ]  # fmt: skip - a table
    report.extra.append(
        (
            f"MCP tool calls: read_file of a 41-line file, {n} calls each after a warm-up "
            f"({time.perf_counter() - started:.0f} s in all)",
            ["path", "p50", "p95", "target", "met"],
            rows,
        )
    )


def main() -> int:
    return section_main("mcp", __doc__, "300 calls each instead of 1000", table)


if __name__ == "__main__":
    sys.exit(main())
