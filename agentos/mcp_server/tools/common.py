"""What the MCP server's tool families share: the registrar, the read-only hints, the
limits on arguments, and the call that runs library code in a worker thread.

The families (:mod:`agentos.mcp_server.tools`) import this module and never
:mod:`agentos.mcp_server.server`, which imports them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

from agentos.errors import REQUEST_MAX_BYTES

# The longest argument each kind of string may be: a request or query is text a person wrote
# (and a run's request must fit one command-line argument); a path is what the file system
# takes; a name or id is short. Longer ones are refused with the argument and the limit.
# A request's limit is the library's (in characters here, a first bound the schema checks;
# agentos.errors.check_request then counts its bytes).
REQUEST_MAX = REQUEST_MAX_BYTES
NAME_MAX = 256
PATHS_MAX = 1000

READ_ONLY = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}


T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


# What registrar returns: ``@tool(title, **hints)``.
Registrar = Callable[..., Callable[[Callable[..., Any]], Any]]


def registrar(server: FastMCP[Any]) -> Callable[..., Callable[[F], F]]:
    """``@tool(title, **hints)``: register with a clean description and annotations."""

    def tool(title: str, **hints: bool) -> Callable[[F], F]:
        def register(fn: F) -> F:
            server.add_tool(
                fn,
                title=title,
                description=inspect.cleandoc(fn.__doc__ or ""),
                annotations=ToolAnnotations(title=title, **hints),
                structured_output=True,
            )
            return fn

        return register

    return tool


async def call(func: Callable[..., T], *args: Any) -> T:
    """Run a blocking library call in a worker thread, so HTTP clients are served meanwhile."""
    return await anyio.to_thread.run_sync(func, *args)
