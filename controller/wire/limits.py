"""What bounds one session: its ``Limits``, given per session in the API and clamped by the server's."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import NoDecode

from .network import NONE, NetworkPolicy


class Limits(BaseModel):
    """Everything that bounds one session. Field bounds are hard maximums; a server may clamp lower."""

    model_config = ConfigDict(extra="forbid")

    memory_mb: int = Field(
        2048, ge=64, le=65536, description="Memory of the sandbox container; swap is not added on top."
    )
    cpus: float = Field(2.0, gt=0, le=64, description="CPU share of the sandbox container, in cores.")
    pids: int = Field(512, ge=16, le=32768, description="Maximum number of processes and threads in the sandbox.")
    tmpfs_mb: int = Field(
        512, ge=16, le=16384, description="Size of each of the sandbox's /tmp and HOME (memory-backed)."
    )
    disk_mb: int = Field(
        10240,
        ge=32,
        le=1 << 22,
        description="Disk quota of the session's workspace layer in MiB: the agent's files, checkpoints and apply "
        "backups (CUBICLE_DISK_QUOTA=off turns quotas off).",
    )
    inodes: int = Field(
        1_000_000, ge=1024, le=1 << 30, description="Files and directories the session's workspace layer may hold."
    )
    io_mbps: int = Field(
        64,
        ge=1,
        le=1 << 20,
        description="Read and write bandwidth (MiB/s, each) of the device the session's workspace layer is on: its "
        "quota's loop device, else the data directory's disk. Binds direct and fsync'ed I/O (cgroup v1: not "
        "buffered writes).",
    )
    io_iops: int = Field(
        4000, ge=10, le=1 << 24, description="Read and write operations per second (each) on that same device."
    )
    names: int = Field(
        1_000_000,
        ge=1024,
        le=1 << 30,
        description="Entries (files, directories, links; each hard link by its name) the session's workspace layer "
        "may hold. Past it the turn ends with too_many_entries, and the layer can be rewound or discarded, not applied.",
    )
    network: Annotated[NetworkPolicy, NoDecode] = Field(  # a variable holds the text form, not JSON
        NONE, description="none (loopback only) < allow=HOST,... (only those hosts, through a proxy) < open."
    )
    runtime: str = Field(
        "runc",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="The OCI runtime the sandbox runs under: runc, runsc (gVisor: a kernel of its own between the "
        "agent and the host's), or another the engine knows; a request may name only those in allowed_runtimes.",
    )
    command_timeout_s: int = Field(
        120, ge=1, le=86400, description="Longest a run_command may take; longer requests are capped."
    )
    default_command_timeout_s: int = Field(60, ge=1, le=86400, description="Timeout of a run_command that names none.")
    op_timeout_s: int = Field(
        60, ge=1, le=3600, description="Deadline of the other tool calls, as the controller sees them."
    )
    max_steps: int = Field(
        50, ge=1, le=10000, description="Model requests per turn before the turn stops with max_steps."
    )
    token_budget: int = Field(
        2_000_000, ge=1000, le=1_000_000_000, description="Input + output tokens summed over the session."
    )
    wall_clock_s: int = Field(
        3600, ge=1, le=7 * 86400, description="Wall-clock time of a turn before it stops with timeout."
    )
    model_output_chars: int = Field(
        16384, ge=256, le=1 << 20, description="Largest tool output the model sees (head + tail)."
    )
    event_output_chars: int = Field(1 << 20, ge=1024, le=16 << 20, description="Largest tool output an event carries.")
    live_output_bytes: int = Field(
        64 << 10,
        ge=0,
        le=16 << 20,
        description="Bytes of each command's output shown while it runs (command_output events, stored with the "
        "session); past them the display says the rest was cut. 0: no live output. The model's result is unchanged.",
    )

    def clamp(self, ceiling: Limits) -> Limits:
        """Each numeric field lowered to ``ceiling``'s; the network policy to the ceiling's (``NetworkPolicy.clamp``).

        The runtime is not ordered: it is kept, and checked against the server's ``allowed_runtimes`` (``runtimes``).
        """
        values: dict[str, Any] = {}
        for name in type(self).model_fields:
            value, top = getattr(self, name), getattr(ceiling, name)
            if isinstance(value, NetworkPolicy):
                values[name] = value.clamp(top)
            else:
                values[name] = value if isinstance(value, str) else min(value, top)
        return Limits(**values)
