"""Context management: the store keeps the whole transcript; the model sees a bounded view of it.

The view is a pure, deterministic function of the stored messages and a list of edits, so a
reloaded session rebuilds the identical request, and between two edits each request starts
with the previous one (the prompt cache keeps hitting). Edits are watermarks that only move
forward:

- ``mask`` up to message *i*: every tool result before *i* becomes a short placeholder that
  says what was cleared and how to get it back (``is_error`` kept), and large file contents
  in write_file/edit_file calls before *i* are cleared the same way;
- ``compact`` up to message *k* (an assistant message): everything before *k* becomes one
  user message holding the user's own words verbatim (the task and every follow-up), the
  summary, and the files the agent wrote or edited; ``trim`` is the same without a summary.

Tool-use/tool-result pairing and role alternation hold by construction: a compaction cuts
right before an assistant message, and masking changes content, never structure.

The ``server`` strategy leaves the clearing to the API (Anthropic's context-management beta,
``clear_tool_uses``, with the same thresholds as ``mask``): the view is sent whole, and
trimmed here only when the API still finds the prompt too long. Compatible endpoints that
lack the beta refuse such requests, so it is never the default.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ..wire.policies import ContextPolicy, Edit, EditKind

Message = dict[str, Any]
CLEARED_INPUT_CHARS = 2000
"""write_file/edit_file string arguments longer than this are cleared by a mask."""
CHARS_PER_TOKEN = 4
SETTLED_VIEWS = 4
"""Views a Measure remembers: the current one and the planner's trial views."""


class Measure:
    """What view and plan remember between the steps of one conversation, so a step costs what it added.

    Entries are keyed by message object and checked against its content list, which is replaced
    (never changed in place) when a user text merges into the message. One per conversation: it
    holds the messages it has measured.
    """

    def __init__(self) -> None:
        self._plain: dict[int, tuple[Message, Any, int]] = {}
        self._masked: dict[int, tuple[Message, Any, Message, int]] = {}
        self._names: dict[str, str] = {}
        self._named = 0
        self._settled: dict[tuple[int, int, str | None], tuple[list[tuple[Message, int]], int]] = {}

    def size(self, message: Message) -> int:
        """Characters of ``message`` as JSON."""
        hit = self._plain.get(id(message))
        if hit is not None and hit[0] is message and hit[1] is message["content"]:
            return hit[2]
        size = len(json.dumps(message, ensure_ascii=False))
        self._plain[id(message)] = (message, message["content"], size)
        return size

    def masked(self, message: Message, messages: list[Message]) -> tuple[Message, int]:
        """``message`` with its tool results (and large file contents) cleared, and its size."""
        hit = self._masked.get(id(message))
        if hit is not None and hit[0] is message and hit[1] is message["content"]:
            return hit[2], hit[3]
        shown = _masked(message, self.names(messages))
        size = len(json.dumps(shown, ensure_ascii=False))
        self._masked[id(message)] = (message, message["content"], shown, size)
        return shown, size

    def settled(
        self, messages: list[Message], key: tuple[int, int, str | None], upto: int
    ) -> list[tuple[Message, int]]:
        """The view of ``messages[:upto]`` under the watermarks ``key`` (cut, mask, summary), a new list.

        Remembered per key and extended as ``upto`` grows: between edits, a step adds only its own messages.
        """
        mask_upto = key[1]
        items, done = self._settled.pop(key, ([], 0))
        if not items or upto < done:
            items, done = self._derived(messages, key, upto)
        for index in range(done, upto):
            message = messages[index]
            items.append(self.masked(message, messages) if index < mask_upto else (message, self.size(message)))
        self._settled[key] = (items, max(done, upto))  # newest last; the planner's trial views come and go
        while len(self._settled) > SETTLED_VIEWS:
            del self._settled[next(iter(self._settled))]
        return list(items)

    def _derived(
        self, messages: list[Message], key: tuple[int, int, str | None], upto: int
    ) -> tuple[list[tuple[Message, int]], int]:
        """A start for a new key's settled view: a remembered one with the same cut and a lower mask, masked
        further (a mask edit then costs the messages it clears, not the whole view), or just the head."""
        cut, mask_upto, summary = key
        offset = 1 if cut else 0
        bases = [(k[1], v) for k, v in self._settled.items() if (k[0], k[2]) == (cut, summary) and k[1] <= mask_upto]
        if not bases:
            head = _compacted(messages[:cut], summary) if cut else None
            return ([(head, len(json.dumps(head, ensure_ascii=False)))] if head else []), cut
        lower, (base, base_done) = max(bases, key=lambda b: b[0])
        done = min(base_done, upto)
        items = base[: offset + done - cut]
        for index in range(max(cut, lower), min(mask_upto, done)):
            items[offset + index - cut] = self.masked(messages[index], messages)
        return items, done

    def names(self, messages: list[Message]) -> dict[str, str]:
        """Tool names by tool_use id, read from assistant messages not read before."""
        if len(messages) < self._named:
            self._names, self._named = {}, 0
        self._names.update(_tool_names(messages[self._named :]))
        self._named = len(messages)
        return self._names


