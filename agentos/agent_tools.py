"""AgentOS's MCP tools for the agents of a run: what a package lists in ``mcp`` (names from
:data:`agentos.manifest.AGENT_TOOLS`), served for one agent while it works.

For each attempt of such an agent, AgentOS starts the server (``mcp_server.agents``, the
MCP adapter's scoped server) outside the agent's sandbox, on a Unix socket in the agent's
run files (:attr:`~agentos._run_files.AgentFiles.mcp_socket`); the agent's CLI is
configured to start :mod:`agentos._mcp_pipe` as its ``agentos`` MCP server, which pipes
stdio to that socket. The socket is the capability: only that agent's sandbox can reach it,
and the server offers only the tools its package asked for, over the workspace it cannot
see; the tools that change anything post to the agent's outbox, as ``agentos tasks
create`` does inside a run. The server ends with the attempt.

The library starts the adapter by its module name, as it starts the guardian's supervisor;
it imports nothing of it.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from agentos._run_files import AgentFiles
from agentos.manifest import Manifest
from agentos.workspace import Workspace

SERVER_MODULE = "mcp_server.agents"
_PIPE = Path(__file__).with_name("_mcp_pipe.py")


def bridge_argv(files: AgentFiles) -> list[str]:
    """What the agent's CLI starts as its ``agentos`` MCP server."""
    return [sys.executable, "-I", str(_PIPE), str(files.mcp_socket)]


class AgentToolServer:
    """The server for one attempt of one agent: started before the agent, stopped after."""

    def __init__(self, proc: subprocess.Popen[bytes], files: AgentFiles) -> None:
        self.proc, self.files = proc, files

    @classmethod
    def start(
        cls, ws: Workspace, repo: Path, manifest: Manifest, files: AgentFiles
    ) -> AgentToolServer | None:
        """The server of ``manifest.mcp`` for this agent; None when it asks for none."""
        if not manifest.mcp:
            return None
        files.mcp_socket.unlink(missing_ok=True)
        log = files.log.with_suffix(".mcp.log")
        with log.open("ab") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    SERVER_MODULE,
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
