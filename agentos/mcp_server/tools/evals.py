"""The MCP tools eval_run and eval_report: score an agent package on an eval suite."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agentos.errors import BadInput
from agentos.mcp_server import models as m
from agentos.mcp_server.tools.common import NAME_MAX, READ_ONLY, Registrar, call
from agentos.workspace.layout import Workspace


def register(tool: Registrar, ws: Workspace) -> None:
    """The tools eval_run and eval_report."""

    @tool(
        "Run an eval",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=True,
    )
    async def eval_run(
        suite: Annotated[
            str,
            Field(max_length=NAME_MAX, description="A suite name (see `agentos eval list`)."),
        ],
        agent: Annotated[str, Field(max_length=NAME_MAX, description="NAME or NAME@VERSION.")],
        split: Annotated[str, Field(max_length=NAME_MAX, description="The split.")] = "tasks",
        samples: Annotated[
            int | None, Field(ge=1, description="Run this many tasks, drawn at random.")
        ] = None,
        seed: Annotated[int | None, Field(description="The draw's seed.")] = None,
        jobs: Annotated[int, Field(ge=1, le=64, description="Tasks at a time.")] = 1,
    ) -> m.EvalReport:
        """Run an agent package on an eval suite of the workspace (evals/NAME) or a bundled
        one, and score it: each task's answer graded, the dimensions, the composite, and
        whether it passed the suite's threshold. Answers when every task is done."""

        def work() -> m.EvalReport:
            from agentos.evals.harness import find_suite, run_eval

            if "/" in suite or suite.startswith("."):
                raise BadInput("give a suite's name, not a path", field="suite")
            report = run_eval(
                ws, find_suite(ws, suite), agent, split=split, samples=samples, seed=seed, jobs=jobs
            )
            return m.EvalReport.model_validate(
                {**report.as_dict(), "predictions": [p.as_dict() for p in report.predictions]}
            )

        return await call(work)

    @tool("Show an eval's report", **READ_ONLY)
    async def eval_report(
        eval_id: Annotated[str, Field(max_length=NAME_MAX, description="The eval's id.")],
    ) -> m.EvalReport:
        """A kept eval report: its dimensions, composite and each task's answer, score and
        feedback."""

        def work() -> m.EvalReport:
            from agentos.evals.reports import load_report

            report, predictions = load_report(ws, eval_id)
            return m.EvalReport.model_validate({**report, "predictions": predictions})

        return await call(work)
