"""The flock that says a process uses a layer's filesystem, as seen from the unmount after a use ends.

A child that is being started holds a copy of every fd until its exec: the use it copied is still held for
that moment, and the unmount must wait it out rather than leave the filesystem mounted for good.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from controller.workspace.quota import flock_within

HOLD_FOR_S = 0.3
# A child with a copy of the parent's fd (as one forked between fork and exec has): it keeps the shared flock
# for HOLD_FOR_S after the parent closed its own fd, then lets it go by exiting.
HOLDER = f"import fcntl, sys, time; fcntl.flock(int(sys.argv[1]), fcntl.LOCK_SH); print('held', flush=True); time.sleep({HOLD_FOR_S})"


def test_an_unmount_waits_out_a_hold_that_a_child_still_copies(tmp_path: Path) -> None:
    image = tmp_path / "disk.img"
    image.write_bytes(b"")
    hold = os.open(image, os.O_RDONLY)
    fcntl.flock(hold, fcntl.LOCK_SH)
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(hold)], pass_fds=(hold,), stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        os.close(hold)  # this process's use ends; the child's copy of the same open file still holds the flock
        probe = os.open(image, os.O_RDONLY)
        try:
            assert not flock_within(probe, 0.0), "the copy holds it: an impatient unmount is refused"
            assert flock_within(probe, HOLD_FOR_S * 20), "a patient one gets it once the copy is gone"
        finally:
            os.close(probe)
    finally:
        child.kill()
        child.communicate()


def test_a_real_holder_is_waited_for_only_as_long_as_asked(tmp_path: Path) -> None:
    image = tmp_path / "disk.img"
    image.write_bytes(b"")
    other = os.open(image, os.O_RDONLY)  # another open file: another process's use, as far as flock is concerned
    fcntl.flock(other, fcntl.LOCK_SH)
    probe = os.open(image, os.O_RDONLY)
    try:
        assert not flock_within(probe, 0.05)
    finally:
        os.close(probe)
        os.close(other)
