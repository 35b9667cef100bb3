"""Transports for the MCP server: stdio with a guarded stdout, and streamable HTTP on a
socket bound here (so a busy port is a one-line error and port 0 takes any free port).

Over HTTP every request must carry the workspace's token (``Authorization: Bearer``,
:mod:`agentos.mcp_server.auth`), else it gets 401, and must name the server in its ``Host`` (and,
when it sends one, ``Origin``) header by the address it listens on, a loopback name
(127.0.0.1, localhost, [::1]) or a name given with ``--allow-host``, else it gets 421 (403
for the Origin): a page whose own name was rebound to this address (DNS rebinding) is
refused on every address, loopback or not.
"""

from __future__ import annotations

import hmac
import json
import os
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from io import TextIOWrapper
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.fastmcp import FastMCP

from agentos.shared.address import LOOPBACK_NAMES, WILDCARDS, host_name

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecuritySettings


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def allowed_hosts(host: str, port: int, extra: Sequence[str] = ()) -> list[str]:
    """The Host header values a request may carry: the address the server listens on
    (unless it is 0.0.0.0 or ::, every address), the loopback names and ``extra``, each
    with the port (and without it on port 80, where clients leave it out)."""
    names = [*LOOPBACK_NAMES]
    for name in ([] if host in WILDCARDS else [host]) + [h.strip() for h in extra]:
        shown = host_name(name)
        if shown and shown not in names:
            names.append(shown)
    values = [f"{n}:{port}" for n in names]
    return values + (names if port == 80 else [])


def security(host: str, port: int, extra: Sequence[str] = ()) -> TransportSecuritySettings:
    """The SDK's DNS-rebinding protection, on for every address (the SDK turns it on by
    itself only for 127.0.0.1, localhost and ::1)."""
    from mcp.server.transport_security import TransportSecuritySettings

    hosts = allowed_hosts(host, port, extra)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )


class BearerGuard:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer <token>`` gets 401
    and never reaches the server. Tokens are compared in constant time."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or self._authorized(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await _unauthorized(send)
        else:  # a websocket: the server has none to offer anyone
            await send({"type": "websocket.close", "code": 1008})

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name.lower() == b"authorization":
                scheme, _, given = bytes(value).strip().partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(
                    given.strip(), self.token
                )
        return False


async def _unauthorized(send: Send) -> None:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32001,
                "message": "unauthorized: send the header 'Authorization: Bearer <token>' "
                "with the token `agentos mcp serve --http` printed",
            },
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="agentos"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def run_http(server: FastMCP[Any], sock: socket.socket, token: str) -> None:
    import uvicorn

    app = BearerGuard(server.streamable_http_app(), token)
    config = uvicorn.Config(app, log_level="warning")
    await uvicorn.Server(config).serve(sockets=[sock])  # FastMCP's, on our socket


async def run_stdio(server: FastMCP[Any]) -> None:
    from mcp.server.stdio import stdio_server

    protocol = os.dup(1)  # the protocol keeps the real stdout ...
    os.dup2(2, 1)  # ... and fd 1, for anything else that writes there, becomes stderr
    sys.stdout = sys.stderr
    out = anyio.wrap_file(TextIOWrapper(os.fdopen(protocol, "wb"), encoding="utf-8"))
    async with stdio_server(stdout=out) as (read_stream, write_stream):
        low = server._mcp_server  # FastMCP.run_stdio_async, with our stdout
        await low.run(read_stream, write_stream, low.create_initialization_options())
