"""Undo the newest apply not yet reverted, putting the checkout back byte for byte.

Every path the apply touched must still hold what the session expects (what the apply
wrote, or what a later revert restored); otherwise the user changed it since, and
revert writes nothing and returns those paths, unless they are forced by name. Restores
run in the reverse order of the apply's steps, so a directory the apply created is
emptied before it is removed, and one it removed exists again before its entries return.
The reverted changes do not return to the layer: the sandbox then sees the checkout.
"""

from __future__ import annotations

from collections.abc import Collection

from pydantic import BaseModel, ConfigDict

from .apply import open_checkout, under_any
from .checkout import Checkout
from .errors import UnsafePathError
from .journal import ApplyRecord, Conflict, Expectations, Status, newest_unreverted, step_dirs, write
from .layer import Layer
from .records import FileType


class RevertResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    record: int  # the apply that was (or would have been) reverted
    reverted: list[str] = []
    conflicts: list[Conflict] = []  # when not empty, nothing was written


def revert(layer: Layer, force: Collection[str] = ()) -> RevertResult:
    record = newest_unreverted(layer)
    folder = layer.applies / str(record.number)
    with open_checkout(layer) as checkout:
        # What a kill in the middle of this apply (or of an earlier revert of it) left under a temporary name
        # would otherwise stay in the checkout, and look like an entry the user added to a directory to remove.
        checkout.remove_leftovers(record.temp_prefixes, step_dirs(record))
        expect = Expectations(layer)
        conflicts = _conflicts(checkout, expect, record, force)
        if conflicts:
            return RevertResult(record=record.number, conflicts=conflicts)
        record.temp_prefixes.append(checkout.temp_prefix)
        write(layer, record)
        for step in reversed(record.steps):
            checkout.restore(step.path, step.prior, folder)
        expect.update(checkout, [step.path for step in record.steps])
    record.status = Status.REVERTED
    write(layer, record)
    return RevertResult(record=record.number, reverted=[step.path for step in record.steps])


def _conflicts(checkout: Checkout, expect: Expectations, record: ApplyRecord, force: Collection[str]) -> list[Conflict]:
    """Paths changed since the apply (unless forced), and directories to remove that gained entries meanwhile.

    A pending record (the controller died mid-apply) has no known after-state: all its priors are restored.
    """
    conflicts = []
    touched = {step.path for step in record.steps}
    for step in record.steps:
        if (
            record.status == Status.APPLIED
            and not under_any(step.path, force)
            and not _unchanged(checkout, expect, step.path)
        ):
            conflicts.append(Conflict(path=step.path, reason="changed in the checkout since it was applied"))
        elif step.prior.type != FileType.DIR and _is_dir(checkout, step.path):
            added = sorted(n for n in checkout.names(step.path) if f"{step.path}/{n}" not in touched)
            if added:
                conflicts.append(
                    Conflict(path=step.path, reason=f"the directory holds entries added since: {added[:5]}")
                )
    return conflicts


def _is_dir(checkout: Checkout, rel: str) -> bool:
    try:
        held = checkout.identity(rel)
    except UnsafePathError:
        return False
    return held is not None and held.type == FileType.DIR


def _unchanged(checkout: Checkout, expect: Expectations, rel: str) -> bool:
    try:
        return expect.matches(rel, checkout.identity(rel))
    except UnsafePathError:
        return False
