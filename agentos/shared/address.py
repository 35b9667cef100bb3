"""Addresses a server of AgentOS listens on (the MCP server over HTTP, the dashboard):
``HOST:PORT`` as given on the command line, and whether a host is loopback."""

from __future__ import annotations

import ipaddress
import socket

from agentos.errors import BadInput, OperationFailed

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
WILDCARDS = ("0.0.0.0", "::")


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1); ``[::1]:PORT`` for IPv6; port 0
    takes any free port (the server prints the one it took)."""
    text = value.strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise BadInput(f"{value!r} is not HOST:PORT (e.g. 127.0.0.1:8765)", field="--http")
    return host, int(port)


def serving_address(value: str, allow_remote: bool, why: str) -> tuple[str, int]:
    """:func:`parse_http`, refusing an address that is not loopback unless
    ``allow_remote``; ``why`` ends the one-line error."""
    host, port = parse_http(value)
    if not is_loopback(host) and not allow_remote:
        raise BadInput(f"{host} is not a loopback address: {why}", field="--http")
    return host, port


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host: str) -> str:
    """``host`` as a URL or a Host header names it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


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
