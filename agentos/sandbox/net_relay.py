"""Inside an agent's sandbox whose package names the hosts it may reach: a proxy address on
the sandbox's own loopback (``127.0.0.1:PORT``) that pipes every connection to AgentOS's
egress proxy outside, on a Unix socket in the agent's run files
(:mod:`agentos.sandbox.egress`, which decides what gets through).

Standard library only, started with ``python -I -S`` by file name by the agent's wrapper
before the agent: it binds, then goes to the background (the wrapper goes on once the
address is there) and lives as long as the sandbox does.

    python -I -S net_relay.py SOCKET PORT

What it does before it goes to the background is on the path of every attempt (the agent
waits for it): the interpreter without ``site`` and the address bound with ``_socket``
alone, which halves that part (13 ms of CPU against 25 with ``socket``, ``selectors`` and
``threading`` imported first). What serves is imported after the fork, while the agent
starts.
"""

from __future__ import annotations

import _socket
import os
import sys

BACKLOG = 64


def _serve(fd: int, path: str) -> None:
    """Accept on ``fd`` and pipe each connection to the Unix socket ``path``, a thread each
    (what this needs is imported here, after the fork)."""
    import select
    import socket
    import threading

    def pipe(a: socket.socket, b: socket.socket) -> None:
        with a, b:
            while True:
                ready, _, _ = select.select([a, b], [], [])
                for s in ready:
                    try:
                        data = s.recv(65536)
                        if not data:
                            return
                        (b if s is a else a).sendall(data)
                    except OSError:
                        return

    listener = socket.socket(fileno=fd)
    while True:
        conn, _ = listener.accept()
        out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            out.connect(path)
        except OSError:
            conn.close()
            out.close()
            continue
        threading.Thread(target=pipe, args=(conn, out), daemon=True).start()


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: net_relay.py SOCKET PORT", file=sys.stderr)
        return 2
    path, port = sys.argv[1], int(sys.argv[2])
    os.chdir(os.path.dirname(path) or ".")  # a socket address holds 108 bytes
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(BACKLOG)
    if os.fork():  # bound: the wrapper may start the agent
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    _serve(listener.detach(), os.path.basename(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
