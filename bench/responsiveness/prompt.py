"""The CLI's row: Ctrl-C typed at ``cubicle run --approve``'s prompt, on a real pseudo-terminal, until it exits.

The baseline, same terminal and same run: Ctrl-C typed at a bare ``cat`` reading the terminal. (Not a bare Python's
``input()``: a Ctrl-C that lands between its prompt and its read is handled only at the next read's end, never.)
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

from bench.measure import Sample
from bench.responsiveness.measured import Measured, repeat, until
from bench.rows import make_repo

PROMPT = b"? [y/N] "
"""The end of the approval prompt (its tool's name is styled, so not a match)."""


def _take_terminal() -> None:
    """In the child, after setsid: the pty becomes its controlling terminal, so Ctrl-C there sends SIGINT, which
    it takes as a process does by default (a bench started in the background of a shell inherits it ignored)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Pty:
    """A process on a pseudo-terminal of its own, with what it wrote so far."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = os.openpty()
        self.process = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, preexec_fn=_take_terminal
        )
        os.close(slave)
        self.master = master
        self.shown = b""

    def read_until(self, needle: bytes, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.shown:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise TimeoutError(f"{needle!r} never showed; the terminal shows {self.shown[-500:]!r}")
            if select.select([self.master], [], [], 0.1)[0]:
                self.shown += os.read(self.master, 65536)

    def interrupt(self, timeout: float = 120) -> tuple[float, int]:
        """Type Ctrl-C; the seconds until the process exits, and its exit status."""
        start = time.perf_counter()
        os.write(self.master, b"\x03")
        while self.process.poll() is None:
            if time.perf_counter() - start > timeout:
                raise TimeoutError(f"Ctrl-C did not end the process; the terminal shows {self.shown[-500:]!r}")
            if select.select([self.master], [], [], 0.005)[0]:
                try:
                    self.shown += os.read(self.master, 65536)
                except OSError:  # every writer is gone
                    time.sleep(0.005)
        return time.perf_counter() - start, self.process.returncode

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        os.close(self.master)


def _environment(data: Path, instance: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CUBICLE_"))}
    return env | {"TERM": "xterm-256color", "CUBICLE_DATA_DIR": str(data), "CUBICLE_INSTANCE": instance}


def _owned(client: Any, instance: str) -> list[Any]:
    listed = client.containers.list(all=True, sparse=True, filters={"label": "org.cubicle.managed=true"})
    return [c for c in listed if (c.attrs.get("Labels") or {}).get("org.cubicle.owner", "").startswith(instance + ":")]


async def _at_the_prompt(client: Any, image: str, repo: Path, scenario: Path, root: Path) -> float:
    instance = f"bench-prompt-{secrets.token_hex(3)}"
    args = [sys.executable, "-m", "controller", "run", str(repo), "x", "--approve", "--scenario", str(scenario)]
    env = _environment(root / f"data-{instance}", instance) | {"CUBICLE_IMAGE": image}
    terminal = Pty(args, env)
    try:
        await asyncio.to_thread(terminal.read_until, PROMPT)
        await until(lambda: _owned(client, instance), "the sandbox runs while the prompt is shown")
        took, code = await asyncio.to_thread(terminal.interrupt)
    finally:
        terminal.close()
        # what a run that did not end cleanly left (its layer's filesystem mounted) is gc's, as after a crash
        await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "controller", "gc"],
            env=env,
            check=False,
            capture_output=True,
            timeout=300,
        )
    assert code == 130 and not _owned(client, instance), (code, terminal.shown[-500:])
    return took


def _bare(root: Path) -> float:
    terminal = Pty(["/bin/sh", "-c", "printf 'ready> '; exec cat"], _environment(root / "bare", "bench-bare"))
    try:
        terminal.read_until(b"ready> ")
        return terminal.interrupt()[0]
    finally:
        terminal.close()


async def ctrl_c(client: Any, image: str, root: Path, quick: bool) -> list[Measured]:
    """Ctrl-C at the approval prompt (the run exits 130 and its container is gone), beside a bare cat's."""
    repo = make_repo(root, "responsive-prompt")
    turns = [
        {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": "echo hi"}}]},
        {"content": [{"type": "text", "text": "finished"}]},
    ]
    scenario = root / "prompt.json"
    scenario.write_text(json.dumps({"name": "prompt", "turns": turns}))
    n = repeat(quick)
    ours = [await _at_the_prompt(client, image, repo, scenario, root) for _ in range(n)]
    bare = [await asyncio.to_thread(_bare, root) for _ in range(n)]
    return [
        Measured(
            "cli.ctrl_c_at_prompt",
            "Ctrl-C at cubicle run --approve's prompt, until it exits (container removed)",
            Sample(ours),
            "Ctrl-C at a bare cat",
            Sample(bare),
            1.0,
        )
    ]
