"""What the tests' sandboxes are made with: who owns their repositories, whose they are, their limits."""

from __future__ import annotations

from controller.config import Limits

# The uid that owns a test repository (when the tests run as root) and so the one commands run as.
AGENT_UID = 1000

# The owner instance on the containers the fixtures start; the session-end sweep looks at no others.
TEST_INSTANCE = "cubicle-tests"

# Small, so that many sandboxes run side by side; the fixtures' default.
SANDBOX_LIMITS = Limits(memory_mb=512, pids=256, tmpfs_mb=64)

# The red-team battery's sandboxes (tests/security) also get one CPU.
SECURE_LIMITS = Limits(memory_mb=512, cpus=1.0, pids=256, tmpfs_mb=64)
