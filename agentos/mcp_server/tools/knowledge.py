"""The MCP tools kb_search and kb_add: search the knowledge store, and index files into it."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agentos.mcp_server import models as m
from agentos.mcp_server.paths import PATH_MAX, Confinement
from agentos.mcp_server.tools.common import PATHS_MAX, READ_ONLY, REQUEST_MAX, Registrar, call
from agentos.workspace.layout import Workspace


def register(tool: Registrar, ws: Workspace, fence: Confinement) -> None:
    """The tools kb_search and kb_add."""

    @tool("Search the knowledge store", **READ_ONLY)
    async def kb_search(
        query: Annotated[
            str, Field(max_length=REQUEST_MAX, description="Any text; FTS5 syntax is not needed.")
        ],
        k: Annotated[int, Field(ge=1, le=100, description="How many hits.")] = 10,
    ) -> m.KbSearchResult:
        """Full-text search of the knowledge store (the indexed code and docs): ranked
        chunks with path, line range, score and a snippet. Any text is a valid query."""

        def work() -> m.KbSearchResult:
            from agentos.knowledge.store import open_store

            with open_store(ws) as store:
                hits = store.search(query, k)
            return m.KbSearchResult(
                query=query, hits=[m.KbHit.model_validate(h.as_dict()) for h in hits]
            )

        return await call(work)

    @tool(
        "Add files to the knowledge store",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=True,
        openWorldHint=False,
    )
    async def kb_add(
        paths: Annotated[
            list[Annotated[str, Field(max_length=PATH_MAX)]],
            Field(
                min_length=1,
                max_length=PATHS_MAX,
                description="Files or directories in the workspace or an allowed "
                "repository (relative ones are taken from the first).",
            ),
        ],
    ) -> m.KbAddResult:
        """Index files and directories into the knowledge store, incrementally: unchanged
        files cost almost nothing, changed ones are replaced, deleted ones removed."""

        def work() -> m.KbAddResult:
            from agentos.knowledge.store import open_store

            resolved = [fence.path(p, f"paths[{i}]") for i, p in enumerate(paths)]
            with open_store(ws) as store:
                stats = store.add(resolved)
            return m.KbAddResult(paths=[str(p) for p in resolved], **stats.as_dict())

        return await call(work)
