"""Bounded text: what the model sees of a long output is its head and tail, with a marker."""

from __future__ import annotations


def marker(omitted: int, unit: str = "characters") -> str:
    return f"\n[... {omitted} {unit} omitted ...]\n"


def truncate_middle(text: str, limit: int) -> str:
    """Keep the first ``limit // 2`` and the last ``limit - limit // 2`` characters of ``text``.

    The result holds exactly ``limit`` characters of the original plus a marker that
    says how many were left out; text within the limit comes back unchanged.
    """
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return text[:head] + marker(len(text) - limit) + (text[-tail:] if tail else "")
