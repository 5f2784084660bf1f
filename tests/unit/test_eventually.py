"""The tests' own waiting helper: it returns the first good value, and its failure says what it waited for and saw."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.eventually import eventually, eventually_async


def test_returns_the_first_value_that_satisfies_until() -> None:
    counter = itertools.count()
    assert eventually(lambda: next(counter), until=lambda n: n >= 3, what="the count reaches 3", interval=0) == 3


def test_a_timeout_names_what_was_awaited_and_the_last_value() -> None:
    with pytest.raises(
        AssertionError, match=r"(?s)not within 0.05s: the list empties; the last try returned:\n\[1, 2\]"
    ):
        eventually(lambda: [1, 2], until=lambda found: found == [], what="the list empties", timeout=0.05)


def test_an_ignored_exception_is_retried_and_shown_and_any_other_ends_the_wait() -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("no server yet")

    with pytest.raises(AssertionError, match=r"the last try raised ConnectionRefusedError\('no server yet'\)"):
        eventually(refused, what="the server answers", timeout=0.05, ignoring=(ConnectionError,))
    with pytest.raises(ConnectionRefusedError):
        eventually(refused, what="the server answers", timeout=60)


def test_a_long_last_value_is_shown_by_its_end() -> None:
    with pytest.raises(AssertionError) as failed:
        eventually(lambda: "x" * 5000 + "the end", until=lambda _: False, what="a prompt", timeout=0)
    assert str(failed.value).endswith("x" * 100 + "the end") and len(str(failed.value)) < 3200


async def test_the_async_flavour_awaits_a_coroutine_or_takes_a_plain_value() -> None:
    counter = itertools.count()

    async def later() -> int:
        await asyncio.sleep(0)
        return next(counter)

    assert await eventually_async(later, until=lambda n: n == 2, what="two", interval=0) == 2
    assert await eventually_async(lambda: next(counter), until=lambda n: n == 5, what="five", interval=0) == 5
    with pytest.raises(AssertionError, match="not within 0s: never; the last try returned:\nFalse"):
        await eventually_async(lambda: False, what="never", timeout=0)
