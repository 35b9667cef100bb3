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

import _socket
import contextlib
import os
import select
import signal
import socket
import sys
import time
from pathlib import Path

from agentos.errors import MissingTool, OperationFailed
from agentos.hub.manifest import Manifest
from agentos.shared import forkserver
from agentos.workspace.files import AgentFiles
from agentos.workspace.layout import Workspace

ENTRY_POINTS = "agentos.agent_tools"
_PIPE = Path(__file__).with_name("mcp_pipe.py")
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
    """Where the workspace's fork server of agents' MCP servers listens."""
    return Path(forkserver.socket_path(ws.state_dir, "agent-tools"))


class AgentToolServer:
    """The server of one agent: started with its worktree, stopped at the run's teardown
    (or when the process that started it is gone: its connection closes)."""

    def __init__(self, control: _socket.socket, files: AgentFiles, pidfd: int | None) -> None:
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
        fields = {
            "workspace": str(ws.root.absolute()),
            "repo": str(repo.absolute()),
            "socket": str(files.mcp_socket.absolute()),
            "outbox": str(files.outbox.absolute()),
            "tools": list(manifest.mcp),
        }
        start = [sys.executable, "-m", server_module(), "--idle", forkserver.idle()]
        problem = "it did not take the request"
        with log.open("ab") as err:
            try:
                sent = forkserver.request(forkserver_socket(ws), start, fields, [err.fileno()])
            except OSError as exc:
                sent = None
                problem = str(exc)
            if sent is None:  # (waited for: never None; said for the type checker)
                raise OperationFailed(f"the agents' MCP fork server: {problem}") from None
            control, first = sent
        pidfd = None
        for fd in first[1] if first else []:
            if pidfd is None:
                pidfd = fd
            else:
                os.close(fd)
        return cls(control, files, pidfd)

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
                data, fds = forkserver.answer(self.control, left)
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
