"""The agents' MCP servers, forked from one resident process per workspace.

Starting an agent's MCP server (:mod:`agentos.mcp_server.agents`) costs ~0.6 s of CPU, nearly
all of it importing ``mcp`` and its pydantic models, and Claude Code and Gemini CLI wait for
their MCP servers before their first model call. So the first agent of a workspace that asks
for tools starts this process, which does those imports once and then forks one server per
agent, in a few milliseconds. A forked server builds only its agent's tools and is given
nothing of any other run: this process holds no run's data, only imported modules.
(multiprocessing's forkserver does the same for one program and ends with it; this one is
shared by the workspace's runs, each its own ``agentos run`` process.)

The client is :class:`agentos.runtimes.agent_tools.AgentToolServer`. It binds the socket
(``.agentos/agent-tools-KEY.sock``: in the workspace, which no sandbox shows) and hands it
over as an inherited descriptor, so it never waits for this process to start: its request
waits in the socket's backlog while the imports are done. One connection per agent:

- the client sends one JSON line (the agent's workspace, repository, socket, outbox and
  tools, and its own environment, directory and umask) with the server's log file as
  SCM_RIGHTS;
- this process answers ``stale`` and ends when its code changed on disk since it started
  (the client then starts a new one); otherwise it forks, and the child answers
  ``{"pid": N}`` with a pidfd of itself;
- the connection is the server's life: the child serves until the client closes it (its
  run's teardown) or the client is gone (killed).

It ends when no agent asked for ``AGENTOS_AGENT_TOOLS_IDLE`` seconds (600), when its socket
is removed or replaced (the workspace removed, or another process of it started), or when it
answers ``stale``. Only its own user may connect.

    python -m agentos.mcp_server.forkserver --fd FD --socket PATH [--idle SECONDS]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# What every forked server needs, imported here once (the child builds its tools from them).
import agentos.mcp_server.agents as agents

log = logging.getLogger(__name__)

MAX_REQUEST = 1 << 20  # bytes of a request line
REQUEST_TIMEOUT = 5.0  # seconds a client has to send its request
TICK = 2.0  # seconds between looks at the socket file and the idle time


def _preload() -> None:
    """Import what a server imports only when a session or a tool family needs it."""
    import importlib
    import pkgutil

    import mcp.shared.message
    import mcp.types  # noqa: F401

    import agentos.mcp_server.tools as tools

    for module in pkgutil.iter_modules(tools.__path__):
        importlib.import_module(f"{tools.__name__}.{module.name}")


def _stamps() -> dict[str, tuple[int, int]]:
    """(mtime, size) of every module file loaded: a change means an upgrade or an edit."""
    found: dict[str, tuple[int, int]] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and path not in found:
            with contextlib.suppress(OSError):
                st = os.stat(path)
                found[path] = (st.st_mtime_ns, st.st_size)
    return found


def _changed(stamps: dict[str, tuple[int, int]]) -> str | None:
    for path, stamp in stamps.items():
        try:
            st = os.stat(path)
        except OSError:
            return path
        if (st.st_mtime_ns, st.st_size) != stamp:
            return path
    return None


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _request(conn: socket.socket) -> tuple[dict[str, Any], agents.AgentRequest, int]:
    """The client's request and its log file's descriptor (ValueError when either is not
    as it should be)."""
    conn.settimeout(REQUEST_TIMEOUT)
    data, fds, _, _ = socket.recv_fds(conn, 65536, 1)
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise ValueError("a request without its log file")
    try:
        while not data.endswith(b"\n"):
            if len(data) > MAX_REQUEST:
                raise ValueError("a request over the limit")
            chunk = conn.recv(65536)
            if not chunk:
                raise ValueError("a request cut short")
            data += chunk
        request = json.loads(data)
        if not isinstance(request, dict):
            raise ValueError("a request that is not an object")
        process = {k: request.get(k) for k in ("env", "cwd", "umask")}
        if not (
            isinstance(process["env"], dict)
            and all(isinstance(v, str) for v in process["env"].values())
            and isinstance(process["cwd"], str)
            and isinstance(process["umask"], int)
        ):
            raise ValueError("a request without the client's environment, directory and umask")
        return process, agents.AgentRequest.of(request), fds[0]
    except BaseException:
        os.close(fds[0])
        raise


def _child(
    listener: socket.socket,
    conn: socket.socket,
    process: dict[str, Any],
    request: agents.AgentRequest,
    log_fd: int,
) -> None:
    """The forked server: never returns (it ends the process)."""
    code = 1
    try:
        listener.close()
        os.setsid()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(null)
        os.close(log_fd)
        os.environ.clear()
        os.environ.update(process["env"])
        os.chdir(process["cwd"])
        os.umask(process["umask"])
        conn.settimeout(None)
        pidfd = os.pidfd_open(os.getpid())
        try:
            socket.send_fds(conn, [json.dumps({"pid": os.getpid()}).encode() + b"\n"], [pidfd])
        finally:
            os.close(pidfd)
        agents.serve(request, conn)
        code = 0
    except BaseException:  # whatever happens, the child never goes back to the loop
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            sys.stderr.flush()
    finally:
        os._exit(code)


def serve(listener: socket.socket, path: Path, idle: float) -> int:
    """Fork a server per request until idle for ``idle`` seconds, or until ``path`` is no
    longer this process's socket."""
    own = _inode(path)
    _preload()
    stamps = _stamps()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the forked servers are reaped by the kernel
    last = time.monotonic()
    while True:
        ready, _, _ = select.select([listener], [], [], TICK)
        if not ready:
            if time.monotonic() - last > idle or _inode(path) != own:
                return 0
            continue
        try:
            conn, _ = listener.accept()
        except OSError:
            continue
        last = time.monotonic()
        with conn:
            cred = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            if struct.unpack("3i", cred)[1] != os.getuid():
                continue  # only its own user
            try:
                process, request, log_fd = _request(conn)
            except (OSError, ValueError) as exc:
                log.warning("a request was refused: %s", exc)
                continue
            try:
                changed = _changed(stamps)
                if changed is not None:
                    log.warning("%s changed since it started: it ends", changed)
                    if _inode(path) == own:
                        path.unlink(missing_ok=True)
                    with contextlib.suppress(OSError):
                        conn.sendall(b"stale\n")
                    return 0
                if os.fork() == 0:
                    _child(listener, conn, process, request, log_fd)
            finally:
                os.close(log_fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentos.mcp_server.forkserver")
    parser.add_argument("--fd", type=int, required=True, help="the bound, listening socket")
    parser.add_argument("--socket", type=Path, required=True, help="where it is bound")
    parser.add_argument("--idle", type=float, default=600.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level="WARNING", format="agentos-agent-tools %(levelname)s: %(message)s")
    listener = socket.socket(fileno=args.fd)
    with contextlib.suppress(KeyboardInterrupt):
        return serve(listener, args.socket, args.idle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
