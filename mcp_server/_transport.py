"""Transports for the MCP server: stdio with a guarded stdout, and streamable HTTP on a
socket bound here (so a busy port is a one-line error and port 0 takes any free port)."""

from __future__ import annotations

import os
import socket
import sys
from io import TextIOWrapper
from typing import Any

import anyio
from mcp.server.fastmcp import FastMCP

from agentos.errors import BadInput, OperationFailed


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1); ``[::1]:PORT`` for IPv6; port 0
    takes any free port (the address is printed on stderr)."""
    text = value.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise BadInput(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8765)", field="--http")
    return host, int(port)


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a busy port is a one-line error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OperationFailed(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="--http"
        ) from None
    sock.listen(128)
    return sock


async def run_http(server: FastMCP[Any], sock: socket.socket) -> None:
    import uvicorn

    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
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
