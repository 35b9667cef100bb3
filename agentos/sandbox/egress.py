"""Egress by name: an agent whose package lists the hosts it needs (``sandbox: {network:
[api.anthropic.com]}``) gets a network namespace of its own, as with no network, and one
way out: an HTTP proxy AgentOS runs for it outside the sandbox, which lets through only
connections to those hosts.

The proxy listens on a Unix socket in the agent's run files
(:attr:`~agentos.workspace.files.AgentFiles.egress_socket`); inside the sandbox,
:mod:`agentos.sandbox.net_relay` listens on ``127.0.0.1:PROXY_PORT`` (the namespace's own
loopback) and pipes each connection to that socket, and the agent's ``HTTPS_PROXY`` and
``HTTP_PROXY`` name it. The proxy takes ``CONNECT host:port`` (HTTPS, or any TCP) and plain
HTTP requests in absolute form; it resolves and connects itself, so the agent needs no DNS.
A connection to a host that is not allowed is answered 403 and remembered
(:attr:`Egress.denied`, for the run's receipts). Nothing the agent sends is read beyond the
request line and headers of each connection: after ``CONNECT`` the bytes are piped as they
are (TLS stays end to end).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from agentos.shared.sockets import UnixAddress

PROXY_PORT = 3128  # inside the agent's own network namespace: no one else's
MAX_HEAD = 64 * 1024  # a request line and headers longer than this are refused
CONNECT_TIMEOUT = 15.0
IDLE_TIMEOUT = 900.0  # a connection with no bytes either way for this long is closed
MAX_DENIED = 100  # denials remembered per agent
MAX_CONNECTIONS = 64  # at once, per agent: each is a thread of the run's process


def parse_host(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]:port`` or ``*.domain``: the host (lowercase) and the
    port (None: any); ValueError when it is none of these."""
    entry = entry.strip().lower()
    if any(c in entry for c in "/@?# ") or not entry.isprintable():  # no space, no control
        raise ValueError(f"{entry!r} is not a host or host:port (like api.anthropic.com)")
    host, port = entry, None
    if entry.startswith("["):
        host, closed, rest = entry[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r} is not a host or host:port")
        if rest:
            port = _port(entry, rest[1:])
    elif entry.count(":") == 1:
        host, _, text = entry.partition(":")
        port = _port(entry, text)
    name = host.removeprefix("*.")
    if not name or any(c in name for c in "/@?#*[] \t") or name.startswith("."):
        raise ValueError(f"{entry!r} is not a host or host:port (like api.anthropic.com)")
    return host, port


def _port(entry: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{entry!r}: {text!r} is not a port")
    return int(text)


def host_of_url(url: str) -> str | None:
    """``host:port`` of a URL (the port its scheme implies when it names none)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{port}"


class Egress:
    """The proxy of one agent: a thread serving ``socket_path`` until :meth:`close`."""

    def __init__(self, socket_path: Path, allowed: Iterable[str]) -> None:
        self.allowed = [parse_host(entry) for entry in allowed]
        self.denied: list[str] = []
        self._path = socket_path
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        socket_path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with UnixAddress(socket_path) as address:
            self._listener.bind(address)
        self._listener.listen(64)
        self._thread = threading.Thread(target=self._serve, name="agentos-egress", daemon=True)
        self._thread.start()

    def permits(self, host: str, port: int) -> bool:
        host = host.lower().strip("[]")
        for name, wanted in self.allowed:
            name = name.strip("[]")
            if wanted is not None and wanted != port:
                continue
            if name == host or (name.startswith("*.") and host.endswith(name[1:])):
                return True
        return False

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._path.unlink()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                conn.close()  # an agent that opens connections without end gets no more
                continue
            threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            self._handle(conn)
        finally:
            self._slots.release()

    def _deny(self, conn: socket.socket, target: str, why: str = "not allowed") -> None:
        with self._lock:
            if len(self.denied) < MAX_DENIED and target not in self.denied:
                self.denied.append(target)
        body = f"AgentOS: {target}: {why} by this agent's sandbox.network\n".encode()
        with contextlib.suppress(OSError):
            conn.sendall(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\n"
                + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(CONNECT_TIMEOUT)
            head = b""
            try:
                while b"\r\n\r\n" not in head:
                    data = conn.recv(65536)
                    if not data or len(head) + len(data) > MAX_HEAD:
                        return
                    head += data
            except OSError:
                return
            line, _, rest = head.partition(b"\r\n")
            try:
                method, target, version = line.decode("ascii").split(" ")
            except (UnicodeDecodeError, ValueError):
                return
            if method == "CONNECT":
                host, sep, port_text = target.rpartition(":")
                if not sep or not port_text.isdigit():
                    return
                port = int(port_text)
                first = head.split(b"\r\n\r\n", 1)[1]  # what came after the request, if any
                reply = b"HTTP/1.1 200 Connection established\r\n\r\n"
            else:
                parts = urlsplit(target)
                try:
                    port = parts.port or 80
                except ValueError:
                    return
                if parts.scheme != "http" or not parts.hostname:
                    self._deny(conn, target[:200], "only absolute http:// URLs are")
                    return
                host = parts.hostname
                path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
                first = f"{method} {path} {version}\r\n".encode() + rest
                reply = b""
            shown = f"{host}:{port}"
            if not self.permits(host, port):
                self._deny(conn, shown)
                return
            try:
                upstream = socket.create_connection((host.strip("[]"), port), CONNECT_TIMEOUT)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    conn.sendall(
                        f"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n{exc}\n".encode()
                    )
                return
            with upstream:
                try:
                    if reply:
                        conn.sendall(reply)
                    if first:
                        upstream.sendall(first)
                except OSError:
                    return
                _pipe(conn, upstream)


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways until either side closes or nothing moves for IDLE_TIMEOUT."""
    for s in (a, b):
        s.settimeout(None)
    while True:
        ready, _, _ = select.select([a, b], [], [], IDLE_TIMEOUT)
        if not ready:
            return
        for s in ready:
            try:
                data = s.recv(65536)
            except OSError:
                return
            if not data:
                return
            try:
                (b if s is a else a).sendall(data)
            except OSError:
                return
