"""A running command's output reaches the controller as it is printed, under each runtime (gVisor's passes the
guardian's relay): in pieces before the answer, the first while the command still runs (it waits for the host to
have seen it), never a split character, capped with a last piece that says so, while the answer (what the model
sees) is unchanged."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from controller.sandbox.docker import DockerSandbox
from controller.wire.protocol import CommandResult, call
from tests.sandbox_defaults import each_runtime  # noqa: F401 - each test once per runtime

TICKS = (
    "printf 'tick 1 ☃\\n'; for _ in $(seq 600); do [ -e /tmp/seen ] && break; sleep 0.05; done; "
    "[ -e /tmp/seen ] && echo seen; for i in 2 3 4 5 6; do printf 'tick %s ☃\\n' $i; sleep 0.25; done; echo done >&2"
)
"""Six ticks; after the first it waits (30 s at most) until the host, having received that tick live, says so."""


async def test_output_arrives_while_the_command_runs(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    box = sandbox_factory(make_repo())
    await box.start()
    arrivals: list[tuple[str, bool]] = []

    def arrived(text: str, cut: bool) -> None:
        if not arrivals:  # the first piece: tell the command, which waits for it
            box.container.exec_run(["touch", "/tmp/seen"])
        arrivals.append((text, cut))

    request = call("run_command", command=TICKS, timeout_s=60, live_output=1 << 16)
    result = await box.call(request, 90, arrived)
    assert isinstance(result, CommandResult), result
    assert result.exit_code == 0 and result.stdout.text.count("tick") == 6
    assert "seen" in result.stdout.text, "the first tick reached the host only once the command had ended"
    live = "".join(text for text, _ in arrivals)
    assert sorted(live.splitlines()) == sorted([f"tick {n} ☃" for n in range(1, 7)] + ["done", "seen"])
    assert not any(cut for _, cut in arrivals)
    assert len(arrivals) >= 3, arrivals  # pieces, not one lump at the end


async def test_past_its_cap_live_output_stops_with_a_mark_and_the_answer_is_whole(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    box = sandbox_factory(make_repo())
    await box.start()
    pieces: list[tuple[str, bool]] = []
    request = call("run_command", command="yes é | head -c 3000000", timeout_s=30, live_output=5000)
    result = await box.call(request, 60, lambda text, cut: pieces.append((text, cut)))
    assert isinstance(result, CommandResult) and result.stdout.total_bytes == 3_000_000
    text = "".join(piece for piece, _ in pieces)
    assert pieces[-1][1] and not any(cut for _, cut in pieces[:-1])
    assert 2500 <= len(text) <= 5000 and set(text) <= {"é", "\n", "\ufffd"}  # a character cut at the cap at most
    assert text.count("\ufffd") <= 1


async def test_no_live_output_unless_asked(
    make_repo: Callable[..., Path], sandbox_factory: Callable[..., DockerSandbox]
) -> None:
    box = sandbox_factory(make_repo())
    await box.start()
    pieces: list[tuple[str, bool]] = []
    result = await box.call(
        call("run_command", command="echo hi", timeout_s=30), 60, lambda *piece: pieces.append(piece)
    )
    assert isinstance(result, CommandResult) and result.stdout.text == "hi\n" and pieces == []
