"""`cubicle run` as a user runs it: a subprocess, a scenario file, real Docker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import controller
from tests.eventually import eventually
from tests.integration.cli_helpers import cubicle, environment
from tests.integration.pty_helpers import owned_by, scenario_file

SCENARIO = {
    "name": "cli",
    "turns": [
        {
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "name": "read_file", "input": {"path": "README.md"}},
            ]
        },
        {"content": [{"type": "text", "text": "All done."}]},
    ],
}


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's sessions and layers go to a database of its own, never the user's."""
    monkeypatch.setenv("CUBICLE_DATA_DIR", str(tmp_path / "data"))


def test_json_events_sequence(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    repo = make_repo()
    done = cubicle("run", str(repo), "read the readme", "--json", "--scenario", scenario_file(tmp_path, SCENARIO))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events if e["type"] != "text"]
    assert kinds == [
        "session_started",
        "status",
        "usage",
        "tool_call",
        "tool_result",
        "usage",
        "changes",
        "session_finished",
    ]
    assert "".join(e["text"] for e in events if e["type"] == "text") == "Reading.All done."
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert len({e["session_id"] for e in events}) == 1
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["is_error"] is False and "# demo" in result["output"]
    assert events[-1]["reason"] == "end_turn" and events[-1]["steps"] == 2


def test_json_prints_a_commands_output_between_its_call_and_its_result(
    tmp_path: Path, make_repo: Callable[..., Path]
) -> None:
    command = "for i in 1 2 3; do echo line $i; sleep 0.3; done"
    scenario = {
        "name": "live",
        "turns": [
            {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": command}}]},
            {"content": [{"type": "text", "text": "ok"}]},
        ],
    }
    done = cubicle("run", str(make_repo()), "x", "--json", "--scenario", scenario_file(tmp_path, scenario))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events if e["type"] in ("tool_call", "command_output", "tool_result")]
    assert kinds[0] == "tool_call" and kinds[-1] == "tool_result" and set(kinds[1:-1]) == {"command_output"}
    assert len(kinds) >= 4  # the lines came in more than one piece
    live = [e for e in events if e["type"] == "command_output"]
    assert "".join(e["text"] for e in live) == "line 1\nline 2\nline 3\n"
    call_id = next(e["id"] for e in events if e["type"] == "tool_call")
    assert {e["tool_use_id"] for e in live} == {call_id}


