"""The toolbox's live output: pieces in the order the pipes gave them, never a split character, gathered, capped."""

from __future__ import annotations

from toolbox.live import BATCH, WINDOW_S, Live


def collecting(limit: int) -> tuple[Live, list[tuple[str, bool]]]:
    sent: list[tuple[str, bool]] = []
    return Live(lambda text, cut: sent.append((text, cut)), limit), sent


def test_pieces_wait_for_the_window_and_keep_the_order_the_pipes_gave() -> None:
    live, sent = collecting(1000)
    live.feed(1, b"out ", 10.0)
    live.feed(2, b"err ", 10.01)
    live.feed(1, b"out again\n", 10.02)
    assert sent == [] and live.due() == 10.0 + WINDOW_S
    live.flush()
    assert sent == [("out err out again\n", False)] and live.due() is None
    live.flush()  # nothing waits: nothing is sent
    assert len(sent) == 1


def test_a_character_is_never_split_between_pieces_and_a_half_one_at_the_end_is_replaced() -> None:
    live, sent = collecting(1000)
    snowman = "☃".encode()
    live.feed(1, b"a" + snowman[:2], 0.0)
    live.flush()
    live.feed(1, snowman[2:] + b"b" + snowman[:1], 0.1)
    live.feed(2, b"\xff", 0.1)  # not UTF-8 at all, on the other pipe
    live.finish(0.2)
    assert sent == [("a", False), ("☃b\ufffd\ufffd", False)]
    live.feed(1, b"after the end", 0.3)
    live.flush()
    assert len(sent) == 2


def test_a_full_batch_goes_at_once() -> None:
    live, sent = collecting(10 * BATCH)
    live.feed(1, b"x" * BATCH, 0.0)
    assert sent == [("x" * BATCH, False)]


def test_past_the_limit_one_last_piece_says_so_and_nothing_more_is_sent() -> None:
    live, sent = collecting(10)
    live.feed(1, b"12345", 0.0)
    live.feed(1, b"6789abcdef", 0.0)
    live.feed(1, b"more", 0.0)
    live.finish(0.1)
    assert sent == [("123456789a", True)]


def test_output_that_ends_exactly_at_the_limit_is_not_called_cut() -> None:
    live, sent = collecting(10)
    live.feed(1, b"1234567890", 0.0)
    live.finish(0.1)
    assert sent == [("1234567890", False)]
    live, sent = collecting(10)
    live.feed(1, b"1234567890", 0.0)
    live.feed(1, b"!", 0.0)
    assert sent == [("1234567890", True)]