def view(messages: list[Message], edits: Iterable[Edit], measure: Measure | None = None) -> list[Message]:
    """The messages the model is sent: ``messages`` with ``edits`` applied; neither argument is changed."""
    return [shown for shown, _ in _shown(messages, list(edits), measure or Measure())]


def tokens(messages: list[Message], edits: Iterable[Edit], measure: Measure | None = None) -> int:
    """``estimate_tokens(view(messages, edits))``, from remembered sizes."""
    sizes = [size for _, size in _shown(messages, list(edits), measure or Measure())]
    return (sum(sizes) + 2 * len(sizes)) // CHARS_PER_TOKEN


def _shown(messages: list[Message], edits: list[Edit], measure: Measure) -> list[tuple[Message, int]]:
    """Each message of the view with its size in characters."""
    mask_upto = cut = 0
    summary: str | None = None
    for edit in edits:
        if edit.kind == "mask":
            mask_upto = max(mask_upto, edit.upto)
        elif edit.upto >= cut:
            cut, summary = edit.upto, (edit.summary if edit.kind == "compact" else None)
    if cut and (cut >= len(messages) or messages[cut]["role"] != "assistant"):
        raise ValueError(f"a compaction must cut right before an assistant message, not at message {cut}")
    settled = max(cut, min(mask_upto, len(messages) - 1))  # before the last message, nothing changes any more
    shown = measure.settled(messages, (cut, mask_upto, summary), settled)
    for index in range(settled, len(messages)):
        message = messages[index]
        shown.append(measure.masked(message, messages) if index < mask_upto else (message, measure.size(message)))
    return shown


def plan(
    messages: list[Message],
    edits: list[Edit],
    policy: ContextPolicy,
    max_tokens: int,
    force: bool = False,
    measure: Measure | None = None,
) -> Edit | None:
    """The edit the next request needs, if any: mask first, compact (summarize) rarely, trim at the ceiling.

    ``force`` compacts whatever the thresholds say (the API refused the prompt as too long). A
    ``compact`` edit comes back without its summary; the caller asks the model for one (or, if that
    fails, records it as ``trim``). Call again after applying an edit: one may not be enough.
    """
    if policy.strategy == "off":
        return None
    measure = measure or Measure()
    before = tokens(messages, edits, measure)
    if policy.strategy != "server":  # under server the API clears old results itself; here only the ceiling
        mask = _mask(messages, edits, policy, before, measure)
        if mask is not None:
            return mask
    return _compact_or_trim(messages, edits, policy, before, max_tokens, force, measure)


def _compact_or_trim(
    messages: list[Message],
    edits: list[Edit],
    policy: ContextPolicy,
    before: int,
    max_tokens: int,
    force: bool,
    measure: Measure,
) -> Edit | None:
    """A compaction past ``compact_at`` (or ``force``d) under auto, a trim past the ceiling (or forced) otherwise."""
    over = force or (policy.strategy == "auto" and before >= policy.compact_at * policy.window)
    # Under server, what is sent is larger than what the model sees (the API clears it); the API's own
    # "prompt is too long" (force) is then the ceiling.
    ceiling = policy.strategy != "server" and before > policy.ceiling(max_tokens)
    cut = _cut_keeping(messages, edits, policy.keep_recent, measure) if over or ceiling else None
    if cut is None:
        return None
    kind: EditKind = "compact" if over and policy.strategy == "auto" else "trim"
    return Edit(kind=kind, upto=cut, tokens_before=before)


def _mask(
    messages: list[Message], edits: list[Edit], policy: ContextPolicy, before: int, measure: Measure
) -> Edit | None:
    """A mask of all but the newest results, when the view has reached ``mask_at`` and that frees enough."""
    masked = max([e.upto for e in edits if e.kind == "mask"], default=0)
    if before < policy.mask_at * policy.window or (upto := mask_keeping(messages, policy.keep_results)) <= masked:
        return None
    after = tokens(messages, [*edits, Edit(kind="mask", upto=upto)], measure)
    if before - after < policy.min_free:
        return None
    return Edit(kind="mask", upto=upto, tokens_before=before, tokens_after=after)


