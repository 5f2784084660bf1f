"""Running `cubicle` as a user does (a subprocess), shared by the CLI's tests."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.sandbox_defaults import TEST_INSTANCE

SESSION_ID = re.compile(r"cli-[0-9a-f]{16}")


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without model or Cubicle settings, but for the test's data directory and the
    test process's pids ledger, with the tests' owner instance (``TEST_INSTANCE``) unless ``extra`` names one."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "CUBICLE_")) or k in ("CUBICLE_DATA_DIR", "CUBICLE_HOST_PIDS_LEDGER")
    }
    return {**base, "CUBICLE_INSTANCE": TEST_INSTANCE, **(extra or {})}


def cubicle(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controller", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=environment(env),
        timeout=timeout,
    )


def tree(root: Path) -> dict[str, tuple[int, bytes | str]]:
    """Every entry under ``root`` (``.git`` included): its mode and its bytes, or a symlink's target."""
    found: dict[str, tuple[int, bytes | str]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            found[str(path.relative_to(root))] = (st.st_mode, os.readlink(path))
        else:
            found[str(path.relative_to(root))] = (st.st_mode, path.read_bytes() if path.is_file() else b"")
    return found


def scripted_run(
    tmp_path: Path, repo: Path, name: str, turns: list[dict[str, Any]], *flags: str, env: dict[str, str] | None = None
) -> str:
    """A `cubicle run --json` of the scripted model playing ``turns`` (``name`` is the task and the scenario),
    which must exit 0; its session id."""
    scenario = tmp_path / f"{name}.json"
    scenario.write_text(json.dumps({"name": name, "turns": turns}))
    done = cubicle("run", str(repo), name, "--json", *flags, "--scenario", str(scenario), env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return str(json.loads(done.stdout.splitlines()[0])["session_id"])


def backdate(db: Path, session_id: str, seconds: float) -> None:
    """As if ``seconds`` had passed since the session was last active: its row's and its events' times move back."""
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE sessions SET created_at = created_at - ?, updated_at = updated_at - ? WHERE id = ?",
            (seconds, seconds, session_id),
        )
        conn.execute(
            "UPDATE events SET data = json_set(data, '$.ts', json_extract(data, '$.ts') - ?) WHERE session_id = ?",
            (seconds, session_id),
        )
    conn.close()
