"""The data directory is bounded per session: 200 commands each printing 2 MB store at most the session's cap of
events (their live output and their results alike), the model's transcript is the same as without the cap, and the
stored events say what was not kept."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from controller.server.store import Store
from controller.wire.events import CommandOutput, ToolResult
from tests.integration.cli_helpers import cubicle
from tests.integration.pty_helpers import scenario_file

COMMANDS, PER_STEP = 200, 20
PRINT_2MB = "head -c 2000000 /dev/zero | tr '\\0' a"


def test_two_hundred_noisy_commands_stay_under_the_sessions_cap(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    call = {"type": "tool_use", "name": "run_command", "input": {"command": PRINT_2MB}}
    turns = [{"content": [call] * PER_STEP} for _ in range(COMMANDS // PER_STEP)]
    turns.append({"content": [{"type": "text", "text": "done"}]})
    scenario = scenario_file(tmp_path, {"name": "noisy", "turns": turns})
    data = tmp_path / "data"
    env = {
        "CUBICLE_DATA_DIR": str(data),
        "CUBICLE_SESSION_EVENTS_MB": "4",
        "CUBICLE_LIMITS__EVENT_OUTPUT_CHARS": "65536",
    }
    done = cubicle(
        "run",
        str(make_repo()),
        "be noisy",
        "--json",
        "--no-apply",
        "--token-budget",
        "100000000",
        "--scenario",
        scenario,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    shown = [json.loads(line) for line in done.stdout.splitlines()]
    session_id = shown[0]["session_id"]
    sizes = {len(e["output"]) for e in shown if e["type"] == "tool_result"}  # the view gets every output whole
    (size,) = sizes
    assert size > 65536 - 100 and len([e for e in shown if e["type"] == "tool_result"]) == COMMANDS

    store = Store(data / "cubicle.db")
    try:
        assert store.event_bytes(session_id) <= 4 << 20
        events = store.events_after(session_id, 0, limit=100_000)
        results = [e for e in events if isinstance(e, ToolResult)]
        kept = [r for r in results if r.output]
        dropped = [r for r in results if not r.output]
        assert len(results) == COMMANDS and 0 < len(kept) < 64 and len(kept) + len(dropped) == COMMANDS
        # the cap's share for output (7/8 of 4 MiB) went to the first commands' live output and results
        live = [e for e in events if isinstance(e, CommandOutput)]
        stored_output = sum(len(e.text) for e in live) + sum(len(r.output) for r in kept)
        assert 3 << 20 <= stored_output <= 4 << 20
        assert all(r.output_not_kept == size and r.exit_code == 0 and not r.is_error for r in dropped)
        assert results[: len(kept)] == kept  # the first ones are kept whole, then none
        transcript = [
            block
            for message in store.messages(session_id)
            if message["role"] == "user"
            for block in (message["content"] if isinstance(message["content"], list) else [])
            if block.get("type") == "tool_result"
        ]
    finally:
        store.close()
    assert len(transcript) == COMMANDS
    # every result reads the same to the model, but for how long its command took
    texts = {re.sub(r"after [0-9.]+s", "after Ns", json.dumps(block["content"])) for block in transcript}
    assert len(texts) == 1 and "exit code 0" in texts.pop()
