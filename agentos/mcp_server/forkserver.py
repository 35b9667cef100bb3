"""The agents' MCP servers, forked from the workspace's fork server of them
(:mod:`agentos.shared.forkserver`).

Starting an agent's MCP server (:mod:`agentos.mcp_server.agents`) as a new process costs
~0.6 s of CPU, nearly all of it importing ``mcp`` and its pydantic models, and Claude Code
and Gemini CLI wait for their MCP servers before their first model call. So the first agent
of a workspace that asks for tools starts this process, which does those imports once and
then forks one server per agent. A forked server builds only its agent's tools and is
given nothing of any other run: this process holds no run's data, only imported modules.

A request (from :class:`agentos.runtimes.agent_tools.AgentToolServer`) is an
:class:`~agentos.mcp_server.agents.AgentRequest`'s fields with the server's log file as its
one descriptor. The connection is the forked server's life: it serves until the client
closes it (its run's teardown) or the client is gone (killed).

    python -m agentos.mcp_server.forkserver [--idle SECONDS] --fd FD --socket PATH
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

# What every forked server needs, imported here once (the child builds its tools from them).
import agentos.mcp_server.agents as agents
from agentos.shared import forkserver


def _preload() -> None:
    """Import what a server imports only when a session or a tool family needs it."""
    import importlib
    import pkgutil

    import mcp.shared.message
    import mcp.types  # noqa: F401

    import agentos.mcp_server.tools as tools

    for module in pkgutil.iter_modules(tools.__path__):
        importlib.import_module(f"{tools.__name__}.{module.name}")


def _handle(conn: socket.socket, fields: dict[str, Any], fds: list[int]) -> int:
    """One agent's server, its log on stdout and stderr, until ``conn`` closes."""
    request = agents.AgentRequest.of(fields)  # ValueError: the child ends, logging why
    if len(fds) != 1:
        raise ValueError("a request without its log file")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[0], 2)
    os.close(null)
    agents.serve(request, conn)
    return 0


def main(argv: list[str] | None = None) -> int:
    return forkserver.main(argv, "agentos-agent-tools", _preload, _handle)


if __name__ == "__main__":
    sys.exit(main())
