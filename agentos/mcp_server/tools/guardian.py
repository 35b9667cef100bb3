"""The MCP tool guardian_status: whether the guardian runs, and what it last saw."""

from __future__ import annotations

from agentos.mcp_server import models as m
from agentos.mcp_server.tools.common import READ_ONLY, Registrar, call
from agentos.workspace.layout import Workspace


def register(tool: Registrar, ws: Workspace) -> None:
    """The tool guardian_status."""

    @tool("Guardian status", **READ_ONLY)
    async def guardian_status() -> m.GuardianStatus:
        """Whether the guardian (the monitor that nudges, restarts or kills stuck agents) is
        running, and what it last saw."""
        return await call(_guardian, ws)


def _guardian(ws: Workspace) -> m.GuardianStatus:
    import importlib
    import importlib.util

    try:
        found = importlib.util.find_spec("agentos.guardian.daemon") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        return m.GuardianStatus(installed=False, message="guardian not installed")
    daemon = importlib.import_module("agentos.guardian.daemon")
    status = getattr(daemon, "status", None)
    if status is None:
        return m.GuardianStatus(
            installed=False,
            message="guardian not installed (agentos.guardian.daemon has no status())",
        )
    data = status(ws)
    data = dict(data) if isinstance(data, dict) else {"value": data}
    running = data.get("running")
    message = str(
        data.get("message")
        or (
            "guardian running"
            if running
            else "guardian not running"
            if running is False
            else "guardian status"
        )
    )
    return m.GuardianStatus(
        installed=True,
        running=running if isinstance(running, bool) else None,
        message=message,
        status=data,
    )
