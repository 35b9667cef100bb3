"""The MCP tools hub_list and hub_install: the agent packages of the hub."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agentos.mcp_server import models as m
from agentos.mcp_server.paths import PATH_MAX, Confinement
from agentos.mcp_server.tools.common import READ_ONLY, Registrar, call
from agentos.workspace.layout import Workspace


def register(tool: Registrar, ws: Workspace, fence: Confinement) -> None:
    """The tools hub_list and hub_install."""

    @tool("List agent packages", **READ_ONLY)
    async def hub_list() -> m.HubList:
        """Every installed agent package version, which one is active, its sha256 and
        source."""

        def work() -> m.HubList:
            from agentos.hub.store import Hub

            return m.HubList(
                packages=[
                    m.HubPackage.model_validate(v.as_dict()) for v in Hub(ws.hub_dir).versions()
                ]
            )

        return await call(work)

    @tool(
        "Install an agent package",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=True,
        openWorldHint=True,
    )
    async def hub_install(
        source: Annotated[
            str,
            Field(
                max_length=PATH_MAX,
                description=(
                    "A package directory or a .tar.gz made by `agentos hub pack` (in the workspace "
                    "or an allowed repository), or a git URL with an optional @ref."
                ),
            ),
        ],
    ) -> m.HubInstallResult:
        """Install an agent package into the hub and make it the active version. Installing
        the same name@version with other content is refused."""

        def work() -> m.HubInstallResult:

            from agentos.routing.package_cards import install_package

            result, _cards = install_package(ws, fence.hub_source(source))
            return m.HubInstallResult(
                name=result.name,
                version=result.version,
                sha256=result.sha256,
                source=result.source,
                changed=result.changed,
            )

        return await call(work)
