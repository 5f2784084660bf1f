"""What each apply did, kept on disk so a later apply or revert (or a restarted controller) knows.

``applies/<n>.json`` lists the steps of apply ``n``: for each path, the change applied,
what the checkout held before (``Prior``; file bytes saved beside it in ``applies/<n>/``)
and the identity right after. It is written once as ``pending`` before the first write
to the checkout, and again as ``applied`` when done; a ``pending`` record found later
means the controller died mid-apply, and revert restores every prior it lists.

``expected.json`` holds, per path, what this session last wrote or restored there (None
for absent). A path not in it is expected to be as the baseline recorded it.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..errors import LayerMissingError, UnsafePathError
from ..wire.changeset import Change, FileType
from . import contents
from .baseline import load_blobs
from .checkout import Checkout, Prior
from .layer import Layer
from .records import Identity, load, read_json, save, write_json


class Status(StrEnum):
    PENDING = "pending"
    APPLIED = "applied"
    REVERTED = "reverted"


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    change: Change
    prior: Prior
    after: list[Any] | None = None  # Identity row right after the apply; None: absent


class ApplyRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    number: int
    status: Status
    steps: list[Step]
    temp_prefixes: list[str] = []
    """The temporary-name prefixes of the apply and of each revert of it, recorded before they wrote."""


def step_dirs(record: ApplyRecord) -> set[str]:
    """The checkout directories an apply or revert of ``record`` writes temporary files into."""
    return {step.path.rpartition("/")[0] for step in record.steps}


def record_path(layer: Layer, number: int) -> Path:
    return layer.applies / f"{number}.json"


def numbers(layer: Layer) -> list[int]:
    return sorted(int(p.stem) for p in layer.applies.glob("*.json") if p.stem.isdigit())


def next_number(layer: Layer) -> int:
    """The next apply's number: after every record and every saved-originals folder, so that a folder whose apply
    failed before its record was written (a full disk quota, a kill) is never reused."""
    taken = [int(p.name.split(".")[0]) for p in layer.applies.iterdir() if p.name.split(".")[0].isdigit()]
    return max(taken, default=0) + 1


def write(layer: Layer, record: ApplyRecord) -> None:
    save(record_path(layer, record.number), record)


def unreverted(layer: Layer) -> list[ApplyRecord]:
    """Every apply of the session not reverted, oldest first."""
    records = (load(record_path(layer, n), ApplyRecord) for n in numbers(layer))
    return [r for r in records if r.status != Status.REVERTED]


def interrupted(layer: Layer) -> list[ApplyRecord]:
    """The applies cut short by a kill: written as pending, never settled."""
    return [r for r in unreverted(layer) if r.status == Status.PENDING]


def settle(layer: Layer, record: ApplyRecord, after: dict[str, list[Any] | None]) -> None:
    """Mark ``record`` applied, with ``after``: what each step's path held once written."""
    for step in record.steps:
        step.after = after[step.path]
    record.status = Status.APPLIED
    write(layer, record)


def newest_unreverted(layer: Layer) -> ApplyRecord:
    for number in reversed(numbers(layer)):
        record = load(record_path(layer, number), ApplyRecord)
        if record.status != Status.REVERTED:
            return record
    raise LayerMissingError("No apply of this session is left to revert.")


def _written_blobs_file(layer: Layer) -> Path:
    return layer.expected_file.with_name("expected-blobs.json")


def _content_id(checkout: Checkout, rel: str) -> str | None:
    try:
        return contents.blob_id(checkout.fd, rel) or None
    except (OSError, UnsafePathError):
        return None


class Expectations:
    """What each path should hold now, as far as this session knows: its identity, and its content id where known.

    A path holds what is expected when its identity is the expected one, or when only its metadata moved: the
    same type and mode, and the same symlink target or content id (``contents``). So a file rewritten with the
    same bytes (``git checkout``, a stash popped, ``touch``, an edit undone by hand) is no conflict.
    """

    def __init__(self, layer: Layer) -> None:
        self.layer = layer
        self.baseline = layer.baseline()
        path = layer.expected_file
        self.rows: dict[str, list[Any] | None] = read_json(path) if path.exists() else {}
        self._written = _written_blobs_file(layer)
        self.written: dict[str, str | None] = read_json(self._written) if self._written.exists() else {}
        """Content ids of what this session's applies and reverts left, by path (None: none known)."""
        self._started: dict[str, str] | None = None

    def get(self, rel: str) -> Identity | None:
        if rel in self.rows:
            row = self.rows[rel]
            return None if row is None else Identity.from_row(row)
        return self.baseline.get(rel)

    def blob(self, rel: str) -> str | None:
        """The content id the path should hold, if known."""
        if rel in self.rows:
            return self.written.get(rel)
        if self._started is None:
            self._started = load_blobs(self.layer.baseline_file)  # read only when metadata alone did not decide
        return self._started.get(rel)

    def matches(self, rel: str, current: Identity | None) -> bool:
        expected = self.get(rel)
        if expected is None or current is None:
            return expected is None and current is None
        return expected.same(current)

    def holds(self, checkout: Checkout, rel: str, current: Identity | None) -> bool:
        """Whether ``rel`` (whose identity is ``current``) holds what is expected, by metadata or else by content."""
        if self.matches(rel, current):
            return True
        expected = self.get(rel)
        if expected is None or current is None or (expected.type, expected.mode) != (current.type, current.mode):
            return False
        if current.type == FileType.SYMLINK:
            return expected.target == current.target
        # The same size first: an index's id is of the bytes git's filters cleaned (CRLF made LF, an LFS pointer),
        # which a file of the checkout's own size never matches; and a file that grew is not read to find out.
        blob = self.blob(rel) if current.type == FileType.FILE and current.size == expected.size else None
        if not blob:
            return False
        try:
            return contents.blob_id(checkout.fd, rel) == blob
        except (OSError, UnsafePathError):
            return False

    def update(self, checkout: Checkout, paths: list[str]) -> dict[str, list[Any] | None]:
        """Record what ``paths`` hold now (identities and content ids); returns the identities' rows."""
        fresh: dict[str, list[Any] | None] = {}
        for rel in paths:
            try:
                now = checkout.identity(rel)
            except UnsafePathError:  # below a symlink the user put there: nothing of ours
                now = None
            fresh[rel] = None if now is None else now.as_row()
            self.written[rel] = _content_id(checkout, rel) if now is not None and now.type == FileType.FILE else None
        self.rows.update(fresh)
        write_json(self.layer.expected_file, self.rows)
        write_json(self._written, self.written)
        return fresh
