"""The toolbox as a package: what it may import, how the image runs it, and its answers on the wire.

The image runs the directory as ``python3 -I -S -u /opt/cubicle/toolbox``. While the
interpreter starts (runpy, before ``__main__`` rearranges sys.path) that directory is
sys.path[0], so a module of ours named like a stdlib one would replace it; and the package
must stay stdlib-only with sibling imports that are relative, or it would not import in the
image at all. The wire tests pin the exact bytes the controller reads.
"""

from __future__ import annotations

import ast
import io
import json
import sys
from pathlib import Path

import pytest
import toolbox
from hypothesis import given
from hypothesis import strategies as st
from toolbox.__main__ import serve
from toolbox.capture import Capture
from toolbox.protocol import NO_THREADS, Toolbox
from toolbox.workspace import Workspace

from controller.sandbox import images
from controller.wire.protocol import OPS, Response
from tests.eventually import eventually

PACKAGE = Path(toolbox.__file__).parent
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py"))


def test_no_module_takes_a_stdlib_name() -> None:
    assert MODULES, PACKAGE
    assert not set(MODULES) & sys.stdlib_module_names
    assert PACKAGE.name == "toolbox" and "toolbox" not in sys.stdlib_module_names


@pytest.mark.parametrize("module", MODULES)
def test_modules_import_only_the_stdlib_and_their_siblings_relatively(module: str) -> None:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] in sys.stdlib_module_names, f"{module}: import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            assert node.module and node.module.split(".")[0] in sys.stdlib_module_names | {"__future__"}, module
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 1, f"{module}: imports from outside the package"
            targets = [node.module] if node.module else [alias.name for alias in node.names]
            assert set(targets) <= set(MODULES), f"{module}: from . import {targets}"


def test_importing_the_package_runs_nothing() -> None:
    body = ast.parse((PACKAGE / "__init__.py").read_text()).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr), "__init__ is its docstring only"


def test_main_rearranges_sys_path_before_any_other_import() -> None:
    """Nothing may be imported (not even __future__) while the toolbox directory is still sys.path[0]."""
    body = ast.parse((PACKAGE / "__main__.py").read_text()).body
    first = [node for node in body if not isinstance(node, ast.Expr)][:3]
    assert [type(node) for node in first] == [ast.Import, ast.Import, ast.If]
    assert [alias.name for node in first[:2] for alias in node.names] == ["os", "sys"]  # type: ignore[attr-defined]


def test_the_image_runs_the_directory_the_context_ships() -> None:
    context = images.build_context()
    assert context is not None
    dockerfile = images.SANDBOX.dockerfile.read_text()
    assert "COPY toolbox/*.py /opt/cubicle/toolbox/\n" in dockerfile
    cmd = json.loads(next(line for line in dockerfile.splitlines() if line.startswith("CMD "))[4:])
    assert cmd == ["/usr/bin/python3", "-I", "-S", "-u", "/opt/cubicle/toolbox"]
    assert (context / images.TOOLBOX).resolve() == PACKAGE.resolve()


# ----------------------------------------------------------------------------- capture


@given(
    chunks=st.lists(st.binary(max_size=40), max_size=40),
    cap=st.integers(min_value=0, max_value=120),
)
def test_capture_is_the_head_the_tail_and_a_count_of_the_rest(chunks: list[bytes], cap: int) -> None:
    capture = Capture(cap)
    largest = 1
    for chunk in chunks:
        capture.feed(chunk)
        largest = max(largest, len(chunk))
        assert capture.tail_len < capture.tail_cap + largest  # memory stays within the cap and one chunk
    data = b"".join(chunks)
    head_cap = cap // 2
    head, rest = data[:head_cap], data[head_cap:]
    tail = rest[-(cap - head_cap) :] if cap - head_cap else b""
    omitted = len(data) - len(head) - len(tail)
    marker = f"\n[... {omitted} bytes omitted ...]\n" if omitted else ""
    assert capture.result() == {
        "text": head.decode(errors="replace") + marker + tail.decode(errors="replace"),
        "total_bytes": len(data),
        "truncated": omitted > 0,
    }


def test_capture_of_zero_keeps_nothing_but_the_count() -> None:
    capture = Capture(0)
    capture.feed(b"abc")
    assert capture.result() == {"text": "\n[... 3 bytes omitted ...]\n", "total_bytes": 3, "truncated": True}


