"""What a setup's (or an image build's) proxy refused or could not reach, said to whoever can allow it.

A client behind the proxy often shows only a status (``403 Forbidden`` for an HTTPS request: the proxy's page
explaining the refusal is never shown), so the preparation reads the proxy's log (``egress.refusals``) and names
each host, and for a host not on the list the line of the environment's definition that would allow it.
"""

from __future__ import annotations

import asyncio

from ..sandbox.egress import Egress, Refusal
from ..wire.envspec import CUBICLE_FILE, DEFINITION_FILES, Environment
from ..wire.network import NetworkPolicy

LOG_SETTLE_S = 0.3
"""How long a failure waits for the proxy's last log lines, when none says what it refused: the engine copies a
container's output to its log a moment after it is written."""


async def refused_by(gate: Egress, settle: bool = False) -> list[Refusal]:
    """What ``gate``'s proxy refused or could not reach; with ``settle``, read again a moment later if nothing."""
    found = await asyncio.to_thread(gate.refusals)
    if not found and settle:
        await asyncio.sleep(LOG_SETTLE_S)
        found = await asyncio.to_thread(gate.refusals)
    return found


def refused_text(found: list[Refusal], environment: Environment) -> str:
    """What the setup's proxy refused or could not reach, and the setting of ``environment``'s definition that
    allows a refused host (its own hosts kept); empty for nothing."""
    if not found:
        return ""
    lines = [f"The setup's network refused or could not reach: {', '.join(map(str, found))}."]
    refused = [refusal.pattern for refusal in found if refusal.not_listed]
    if refused:
        source = environment.source
        key = "customizations.cubicle.setup_network" if source.endswith("devcontainer.json") else "setup_network"
        where = source if source.endswith(DEFINITION_FILES) else CUBICLE_FILE
        asked = environment.setup_network
        listed = [str(host) for host in asked.hosts] if asked is not None else []
        form = "allow=" if isinstance(asked, NetworkPolicy) else "defaults,allow="  # a policy of its own stays one
        lines.append(
            f"To let a setup (and an image build) reach it: {key} = "
            f'"{form}{",".join([*listed, *refused])}" in {where} (or the request\'s setup_network); '
            "CUBICLE_SETUP_NETWORK sets the default for every repository on this server."
        )
    return "\n".join(lines)
