"""Every cap and timing the toolbox keeps, in one place, so the numbers the documentation quotes live in one file."""

from __future__ import annotations

READ_CHUNK = 1 << 16
"""Bytes read at a time from a pipe, or from a line too long to keep."""
KILL_GRACE_S = 2.0
"""Between the TERM and the KILL sent to a command that timed out."""
DRAIN_AFTER_EXIT_S = 0.25
"""How long pipes still held open (by background children) are read after the command exits."""
UNKILLABLE_WAIT_S = 5.0
"""How long a KILLed process stuck in the kernel (D state) is waited for before the answer goes out anyway."""
SWEEP_PASSES = 200
"""Sweeps of /proc after a command, repeated while a fork bomb keeps forking."""
KILL_ALL_PATIENCE_S = 0.5
"""How long kill(-1) is repeated until nothing but pid 1 and the toolbox is left (gVisor's kill(-1) is not atomic
against fork). Past it, a process slow to die is left to its end; one born meanwhile ends the sandbox."""
KILL_ALL_STUCK_S = 0.1
"""Past the patience, how long the same processes must outlast the kills to count as slow to die, not forking."""

MAX_LIST_ENTRIES = 1000
MAX_LINE_CHARS = 2000
DEFAULT_READ_LINES = 2000
MAX_READ_BYTES = 256 * 1024
MAX_SCAN_BYTES = 64 * 1024 * 1024
"""read_file reads at most this much of a file, so a huge sparse file or one endless line costs a bounded read."""
MAX_EDIT_FILE_BYTES = 16 * 1024 * 1024

SEARCH_TIMEOUT_S = 30.0
DEFAULT_SEARCH_OUTPUT = 64 * 1024
DEFAULT_COMMAND_TIMEOUT_S = 60
DEFAULT_COMMAND_OUTPUT = 1 << 20
