"""The guardian's relay, once it has given up root (see ``guardian``): requests to the worker, checked answers back.

What goes to the controller is only one well-formed JSON answer per request it sent and has
not had answered, re-serialized: a line that does not parse, names no such request, or is too
long is dropped. The worker's stderr is passed on escaped to printable ASCII and bounded.
Imported by the guardian after its fork, so the worker never carries it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading

from .writes import write_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

MAX_ANSWER = 64 << 20
"""The longest answer line passed on; the controller refuses longer ones too (controller/channel.py)."""
MAX_STDERR = 64 << 10
"""What of the worker's stderr is passed on, in all."""
ANSWERS_AFTER_EXIT_S = 1.0
"""How long answers still in the worker's pipe are passed on after it exits."""
STDERR_AFTER_EXIT_S = 0.5
"""How long the worker's last words (why it exited) are passed on after it exits, before the guardian ends."""


class Relay:
    """Requests the controller has sent and not had answered; answers the worker gives for them."""

    def __init__(self, to_controller: IO[bytes], to_worker: IO[bytes]) -> None:
        self._out = to_controller
        self._worker = to_worker
        self._pending: set[int] = set()
        self._lock = threading.Lock()

    def request(self, line: bytes) -> None:
        """Note the id of a request, then pass it to the worker (the controller numbers its requests 1, 2, ...)."""
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        rid = message.get("id") if isinstance(message, dict) else None
        if type(rid) is int:
            with self._lock:
                self._pending.add(rid)
        write_all(self._worker, line)

    def answer(self, line: bytes) -> bool:
        """Pass on one line from the worker if it answers a pending request, or is a piece of its output (which
        leaves it pending); whether it went out."""
        try:
            message = json.loads(line)
        except ValueError:
            return False
        if not isinstance(message, dict):
            return False
        rid = message.get("id")
        piece = _piece(message)
        if piece is None and not isinstance(message.get("ok"), bool):
            return False
        with self._lock:
            if type(rid) is not int or rid not in self._pending:
                return False
            if piece is None:
                self._pending.discard(rid)
                body = {"id": rid, **{key: value for key, value in message.items() if key in ("ok", "result", "error")}}
            else:
                body = {"id": rid, "output": piece}
            write_all(
                self._out,
                json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace") + b"\n",
            )
        return True


def _piece(message: dict[str, object]) -> dict[str, object] | None:
    """The piece of live output a line carries (``{"id", "output": {"text", "truncated"}}``), or None."""
    output = message.get("output")
    if "ok" in message or not isinstance(output, dict):
        return None
    text, truncated = output.get("text"), output.get("truncated")
    if not isinstance(text, str) or not isinstance(truncated, bool):
        return None
    return {"text": text, "truncated": truncated}


def relay_answers(worker_out: IO[bytes], relay: Relay) -> None:
    """Pass answers on until the worker's stdout ends; if this thread fails, the guardian ends (and the container
    with it), so the controller sees the stream close at once rather than waiting out its deadlines."""
    try:
        while True:
            line = worker_out.readline(MAX_ANSWER + 1)
            if not line:
                return
            if len(line) > MAX_ANSWER:  # the rest of that line is skipped, and it is not passed on
                while line and not line.endswith(b"\n"):
                    line = worker_out.readline(MAX_ANSWER)
                continue
            try:
                relay.answer(line)
            except (RecursionError, ValueError):  # nested too deeply to decode or encode: not passed on
                continue
    except BaseException as err:  # noqa: BLE001 - the controller's stream broke, or a bug: end it all
        os.write(2, f"toolbox: the guardian's relay stopped: {type(err).__name__}: {err}\n".encode("ascii", "replace"))
        os._exit(1)


def relay_stderr(worker_err: IO[bytes], out: IO[bytes]) -> None:
    passed = 0
    while chunk := os.read(worker_err.fileno(), 4096):
        if passed >= MAX_STDERR:
            continue
        text = chunk.decode("utf-8", "replace")
        clean = "".join(c if c == "\n" or " " <= c <= "~" else f"\\x{ord(c) & 0xFF:02x}" for c in text)
        data = clean.encode()[: MAX_STDERR - passed]
        passed += len(data)
        write_all(out, data)


def guard(pid: int, to_worker: IO[bytes], from_worker: IO[bytes], worker_err: IO[bytes]) -> None:
    """Relay between the controller and the worker ``pid`` until it exits, then exit with its status."""
    relay = Relay(sys.stdout.buffer, to_worker)
    stderr = threading.Thread(target=relay_stderr, args=(worker_err, sys.stderr.buffer), daemon=True)
    stderr.start()
    answers = threading.Thread(target=relay_answers, args=(from_worker, relay), daemon=True)
    answers.start()

    def requests() -> None:
        with contextlib.suppress(OSError):  # the worker is gone: its exit ends the guardian below
            for line in sys.stdin.buffer:
                relay.request(line)
        with contextlib.suppress(OSError):
            to_worker.close()

    threading.Thread(target=requests, daemon=True).start()
    _, status = os.waitpid(pid, 0)
    answers.join(ANSWERS_AFTER_EXIT_S)  # a command that opened the worker's stdout may hold it open
    stderr.join(STDERR_AFTER_EXIT_S)  # the worker's last words say why it exited; os._exit would cut them off
    sys.stdout.flush()
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