def test_capture_splits_characters_at_the_edges_into_replacements() -> None:
    capture = Capture(4)
    capture.feed("é".encode() * 10)  # 20 bytes: the head keeps 2, the tail 2, both whole characters
    assert capture.result()["text"] == "é\n[... 16 bytes omitted ...]\né"
    capture = Capture(3)
    capture.feed("é".encode() * 10)  # head 1 byte, tail 2: half a character becomes U+FFFD
    assert capture.result()["text"] == "\ufffd\n[... 17 bytes omitted ...]\né"


# ----------------------------------------------------------------------------- the wire


@pytest.fixture
def box(tmp_path: Path) -> tuple[Toolbox, io.BytesIO]:
    out = io.BytesIO()
    (tmp_path / "a.txt").write_text("café ✓\n")
    return Toolbox(Workspace(str(tmp_path)), None, out), out


def test_answers_are_compact_utf8_json_lines(box: tuple[Toolbox, io.BytesIO]) -> None:
    toolbox, out = box
    toolbox.handle({"id": 7, "op": "read_file", "args": {"path": "a.txt"}})
    expected = (
        '{"id":7,"ok":true,"result":{"content":"     1\\tcafé ✓","first_line":1,"lines":1,"truncated":false,"size":10}}'
    )
    line = out.getvalue()
    assert line == expected.encode() + b"\n"  # not ASCII-escaped: the controller reads UTF-8
    response = Response.model_validate_json(line)
    OPS["read_file"].result.model_validate(response.result)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (
            {"id": 1, "op": "nope", "args": {}},
            '{"id":1,"ok":false,"error":{"kind":"unknown_op","message":"Unknown operation \'nope\'."}}',
        ),
        (
            {"id": 2, "op": "read_file", "args": {"path": "nope"}},
            '{"id":2,"ok":false,"error":{"kind":"not_found","message":"nope does not exist. List the directory to see what is there."}}',
        ),
        (
            {"id": 3, "op": "read_file", "args": {}},
            '{"id":3,"ok":false,"error":{"kind":"internal","message":"KeyError: \'path\'"}}',
        ),
        (
            {"id": "x", "op": "read_file"},
            '{"id":"x","ok":false,"error":{"kind":"internal","message":"KeyError: \'path\'"}}',
        ),
        ({"id": 4, "op": "cancel", "args": {"id": 99}}, '{"id":4,"ok":true,"result":{"cancelled":false}}'),
        (
            {"id": 5, "op": "write_file", "args": {"path": "w", "content": "✓"}},
            '{"id":5,"ok":true,"result":{"path":"w","bytes_written":3}}',
        ),
    ],
)  # fmt: skip - a table
def test_every_request_gets_exactly_one_answer(
    box: tuple[Toolbox, io.BytesIO], request_: dict[str, object], expected: str
) -> None:
    toolbox, out = box
    toolbox.handle(request_)
    assert out.getvalue() == expected.encode() + b"\n"
    if isinstance(request_["id"], int):  # what the controller sends; the toolbox echoes any id
        Response.model_validate_json(out.getvalue())


def test_ping_names_the_toolbox_process(box: tuple[Toolbox, io.BytesIO]) -> None:
    import os

    toolbox, out = box
    toolbox.handle({"id": 9, "op": "ping", "args": {}})
    assert json.loads(out.getvalue()) == {"id": 9, "ok": True, "result": {"pid": os.getpid(), "uid": os.getuid()}}


def test_serve_answers_bad_lines_with_id_null_and_skips_blank_ones(box: tuple[Toolbox, io.BytesIO]) -> None:
    toolbox, out = box
    serve(toolbox, [b"\n", b"  \n", b"{not json\n", b"[1, 2]\n", b'{"id": 3, "op": "ping", "args": {}}\n'])
    # the ping is answered on a thread of its own
    eventually(lambda: out.getvalue().count(b"\n") >= 3, what="three answers", timeout=10, interval=0.01)
    lines = out.getvalue().splitlines()
    assert lines[0] == (
        b'{"id":null,"ok":false,"error":{"kind":"bad_request",'
        b'"message":"invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"}}'
    )
    assert lines[1] == b'{"id":null,"ok":false,"error":{"kind":"bad_request","message":"a request is a JSON object"}}'
    assert json.loads(lines[2])["id"] == 3 and len(lines) == 3


def test_busy_message_says_what_to_do() -> None:
    assert "pids limit" in NO_THREADS and "kill them" in NO_THREADS


def test_the_sweep_refuses_to_run_outside_the_sandbox() -> None:
    """Imported on a host (as these tests do), the toolbox must never kill every other process."""
    from toolbox import groups

    with pytest.raises(RuntimeError, match="only inside its sandbox"):
        groups.sweep_strays()