def test_live_view_and_exit_code_on_step_limit(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    looping = {"name": "loop", "turns": [{"content": [{"type": "tool_use", "name": "list_files", "input": {}}]}] * 5}
    done = cubicle("run", str(make_repo()), "loop", "--max-steps", "2", "--scenario", scenario_file(tmp_path, looping))
    assert done.returncode == 3, done.stderr
    assert "list_files" in done.stdout and "max_steps" in done.stdout


def test_token_budget_exit_code(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    costly = {
        "name": "costly",
        "turns": [{"content": [{"type": "tool_use", "name": "list_files", "input": {}}], "input_tokens": 5000}] * 5,
    }
    done = cubicle(
        "run", str(make_repo()), "x", "--json", "--token-budget", "6000", "--scenario", scenario_file(tmp_path, costly)
    )
    assert done.returncode == 3
    assert json.loads(done.stdout.splitlines()[-1])["reason"] == "token_budget"


def test_missing_api_key_fails_before_any_container(make_repo: Callable[..., Path], docker_client: Any) -> None:
    instance = "cli-no-key-test"
    done = cubicle("run", str(make_repo()), "anything", env={"CUBICLE_INSTANCE": instance})
    assert done.returncode == 2
    assert "ANTHROPIC_API_KEY is not set" in done.stderr and "--scenario demo" in done.stderr
    assert "Traceback" not in done.stderr
    assert owned_by(docker_client, instance) == []


def test_docker_not_running_says_what_to_do(make_repo: Callable[..., Path], tmp_path: Path) -> None:
    done = cubicle(
        "run",
        str(make_repo()),
        "anything",
        "--scenario",
        scenario_file(tmp_path, SCENARIO),
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"},
    )
    assert done.returncode == 4
    assert "Docker is not reachable" in done.stderr and "Start the Docker engine" in done.stderr
    assert "Traceback" not in done.stderr


def _usage_error(done: subprocess.CompletedProcess[str]) -> str:
    """The one-sentence-per-problem message of a usage error, on one line."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "pydantic" not in done.stderr and "http" not in done.stderr
    return " ".join(done.stderr.split())


def test_usage_errors(tmp_path: Path) -> None:
    missing = _usage_error(cubicle("run", str(tmp_path / "missing"), "x"))
    assert f"REPO {tmp_path / 'missing'} does not exist; give the path of the repository's directory." in missing
    (tmp_path / "file").write_text("x")
    assert "is a file, not a directory" in _usage_error(cubicle("run", str(tmp_path / "file"), "x"))
    zero = _usage_error(cubicle("run", str(tmp_path), "x", "--max-steps", "0", "--scenario", "demo"))
    assert "--max-steps 0 is too small; use a whole number from 1 to 10000." in zero
    cpus = _usage_error(cubicle("run", str(tmp_path), "x", "--cpus", "0", "--memory", "9999999"))
    assert "--cpus 0.0 is too small; use a number above 0 and at most 64." in cpus
    assert "--memory 9999999 is too large; use a whole number from 64 to 65536." in cpus
    help_text = " ".join(cubicle("run", "--help").stdout.split())
    assert (
        "Exit codes" in help_text
        and "130 interrupted" in help_text
        and "143 / 129 stopped by SIGTERM / SIGHUP" in help_text
    )


def test_an_unknown_scenario_lists_the_shipped_ones(tmp_path: Path) -> None:
    unknown = _usage_error(cubicle("run", str(tmp_path), "x", "--scenario", "nosuch"))
    assert "--scenario nosuch: no such file, and no shipped scenario has that name" in unknown
    assert "one of: demo." in unknown
    (tmp_path / "broken.json").write_text('{"turns": 3}')
    broken = _usage_error(cubicle("run", str(tmp_path), "x", "--scenario", str(tmp_path / "broken.json")))
    assert "is not a valid scenario (turns: Input should be a valid array)" in broken


def test_approve_without_a_terminal_is_a_usage_error_before_any_container(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    instance = "approve-no-tty-test"
    done = cubicle(
        "run",
        str(make_repo()),
        "x",
        "--approve",
        "--scenario",
        scenario_file(tmp_path, SCENARIO),
        env={"CUBICLE_INSTANCE": instance},
    )
    message = _usage_error(done)
    assert "--approve asks y/n before each change, so it needs a terminal on stdin" in message
    assert owned_by(docker_client, instance) == []


def _start_long_run(tmp_path: Path, repo: Path, docker_client: Any, instance: str) -> subprocess.Popen[str]:
    """`cubicle run --json` on a command that sleeps 300 s, returned once the command runs in its container."""
    long = {
        "name": "long",
        "turns": [{"content": [{"type": "tool_use", "name": "run_command", "input": {"command": "sleep 300"}}]}],
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controller",
            "run",
            str(repo),
            "wait",
            "--json",
            "--command-timeout",
            "600",
            "--scenario",
            scenario_file(tmp_path, long),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment({"CUBICLE_INSTANCE": instance}),
    )
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if json.loads(line)["type"] == "tool_call":
                break
        # the container starts with the first call, just after its event (its layer mounted first)
        eventually(lambda: owned_by(docker_client, instance), timeout=30, what="the sandbox runs")
    except BaseException:
        process.kill()
        process.communicate()
        raise
    return process


def test_ctrl_c_kills_the_command_and_removes_the_container(
    tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    instance = "ctrl-c-test"
    process = _start_long_run(tmp_path, make_repo(), docker_client, instance)
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=30)  # a bound against a hang: the command sleeps far longer
    assert process.returncode == 130
    assert json.loads(rest.splitlines()[-1])["reason"] == "cancelled"
    assert owned_by(docker_client, instance) == []


def test_gc_removes_orphans_and_keeps_live_sandboxes(docker_client: Any) -> None:
    from controller.config import DEFAULT_IMAGE

    instance = "gc-test"
    dead = {"org.cubicle.managed": "true", "org.cubicle.session": "gone", "org.cubicle.owner": f"{instance}:999999:1"}
    alive = {
        "org.cubicle.managed": "true",
        "org.cubicle.session": "live",
        "org.cubicle.owner": f"{instance}:{os.getpid()}:{_ticks()}",
    }
    foreign = {"org.cubicle.managed": "true", "org.cubicle.session": "elsewhere", "org.cubicle.owner": "other-host:1:1"}
    made = [
        docker_client.containers.create(DEFAULT_IMAGE, ["true"], labels=labels) for labels in (dead, alive, foreign)
    ]
    try:
        done = cubicle("gc", env={"CUBICLE_INSTANCE": instance})
        assert done.returncode == 0, done.stderr
        remaining = {
            c.id
            for c in docker_client.containers.list(all=True, sparse=True, filters={"label": "org.cubicle.managed=true"})
        }
        assert made[0].id not in remaining and made[1].id in remaining and made[2].id in remaining
        assert "1 removed" in done.stdout
    finally:
        for container in made[1:]:
            container.remove(force=True)


def _ticks() -> str:
    return Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]


def test_sessions_lists_the_api_database(tmp_path: Path) -> None:
    from controller.server.store import Row, Store
    from controller.wire.events import Usage
    from controller.wire.limits import Limits

    store = Store(tmp_path / "cubicle.db")
    now = time.time()
    task = "a listed task whose words run on well past forty characters, all of them shown when piped"
    store.insert(
        Row(
            id="s_listed",
            repo="/r",
            task=task,
            model="m",
            status="idle",
            finish_reason="end_turn",
            usage=Usage(input_tokens=5),
            steps=2,
            limits=Limits(),
            created_at=now,
            updated_at=now,
        )
    )
    store.close()
    done = cubicle("sessions", env={"CUBICLE_DATA_DIR": str(tmp_path)})
    assert (
        done.returncode == 0
        and "s_listed" in done.stdout
        and "end_turn" in done.stdout
        and done.stdout.startswith("1 session\n")  # piped: the title is not padded to a width
        and task in done.stdout
        and time.strftime("%Y-%m-%d %H:%M", time.localtime(now)) in done.stdout
    )
    listed = cubicle("sessions", "--json", env={"CUBICLE_DATA_DIR": str(tmp_path)})
    (one,) = json.loads(listed.stdout)
    assert (one["id"], one["task"], one["finish_reason"]) == ("s_listed", task, "end_turn") and "epoch" not in one


def test_missing_image_names_the_command_to_run(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    done = cubicle(
        "run",
        str(make_repo()),
        "x",
        "--scenario",
        scenario_file(tmp_path, SCENARIO),
        env={"CUBICLE_IMAGE": "cubicle-sandbox:does-not-exist", "CUBICLE_AUTO_BUILD_IMAGE": "false"},
    )
    assert done.returncode == 4
    assert "cubicle-sandbox:does-not-exist is not present" in done.stderr and "cubicle image build" in done.stderr
    assert "never pulls it" in done.stderr  # Cubicle's own images are built, whatever CUBICLE_PULL_IMAGES says


def test_serve_refuses_a_public_address_without_a_token() -> None:
    done = cubicle("serve", "--host", "0.0.0.0", timeout=30)
    assert done.returncode == 2
    assert "Refusing to serve on 0.0.0.0 without CUBICLE_API_TOKEN" in done.stderr


def test_bad_environment_is_a_usage_error(tmp_path: Path) -> None:
    steps = _usage_error(cubicle("run", str(tmp_path), "x", env={"CUBICLE_LIMITS__MAX_STEPS": "many"}))
    assert "CUBICLE_LIMITS__MAX_STEPS='many' is not a whole number; use a whole number from 1 to 10000." in steps
    roots = _usage_error(cubicle("run", str(tmp_path), "x", env={"CUBICLE_REPO_ROOTS": "[bad"}))
    assert "CUBICLE_REPO_ROOTS='[bad' starts with '[' but is not a JSON list" in roots
    assert 'use a JSON list of directories such as ["/srv/repos"], or directories separated by commas.' in roots
    many = _usage_error(
        cubicle("run", str(tmp_path), "x", env={"CUBICLE_AUTO_BUILD_IMAGE": "maybe", "CUBICLE_LIMITS__BOGUS": "1"})
    )
    assert "CUBICLE_AUTO_BUILD_IMAGE='maybe' is not true or false; use true or false." in many
    assert "CUBICLE_LIMITS__BOGUS='1' is not a setting; the limits are: memory_mb," in many


def test_live_view_counts_steps_and_marks_a_failed_command(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    failing = {
        "name": "failing",
        "turns": [
            {"content": [{"type": "tool_use", "name": "run_command", "input": {"command": "echo nope >&2; exit 1"}}]},
            {"content": [{"type": "text", "text": "It failed."}]},
        ],
    }
    done = cubicle("run", str(make_repo()), "x", "--scenario", scenario_file(tmp_path, failing))
    assert done.returncode == 0, done.stderr
    result = next(line for line in done.stdout.splitlines() if line.lstrip().startswith(("✓", "✗")))
    assert result.lstrip().startswith("✗ exit 1 ") and "nope" in result
    assert "end_turn · 2 steps · " in done.stdout
    single = {"name": "single", "turns": [{"content": [{"type": "text", "text": "Nothing to do."}]}]}
    done = cubicle("run", str(make_repo("other")), "x", "--scenario", scenario_file(tmp_path, single))
    assert "end_turn · 1 step · " in done.stdout


def test_an_unreachable_model_api_is_one_sentence(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    env = {"ANTHROPIC_API_KEY": "x", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "CUBICLE_MODEL_RETRIES": "0"}
    done = cubicle("run", str(make_repo()), "x", env=env)
    assert done.returncode == 4
    summary = " ".join(done.stdout.split())
    # Our own words and hint only: what the SDK says of the refused connection changes between its releases.
    assert "error · 1 step · 0 tokens · Could not reach the model API: " in summary
    assert (
        summary.count("Could not reach the model API") == 1 and "Check ANTHROPIC_BASE_URL and the network." in summary
    )


def test_sessions_shows_stored_text_inert(tmp_path: Path) -> None:
    from controller.server.store import Row, Store

    store = Store(tmp_path / "cubicle.db")
    store.insert(
        Row.fresh(
            "s_hostile",
            "/r\x1b]8;;http://evil\x1b\\",
            "\x1b]0;PWNED\x07[conceal]x[/conceal]",
            "m",
            status="idle",
            finish_reason="end_turn",
            steps=1,
        )
    )
    store.close()
    done = cubicle("sessions", env={"CUBICLE_DATA_DIR": str(tmp_path), "COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    # stdout is no terminal, so Rich writes no escape of its own: any there would be the attacker's.
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "\\x1b]0;PWNED\\x07[conceal]x[/conceal]" in done.stdout and done.stdout.startswith("1 session\n")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_clean_up_like_ctrl_c(
    signum: signal.Signals, tmp_path: Path, make_repo: Callable[..., Path], docker_client: Any
) -> None:
    instance = f"signal-{signum.name.lower()}-test"
    process = _start_long_run(tmp_path, make_repo(), docker_client, instance)
    process.send_signal(signum)
    rest, errors = process.communicate(timeout=30)
    assert process.returncode == 128 + signum, errors
    finished = json.loads(rest.splitlines()[-1])
    assert finished["type"] == "session_finished" and finished["reason"] == "cancelled"
    assert owned_by(docker_client, instance) == []


def test_version_and_shell_completion() -> None:
    assert cubicle("--version").stdout.strip() == f"cubicle {controller.__version__}"
    script = Path(sys.executable).parent / "cubicle"
    # From a shell, as a user runs it: typer names the shell by looking at its parent processes
    # (the trailing `true` keeps bash from exec'ing the command in its own place).
    shown = subprocess.run(
        ["bash", "-c", f"'{script}' --show-completion; true"], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0 and "_cubicle_completion" in shown.stdout
    env = {**os.environ, "_CUBICLE_COMPLETE": "complete_bash", "COMP_WORDS": "cubicle ses", "COMP_CWORD": "1"}
    completed = subprocess.run([script], capture_output=True, text=True, env=env, timeout=60)
    assert completed.stdout.split() == ["sessions"]


def test_serve_warns_about_a_short_token_and_refuses_a_missing_repo_root(tmp_path: Path) -> None:
    done = cubicle(
        "serve", env={"CUBICLE_API_TOKEN": "short", "CUBICLE_REPO_ROOTS": f"{tmp_path},{tmp_path / 'gone'}"}, timeout=30
    )
    message = _usage_error(done)
    assert "warning: CUBICLE_API_TOKEN has only 5 characters; use at least 32 random ones" in message
    assert f"error: CUBICLE_REPO_ROOTS: {tmp_path / 'gone'} does not exist; list directories that exist" in message


def test_no_run_starts_below_the_free_space_floor(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    done = cubicle("run", str(make_repo()), "x", "--scenario", "demo", env={"CUBICLE_MIN_FREE_MB": str(1 << 24)})
    assert done.returncode == 4, done.stderr
    message = " ".join(done.stderr.split())
    assert "No new session: the filesystem of the data directory" in message
    assert "`cubicle gc --older-than 7d` removes old ended sessions" in message
    assert not (tmp_path / "data" / "workspaces").exists() or not any((tmp_path / "data" / "workspaces").iterdir())


def test_a_run_under_gvisor_and_the_runtimes_it_refuses(tmp_path: Path, make_repo: Callable[..., Path]) -> None:
    """`--runtime runsc` runs the same session under gVisor; a runtime the server does not allow, or a network
    runsc cannot give, is a usage error before anything starts."""
    repo = make_repo()
    scenario = scenario_file(tmp_path, SCENARIO)
    done = cubicle("run", str(repo), "read the readme", "--json", "--scenario", scenario, "--runtime", "runsc")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["is_error"] is False and "# demo" in result["output"] and events[-1]["reason"] == "end_turn"
    refused = _usage_error(cubicle("run", str(repo), "x", "--scenario", scenario, "--runtime", "kata"))
    assert "The runtime 'kata' is not allowed on this server; allowed: runc, runsc." in refused
    offline = _usage_error(
        cubicle("run", str(repo), "x", "--scenario", scenario, "--runtime", "runsc", "--network", "open")
    )
    assert "Sessions under runsc have no network" in offline and "--network none" in offline


def test_doctor_lists_the_engines_runtimes_and_which_are_allowed() -> None:
    done = cubicle("doctor", env={"CUBICLE_ALLOWED_RUNTIMES": "runc,kata"}, timeout=60)
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "runtime runc: allowed (default)" in said and "runtime runsc: not in CUBICLE_ALLOWED_RUNTIMES" in said
    assert "runtime kata: allowed, but the engine lacks it." in said and "/etc/docker/daemon.json" in said
    assert "image cubicle-sandbox:latest: present" in said