def _cut_keeping(messages: list[Message], edits: list[Edit], keep: int, measure: Measure) -> int | None:
    """The latest cut point that keeps at least ``keep`` tokens after it and moves past earlier cuts."""
    done = max([e.upto for e in edits if e.kind != "mask"], default=0)
    kept = 0
    for index in range(len(messages) - 1, done, -1):
        kept += measure.size(messages[index]) // CHARS_PER_TOKEN
        if kept >= keep and messages[index]["role"] == "assistant":
            return index
    return None


def estimate_tokens(messages: list[Message], extra_chars: int = 0) -> int:
    """A rough size of ``messages`` as a prompt: serialized characters over four."""
    return (len(json.dumps(messages, ensure_ascii=False)) + extra_chars) // CHARS_PER_TOKEN


def result_indexes(messages: list[Message]) -> list[int]:
    """Indexes of the messages that carry tool results, oldest first."""
    return [i for i, m in enumerate(messages) if any(_is_result(b) for b in _blocks(m))]


def mask_keeping(messages: list[Message], keep_results: int) -> int:
    """The mask watermark that clears every tool result but those in the newest ``keep_results`` messages.

    Counted in messages, not blocks: a watermark is a message index, and one message answers all the
    calls of one step.
    """
    holders = result_indexes(messages)
    if len(holders) <= keep_results:
        return 0
    return holders[-keep_results] if keep_results else len(messages)


def user_words(messages: list[Message]) -> list[str]:
    """Every text the user wrote (the task, then each follow-up), in order."""
    return [b["text"] for m in messages if m["role"] == "user" for b in _blocks(m) if b.get("type") == "text"]


def files_changed(messages: list[Message]) -> list[str]:
    """Paths the agent wrote or edited, first change first, each once."""
    paths: dict[str, None] = {}
    for block in _tool_uses(messages):
        path = block.get("input", {}).get("path") if isinstance(block.get("input"), dict) else None
        if block.get("name") in ("write_file", "edit_file") and isinstance(path, str):
            paths.setdefault(path, None)
    return list(paths)


# --------------------------------------------------------------------------- building blocks


def _blocks(message: Message) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _is_result(block: dict[str, Any]) -> bool:
    return block.get("type") == "tool_result"


def _tool_uses(messages: list[Message]) -> Iterator[dict[str, Any]]:
    for message in messages:
        if message["role"] == "assistant":
            yield from (b for b in _blocks(message) if b.get("type") == "tool_use")


def _tool_names(messages: list[Message]) -> dict[str, str]:
    return {b["id"]: b["name"] for b in _tool_uses(messages)}


def _masked(message: Message, names: dict[str, str]) -> Message:
    blocks = [_masked_block(b, names) for b in _blocks(message)]
    return {**message, "content": blocks}


def _masked_block(block: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    if _is_result(block):
        size = len(_text_of(block.get("content")))
        name = names.get(block.get("tool_use_id", ""), "tool")
        cleared = f"[cleared to save context: {name} output, {size:,} characters. Call {name} again if you need it.]"
        return {**block, "content": cleared}
    if block.get("type") == "tool_use" and block.get("name") in ("write_file", "edit_file"):
        return {**block, "input": _cleared_input(block.get("input"))}
    return block


def _cleared_input(arguments: Any) -> Any:
    if not isinstance(arguments, dict):
        return arguments
    return {
        key: f"[cleared to save context: {len(value):,} characters]"
        if isinstance(value, str) and len(value) > CLEARED_INPUT_CHARS
        else value
        for key, value in arguments.items()
    }


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def _compacted(dropped: list[Message], summary: str | None) -> Message:
    """The one user message that stands for ``dropped``: the user's words, the summary, the files changed."""
    parts = ["Earlier in this session (older messages were compacted to save context). What the user wrote:"]
    parts += [f"<user>\n{text}\n</user>" for text in user_words(dropped)]
    if summary:
        parts.append(f"<summary>\n{summary}\n</summary>")
    else:
        parts.append("(The older turns were trimmed without a summary; re-read files before relying on them.)")
    changed = files_changed(dropped)
    if changed:
        parts.append("Files written or edited so far: " + ", ".join(changed))
    return {"role": "user", "content": [{"type": "text", "text": "\n\n".join(parts)}]}
