"""AgentOS's MCP tools for the agents of a run: what a package lists in ``mcp`` (names from
:data:`agentos.hub.agent_tools.AGENT_TOOLS`), served for one agent while it works.

For such an agent, AgentOS starts the server (the MCP adapter's scoped
server, which it registers as the entry point group ``agentos.agent_tools``: the library never
names an adapter) outside the agent's sandbox, on a Unix socket in the agent's
run files (:attr:`~agentos.workspace.files.AgentFiles.mcp_socket`); the agent's CLI is
configured to start :mod:`agentos.runtimes.mcp_pipe` as its ``agentos`` MCP server, which pipes
stdio to that socket. The socket is the capability: only that agent's sandbox can reach it,
and the server offers only the tools its package asked for, over the workspace it cannot
see; the tools that change anything post to the agent's outbox, as ``agentos tasks
create`` does inside a run. The server starts with the agent's worktree, serves all its
attempts and ends at the run's teardown, or when the process that started it is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from agentos.errors import MissingTool, OperationFailed
from agentos.hub.manifest import Manifest
from agentos.shared.address import unix_address
from agentos.workspace.files import AgentFiles
from agentos.workspace.layout import Workspace

ENTRY_POINTS = "agentos.agent_tools"
_PIPE = Path(__file__).with_name("mcp_pipe.py")
IDLE_ENV = "AGENTOS_AGENT_TOOLS_IDLE"  # seconds the fork server waits for an agent, then ends
IDLE = 600
ANSWER_TIMEOUT = 30.0  # seconds for a running fork server to fork (it may be busy)
STOP_TIMEOUT = 5.0  # seconds a server has to end when its connection closes


_FOUND: list[str] = []  # the registered server's module, once found (entry points are read
# from every installed distribution's metadata: tens of milliseconds)


def server_module() -> str:
    """The module of the registered server (MissingTool when none is installed)."""
    if _FOUND:
        return _FOUND[0]
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name)
    if not found:
        raise MissingTool(
            "agent packages that ask for AgentOS's MCP tools (mcp:) need its MCP server, "
            "which is not installed: reinstall AgentOS (scripts/setup)",
            field="mcp",
        )
    _FOUND.append(found[0].module)
    return found[0].module


def bridge_argv(files: AgentFiles) -> list[str]:
    """What the agent's CLI starts as its ``agentos`` MCP server."""
    return [sys.executable, "-I", "-S", str(_PIPE), str(files.mcp_socket)]  # (-S: no site, ~20 ms)


def forkserver_socket(ws: Workspace) -> Path:
    """Where the workspace's fork server of this installation listens (one per interpreter
    and AgentOS package, so that two installations never serve each other's agents)."""
    import agentos

    key = f"{sys.executable}\0{Path(agentos.__file__).parent}".encode()
    return ws.state_dir / f"agent-tools-{hashlib.sha256(key).hexdigest()[:12]}.sock"


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with unix_address(path) as address:
            sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def _forkserver(ws: Workspace) -> tuple[socket.socket, bool]:
    """A connection to the workspace's fork server, and whether it was started for it."""
    path = forkserver_socket(ws)
    with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
        return _connect(path), False
    with path.with_suffix(".lock").open("a") as lock:  # one starter at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError, ConnectionRefusedError):
            return _connect(path), False
        path.unlink(missing_ok=True)  # a socket left by one that ended
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with listener:
            with unix_address(path) as address:
                listener.bind(address)
            listener.listen(64)
            idle = os.environ.get(IDLE_ENV, "").strip() or str(IDLE)
            log = ws.logs_dir / "agent-tools.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("ab") as err:
                subprocess.Popen(
                    [sys.executable, "-m", server_module(), "--fd", str(listener.fileno()),
                     "--socket", str(path), "--idle", idle],
                    stdin=subprocess.DEVNULL,
                    stdout=err,
                    stderr=err,
                    pass_fds=[listener.fileno()],
                    start_new_session=True,
                    cwd="/",  # it holds no directory of the user's (each server has its own)
                )  # fmt: skip
            return _connect(path), True  # (in the backlog until it has imported)


def _answer(control: socket.socket, timeout: float) -> tuple[bytes, list[int]]:
    """The first line the fork server or its child sends, and the descriptors with it."""
    control.settimeout(timeout)
    data, fds, _, _ = socket.recv_fds(control, 4096, 1)
    while data and not data.endswith(b"\n") and len(data) < 4096:
        chunk = control.recv(4096)
        if not chunk:
            break
        data += chunk
    return data, fds


class AgentToolServer:
    """The server of one agent: started with its worktree, stopped at the run's teardown
    (or when the process that started it is gone: its connection closes)."""

    def __init__(self, control: socket.socket, files: AgentFiles, pidfd: int | None) -> None:
        self.control, self.files, self.pidfd = control, files, pidfd

    @classmethod
    def start(
        cls, ws: Workspace, repo: Path, manifest: Manifest, files: AgentFiles
    ) -> AgentToolServer | None:
        """The server of ``manifest.mcp`` for this agent; None when it asks for none. It
        is forked by the workspace's fork server (:mod:`agentos.mcp_server.forkserver`),
        started first when there is none."""
        if not manifest.mcp:
            return None
        files.run_dir.mkdir(parents=True, exist_ok=True)
        files.mcp_socket.unlink(missing_ok=True)
        log = files.log.with_suffix(".mcp.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        request = json.dumps(
            {
                "workspace": str(ws.root.absolute()),
                "repo": str(repo.absolute()),
                "socket": str(files.mcp_socket.absolute()),
                "outbox": str(files.outbox.absolute()),
                "tools": list(manifest.mcp),
                "env": dict(os.environ),
                "cwd": os.getcwd(),
                "umask": _umask(),
            }
        ).encode()
        with log.open("ab") as err:
            for _ in range(2):  # a second time when the first server found had gone stale
                control, started = _forkserver(ws)
                sent = socket.send_fds(control, [request + b"\n"], [err.fileno()])
                control.sendall((request + b"\n")[sent:])
                if started:  # it answers once imported: the agent's pipe waits for that
                    return cls(control, files, None)
                data, fds = _answer(control, ANSWER_TIMEOUT)
                if data != b"stale\n":
                    return cls(control, files, fds[0] if fds else None)
                control.close()
        raise OperationFailed(
            f"the agents' MCP fork server at {forkserver_socket(ws)} keeps going stale"
        )

    def stop(self) -> None:
        """Close its connection, which ends it, and wait until it has ended (killed after
        STOP_TIMEOUT seconds)."""
        try:
            with contextlib.suppress(OSError):
                self.control.shutdown(socket.SHUT_WR)
            if not self._ended(STOP_TIMEOUT) and self.pidfd is not None:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                self._ended(STOP_TIMEOUT)
        finally:
            self.control.close()
            if self.pidfd is not None:
                os.close(self.pidfd)
                self.pidfd = None
            with contextlib.suppress(OSError):
                self.files.mcp_socket.unlink()

    def _ended(self, timeout: float) -> bool:
        """Whether the server closed its end of the connection within ``timeout`` seconds
        (it does so only by ending); its pidfd is taken on the way if not yet."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                data, fds = _answer(self.control, left)
            except TimeoutError:
                return False
            except OSError:
                return True
            for fd in fds:
                if self.pidfd is None:
                    self.pidfd = fd
                else:
                    os.close(fd)
            if not data:  # its descriptors are closed: its exit is under way
                if self.pidfd is None:
                    return True
                return bool(select.select([self.pidfd], [], [], max(left, 0.1))[0])
        return False


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
