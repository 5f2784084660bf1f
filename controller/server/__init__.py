"""The controller as a service: sessions and their store, leases and the command queue, the HTTP API and viewer,
the MCP server, and ``runtime``, which assembles a session's sandbox, agent and workspace."""
