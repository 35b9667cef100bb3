"""The MCP tools route and interview: which agents would take a request, and whether it is clear
enough to start.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agentos.errors import BadInput
from agentos.mcp_server import models as m
from agentos.mcp_server.tools.common import NAME_MAX, READ_ONLY, REQUEST_MAX, Registrar, call
from agentos.workspace.layout import Workspace


def register(tool: Registrar, ws: Workspace) -> None:
    """The tools route and interview."""

    @tool(
        "Route a request",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=False,
    )
    async def route(
        request: Annotated[
            str,
            Field(max_length=REQUEST_MAX, description="What should be done, in plain words."),
        ],
        run_id: Annotated[
            str | None, Field(max_length=NAME_MAX, description="Link the receipt to this run.")
        ] = None,
        dry_run: Annotated[
            bool, Field(description="Decide without writing a receipt (receipt is null).")
        ] = False,
    ) -> m.RouteResult:
        """Match a request against the routing cards, deterministically, and return the
        decision (route, clarify or no_match), the selected agents with their scores and
        fired triggers, the rejected cards with reasons, and the id of the receipt written
        (none with dry_run, which only decides)."""

        def work() -> m.RouteResult:
            from agentos.routing.router import decide
            from agentos.routing.router import route as route_request

            if not request.strip():
                raise BadInput("the request is empty", field="request")
            receipt: str | None = None
            if dry_run:
                if run_id is not None:
                    raise BadInput("a dry run writes no receipt to link to a run", field="run_id")
                decision = decide(ws, request)
            else:
                decision, written = route_request(ws, request, run_id=run_id)
                receipt = written.id
            doc = {**decision.as_dict(), "dry_run": dry_run, "receipt": receipt}
            return m.RouteResult.model_validate(doc)

        return await call(work)

    @tool("Interview a request", **READ_ONLY)
    async def interview(
        request: Annotated[str, Field(max_length=REQUEST_MAX, description="The request to score.")],
    ) -> m.InterviewResult:
        """Score a request on five axes (goal, constraints, scope, context, success) and say
        whether it is clear enough to start work; a blocked request gets one question per
        weak axis. Deterministic; writes nothing."""

        def work() -> m.InterviewResult:
            from agentos.interview.engine import interview_in

            return m.InterviewResult.model_validate(interview_in(ws, request).as_dict())

        return await call(work)
