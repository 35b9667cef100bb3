"""The MCP server a CLI agent starts (over stdio) inside its sandbox: a pipe to the one
AgentOS serves for it outside, on a Unix socket in its run files.

Standard library only, started with ``python -I -S`` by file name (nothing of the worktree or
AgentOS is imported). The socket path goes through the directory it is in, so that its
length is never the limit a socket address has (108 bytes).

    python -I -S mcp_pipe.py SOCKET
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time

WAIT = 30.0  # seconds to wait for the server (it starts beside the agent)


def _connect(path: str) -> socket.socket | None:
    os.chdir(os.path.dirname(path) or ".")
    deadline = time.monotonic() + WAIT
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(os.path.basename(path))
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)


def _upstream(sock: socket.socket) -> None:
    """stdin to the socket, until the client closes it."""
    with contextlib.suppress(OSError):
        while data := os.read(0, 65536):
            sock.sendall(data)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: _mcp_pipe.py SOCKET", file=sys.stderr)
        return 2
    sock = _connect(sys.argv[1])
    if sock is None:
        print(f"agentos: no MCP server at {sys.argv[1]}", file=sys.stderr)
        return 1
    threading.Thread(target=_upstream, args=(sock,), daemon=True).start()
    try:
        while data := sock.recv(65536):
            view = memoryview(data)
            while view:
                view = view[os.write(1, view) :]
    except OSError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
