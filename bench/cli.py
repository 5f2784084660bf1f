"""How long a ``cubicle`` command takes to start and answer, beside ``python -c pass`` in the same run.

Each command runs as a fresh process, as a person's shell runs it: ``--version`` and ``--help``, and
``sessions``, ``show`` and ``changes`` on a local store (a data directory of its own holding one finished session
of 40 steps whose layer holds 20 changed files; no engine is asked). The commands and the baseline take turns
round by round, so that a busy moment of the machine hits them alike. Targets (issue 43): ``--version`` and
``--help`` p50 ≤ 0.2 s; ``sessions``, ``show`` and ``changes`` p50 ≤ 0.35 s.
"""

from __future__ import annotations

import os
import resource
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.measure import Report, Row, Sample, ms, plain_main, smoke
from bench.rows import give_away, make_repo, workdir
from bench.stored import store_session
from controller import workspace
from controller.wire.events import Event, SessionFinished, SessionStarted, TextDelta, Usage, UsageEvent

STEPS = 40
CHANGED = 20
QUICK = 0.2
LISTING = 0.35
BASELINE = "python -c pass"


def entry() -> list[str]:
    """The ``cubicle`` console script beside this interpreter (a virtualenv's), else ``python -m controller``."""
    script = shutil.which("cubicle", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "controller"]


def commands(session_id: str) -> list[tuple[str, list[str], float]]:
    """Each command's row name, its arguments and its target (seconds, p50)."""
    return [
        ("cubicle --version", ["--version"], QUICK),
        ("cubicle --help", ["--help"], QUICK),
        ("cubicle sessions (local store)", ["sessions"], LISTING),
        ("cubicle show ID (local store, 40 steps)", ["show", session_id], LISTING),
        ("cubicle changes ID (local store, 20 files)", ["changes", session_id], LISTING),
    ]


def local_session(data_dir: Path, root: Path) -> str:
    """A finished session in ``data_dir``'s store, and its layer with ``CHANGED`` files written as a sandbox would."""
    repo = make_repo(root, "cli")
    session_id = "cli-bench" + secrets.token_hex(4)
    layer = workspace.create(data_dir, session_id, repo)
    for n in range(CHANGED):
        (layer.upper / f"changed_{n:02d}.py").write_text(f"VALUE = {n}\n" * 20)
    give_away(layer.upper)  # the sandbox writes as the checkout's owner
    return store_session(data_dir, session_id, repo, "bench the CLI", _events(session_id), STEPS)


def _events(session_id: str) -> list[Event]:
    events: list[Event] = [SessionStarted(session_id=session_id, repo="/repo", task="bench the CLI", model="m")]
    for step in range(1, STEPS + 1):
        events += [
            TextDelta(session_id=session_id, text=f"Step {step}: reading the tests.\n"),
            UsageEvent(session_id=session_id, step=step, turn=Usage(), session=Usage()),
        ]
    return [*events, SessionFinished(session_id=session_id, reason="end_turn", steps=STEPS, usage=Usage())]


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """The command's wall time and its CPU time (user + system), in seconds; a failure is an error."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    took, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-2:])} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return took, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def table(report: Report, quick: bool) -> None:
    """The rows: each command's start-to-exit time beside ``python -c pass``, in turns."""
    rounds = 1 if smoke() else 10 if quick else 30
    with workdir() as tmp:
        root = Path(tmp)
        data_dir = root / "data"
        session_id = local_session(data_dir, root)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CUBICLE_", "ANTHROPIC_"))}
        env |= {"CUBICLE_DATA_DIR": str(data_dir), "COLUMNS": "120", "NO_COLOR": "1"}
        runs = [(BASELINE, [sys.executable, "-c", "pass"], 0.0)]
        runs += [(name, [*entry(), *args], target) for name, args, target in commands(session_id)]
        for _ in range(0 if smoke() else 2):  # the page cache and the .pyc files, for every one alike
            for _, argv, _ in runs:
                _run(argv, env)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in runs}
        for _ in range(rounds):
            for name, argv, _ in runs:
                times[name].append(_run(argv, env))
    wall = {name: Sample([w for w, _ in values]) for name, values in times.items()}
    cpu = {name: Sample([c for _, c in values]) for name, values in times.items()}
    for name, _, target in runs[1:]:
        met = report.check(wall[name].p50 <= target, f"{name}: p50 {wall[name].p50:.3f} s > {target} s")
        report.rows.append(Row(name, wall[name], BASELINE, wall[BASELINE], f"p50 ≤ {target} s", met))
    report.extra.append(
        (
            f"CPU time of each start (user + system, {rounds} rounds): less moved by a busy machine than wall time",
            ["command", "CPU p50", "CPU p95", "over python -c pass (p50)"],
            [
                [f"CPU: {name}", ms(cpu[name].p50), ms(cpu[name].p95), ms(cpu[name].p50 - cpu[BASELINE].p50)]
                for name, _, _ in runs
            ],
        )
    )


def main() -> int:
    return plain_main("cli", __doc__, "10 rounds instead of 30", table)


if __name__ == "__main__":
    sys.exit(main())
