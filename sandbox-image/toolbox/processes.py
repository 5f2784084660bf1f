"""run_command (and ripgrep for search): run a command in a session of its own, to its end and no further.

Every command gets a bounded capture of each pipe, a deadline (TERM, then KILL after
KILL_GRACE_S), and when it ends its group is killed and strays are swept, so nothing it
started outlives it.
"""

from __future__ import annotations

import signal
import subprocess
import time

from . import groups
from .capture import Capture
from .errors import JSON
from .jobs import Job
from .limits import DEFAULT_COMMAND_OUTPUT, DEFAULT_COMMAND_TIMEOUT_S, UNKILLABLE_WAIT_S
from .live import Live
from .pump import pump

PATH_VARIABLE = "CUBICLE_PATH"
"""Set by the controller to the PATH the session's environment defines (devcontainer ``containerEnv``/``remoteEnv``,
``environment.toml``'s ``env``): a login shell's profile (Debian's ``/etc/profile`` sets PATH outright) must not
take it away, so it is set again after the profile, before the command."""
KEEP_PATH = 'PATH="$CUBICLE_PATH"; export PATH; '


def run_command(
    args: JSON, cwd: str, env: dict[str, str] | None, job: Job | None = None, live: Live | None = None
) -> JSON:
    """Run ``args["command"]`` with bash as a login shell in ``cwd``, with the environment the container started with
    (and the environment's PATH, when it defines one, whatever the profile did to it); with ``live``, its output
    is also sent as it comes."""
    command = args["command"]
    if env and env.get(PATH_VARIABLE):
        command = KEEP_PATH + command
    cmd = ["bash", "-lc", command]
    timeout = float(args.get("timeout_s") or DEFAULT_COMMAND_TIMEOUT_S)
    cap = args.get("max_output") or DEFAULT_COMMAND_OUTPUT
    result = run(cmd, cap, timeout, cwd, job=job, env=env, live=live)
    result["cancelled"] = bool(job and job.cancelled)
    return result


def run(
    cmd: list[str],
    cap: int,
    timeout: float,
    cwd: str,
    job: Job | None = None,
    env: dict[str, str] | None = None,
    live: Live | None = None,
) -> JSON:
    """Run ``cmd`` in a session of its own; when it ends, nothing it started is left (see groups.spawning)."""
    start = time.monotonic()
    with groups.spawning():
        return _run_counted(cmd, cap, timeout, cwd, job, env, start, live)


def _run_counted(
    cmd: list[str],
    cap: int,
    timeout: float,
    cwd: str,
    job: Job | None,
    env: dict[str, str] | None,
    start: float,
    live: Live | None,
) -> JSON:
    """Start, pump, then kill the group and sweep before the exit status is collected, so the answer comes last."""
    if job and job.cancelled:  # cancelled before it started: it never runs
        return _outcome(128 + signal.SIGKILL, Capture(0), Capture(0), False, start)
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    _raise_oom_score(proc.pid)
    group = proc.pid
    groups.add(group)
    if job:
        job.started(group)
    try:
        out, err, timed_out = pump(proc, cap, start + timeout, group, job, live)
    finally:
        if job:
            job.settle()
        groups.kill_group(group, signal.SIGKILL)
        groups.discard(group)
        groups.sweep_strays()
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
    try:
        code = proc.wait(timeout=UNKILLABLE_WAIT_S)
    except subprocess.TimeoutExpired:  # stuck in the kernel (e.g. D state); answer anyway
        code = -signal.SIGKILL
    return _outcome(code if code >= 0 else 128 - code, out, err, timed_out, start)


def _outcome(code: int, out: Capture, err: Capture, timed_out: bool, start: float) -> JSON:
    return {
        "exit_code": code,
        "stdout": out.result(),
        "stderr": err.result(),
        "timed_out": timed_out,
        "duration_s": round(time.monotonic() - start, 4),
    }


OOM_SCORE_TRIES = 500
"""How many times, 1 ms apart, to try raising a command's OOM score while its /proc files are still root's."""


def _raise_oom_score(pid: int) -> None:
    """Make the agent's processes, not the toolbox, the OOM killer's first choice.

    The toolbox is undumpable, so its child's /proc files belong to root until the child's exec has made it
    dumpable again; on a busy machine that can be just after ``Popen`` returns (seen on Linux 6.18, about once
    in 500 starts), so a refusal is tried again for a moment. A child already gone needs no score.
    """
    for _ in range(OOM_SCORE_TRIES):
        try:
            with open(f"/proc/{pid}/oom_score_adj", "w") as f:
                f.write("1000")
            return
        except PermissionError:
            time.sleep(0.001)
        except OSError:
            return
