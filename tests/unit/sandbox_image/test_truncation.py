"""Head + tail + marker, with exact sizes, on both sides of the sandbox boundary."""

from __future__ import annotations

import re

import pytest
from toolbox.capture import Capture

from controller.agent.output import truncate_middle


def test_text_within_limit_is_unchanged() -> None:
    assert truncate_middle("abc", 3) == "abc"
    assert truncate_middle("", 10) == ""


@pytest.mark.parametrize("limit", [1, 2, 7, 10, 1000])
def test_keeps_exact_head_and_tail(limit: int) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(5000))
    out = truncate_middle(text, limit)
    head, tail = limit // 2, limit - limit // 2
    assert out.startswith(text[:head])
    assert out.endswith(text[-tail:])
    assert f"[... {5000 - limit} characters omitted ...]" in out
    kept = out.replace(f"\n[... {5000 - limit} characters omitted ...]\n", "")
    assert len(kept) == limit


def test_capture_keeps_bounded_head_and_tail() -> None:
    capture = Capture(10)
    for i in range(1000):
        capture.feed(f"{i:04d}".encode())
    result = capture.result()
    assert result["total_bytes"] == 4000
    assert result["truncated"] is True
    full = "".join(f"{i:04d}" for i in range(1000))
    assert result["text"] == full[:5] + "\n[... 3990 bytes omitted ...]\n" + full[-5:]
    assert capture.tail_len <= 10 + 4  # never much more than the cap is held


def test_capture_small_stream_is_whole_and_invalid_utf8_is_replaced() -> None:
    capture = Capture(100)
    capture.feed(b"ok \xff\xfe end")
    result = capture.result()
    assert result == {"text": "ok \ufffd\ufffd end", "total_bytes": 9, "truncated": False}


def test_capture_memory_stays_bounded_for_many_chunks() -> None:
    capture = Capture(1 << 16)
    chunk = b"y\n" * 32768
    for _ in range(2000):  # 128 MiB through the capture
        capture.feed(chunk)
    assert len(capture.head) == 1 << 15
    assert capture.tail_len < (1 << 15) + len(chunk)
    text = str(capture.result()["text"])
    omitted = int(re.search(r"\[\.\.\. (\d+) bytes omitted", text).group(1))  # type: ignore[union-attr]
    assert omitted == 2000 * len(chunk) - (1 << 16)
