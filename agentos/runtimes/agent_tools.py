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
import os
import subprocess
import sys
from pathlib import Path

from agentos.errors import MissingTool
from agentos.hub.manifest import Manifest
from agentos.workspace.files import AgentFiles
from agentos.workspace.layout import Workspace

ENTRY_POINTS = "agentos.agent_tools"
_PIPE = Path(__file__).with_name("mcp_pipe.py")


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
    return [sys.executable, "-I", str(_PIPE), str(files.mcp_socket)]


class AgentToolServer:
    """The server of one agent: started with its worktree, stopped at the run's teardown
    (or when the process that started it is gone)."""

    def __init__(self, proc: subprocess.Popen[bytes], files: AgentFiles) -> None:
        self.proc, self.files = proc, files

    @classmethod
    def start(
        cls, ws: Workspace, repo: Path, manifest: Manifest, files: AgentFiles
    ) -> AgentToolServer | None:
        """The server of ``manifest.mcp`` for this agent; None when it asks for none."""
        if not manifest.mcp:
            return None
        files.run_dir.mkdir(parents=True, exist_ok=True)
        files.mcp_socket.unlink(missing_ok=True)
        log = files.log.with_suffix(".mcp.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    server_module(),
                    "--workspace",
                    str(ws.root),
                    "--repo",
                    str(repo),
                    "--socket",
                    str(files.mcp_socket),
                    "--outbox",
                    str(files.outbox),
                    "--tools",
                    ",".join(manifest.mcp),
                    "--parent",
                    str(os.getpid()),
                ],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                start_new_session=True,
            )
        return cls(proc, files)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            self.files.mcp_socket.unlink()
