"""The MCP tools evolve_start and evolve_status: improve an agent package against an eval suite, in
the background.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from agentos.errors import BadInput
from agentos.mcp_server import models as m
from agentos.mcp_server.tools.common import NAME_MAX, READ_ONLY, Registrar, call
from agentos.workspace.layout import Workspace


def register(tool: Registrar, ws: Workspace) -> None:
    """The tools evolve_start and evolve_status."""

    @tool(
        "Start an evolution",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=True,
    )
    async def evolve_start(
        package: Annotated[str, Field(max_length=NAME_MAX, description="NAME or NAME@VERSION.")],
        suite: Annotated[
            str, Field(max_length=NAME_MAX, description="A suite name (see `agentos eval list`).")
        ],
        meta: Annotated[
            str, Field(max_length=NAME_MAX, description="The meta agent, a hub package.")
        ] = "evolve-meta",
        generations: Annotated[int, Field(ge=1, le=1000, description="Generations to make.")] = 5,
        children: Annotated[int, Field(ge=1, le=64, description="Children per parent.")] = 1,
        select: Annotated[
            Literal["random", "latest", "best", "score_prop", "score_child_prop"],
            Field(description="How parents are chosen."),
        ] = "score_child_prop",
        seed: Annotated[int, Field(description="Seeds every selection.")] = 0,
        staged: Annotated[bool, Field(description="The suite's staged sample first.")] = False,
        jobs: Annotated[int, Field(ge=1, le=64, description="Children made at once.")] = 1,
    ) -> m.EvolveStatus:
        """Evolve an agent package against an eval suite in the background: a meta agent
        changes it generation by generation, the suite scores each. Returns at once with the
        evolution's id: follow it with `evolve_status`; `agentos evolve promote` makes a
        generation a hub version."""

        def work() -> m.EvolveStatus:
            from agentos.evolve.control import start_detached, summary
            from agentos.evolve.start import create

            if "/" in suite or suite.startswith("."):
                raise BadInput("give a suite's name, not a path", field="suite")
            evo = create(
                ws,
                package,
                suite,
                meta=meta,
                generations=generations,
                children=children,
                select=select,
                seed=seed,
                staged=staged,
                jobs=jobs,
            )
            start_detached(evo)
            return m.EvolveStatus.model_validate(summary(evo))

        return await call(work)

    @tool("Evolution status", **READ_ONLY)
    async def evolve_status(
        evo_id: Annotated[
            str | None, Field(max_length=NAME_MAX, description="The evolution (default: newest).")
        ] = None,
    ) -> m.EvolveStatus:
        """An evolution: whether it runs or why it stopped, the best generation, and every
        generation with its parent, verdict, reason and score."""

        def work() -> m.EvolveStatus:
            from agentos.evolve.archive import find_evolution
            from agentos.evolve.control import summary

            return m.EvolveStatus.model_validate(summary(find_evolution(ws, evo_id)))

        return await call(work)
