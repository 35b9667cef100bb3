"""The MCP tools hub_search and synthesize_capability: find a package that can do a request, or
build a tool test-first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from agentos.mcp_server import models as m
from agentos.mcp_server.tools.common import NAME_MAX, READ_ONLY, REQUEST_MAX, Registrar, call
from agentos.workspace.layout import Workspace

if TYPE_CHECKING:
    from agentos.mcp_server.server import AgentOSServer


def register(server: AgentOSServer, tool: Registrar, ws: Workspace) -> None:
    """The tools hub_search and synthesize_capability."""

    @tool("Search the hub for a capability", **READ_ONLY)
    async def hub_search(
        query: Annotated[
            str, Field(max_length=REQUEST_MAX, description="What the package should do.")
        ],
        k: Annotated[int, Field(ge=1, le=100, description="How many to return.")] = 5,
        threshold: Annotated[
            float, Field(ge=0, le=1, description="Only packages scoring at least this.")
        ] = 0.0,
    ) -> m.HubSearch:
        """Installed packages that can do what the query says, best first, each with a 0..1
        score and the query's words it matched (in its name, capabilities, card triggers or
        description)."""

        def work() -> m.HubSearch:
            from agentos.routing.capabilities import search

            found = search(ws, query, k=k, threshold=threshold)
            return m.HubSearch(matches=[m.HubMatch.model_validate(x.as_dict()) for x in found])

        return await call(work)

    @tool(
        "Build a missing tool, test-first",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=True,
    )
    async def synthesize_capability(
        request: Annotated[
            str, Field(max_length=REQUEST_MAX, description="What the tool should do.")
        ],
        name: Annotated[
            str | None, Field(max_length=NAME_MAX, description="The tool's name (tool-NAME).")
        ] = None,
        card: Annotated[bool, Field(description="Install a routing card with it.")] = False,
    ) -> m.Synthesis:
        """Find an installed package that does the request, or build one: a spec, tests
        that must fail against a stub, an implementation verified in the sandbox, and a hub
        package tool-NAME@0.1.0 only when its tests pass. A new tool is offered as an MCP
        tool at once (the tool list changes)."""

        def work() -> m.Synthesis:
            from agentos.synthesis.engine import synthesize

            return m.Synthesis.model_validate(
                synthesize(ws, request, name=name, card=card).as_dict()
            )

        result = await call(work)
        await server.announce_tools()
        return result
