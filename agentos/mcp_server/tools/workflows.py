"""The MCP tools create_task, get_tasks, submit_result and save_memory: the tasks of workflow
executions.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from agentos.mcp_server import models as m
from agentos.mcp_server.tools.common import NAME_MAX, READ_ONLY, REQUEST_MAX, Registrar, call
from agentos.workspace.layout import Workspace


def register(tool: Registrar, ws: Workspace) -> None:
    """The tools create_task, get_tasks, submit_result and save_memory."""

    @tool(
        "Create a workflow task",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=False,
    )
    async def create_task(
        description: Annotated[
            str, Field(max_length=REQUEST_MAX, description="What the task is to do.")
        ],
        phase: Annotated[int, Field(ge=1, description="The phase it is for.")],
        execution: Annotated[str, Field(max_length=NAME_MAX, description="The execution.")],
        parent: Annotated[int | None, Field(description="The task it comes from.")] = None,
    ) -> m.WorkflowTask:
        """Add a task to a phase of a workflow execution; a task too like a live one of the
        same phase is recorded as its duplicate and never runs. A task is done only when
        its run's gate (with the phase's checks) passes."""

        def work() -> m.WorkflowTask:
            from agentos.workflows.executions import create_task as create

            made = create(ws, description, phase, execution_id=execution, parent=parent,
                          creator="mcp")  # fmt: skip
            return m.WorkflowTask.model_validate(made.as_dict())

        return await call(work)

    @tool("List workflow tasks", **READ_ONLY)
    async def get_tasks(
        execution: Annotated[
            str | None, Field(max_length=NAME_MAX, description="Only this execution's.")
        ] = None,
        status: Annotated[
            Literal["pending", "queued", "running", "done", "failed", "duplicated", "cancelled"]
            | None,
            Field(description="Only tasks in this status."),
        ] = None,
    ) -> m.WorkflowTasks:
        """Tasks of workflow executions, oldest first: phase, status, parent, duplicate of,
        run."""

        def work() -> m.WorkflowTasks:
            from agentos.workflows.store import TaskStatus, WorkflowStore

            store = WorkflowStore(ws)
            try:
                found = store.tasks(execution, TaskStatus(status) if status else None)
            finally:
                store.close()
            return m.WorkflowTasks(
                tasks=[m.WorkflowTask.model_validate(t.as_dict()) for t in found]
            )

        return await call(work)

    @tool(
        "Submit a workflow result",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=False,
    )
    async def submit_result(
        execution: Annotated[str, Field(max_length=NAME_MAX, description="The execution.")],
        summary: Annotated[str, Field(max_length=REQUEST_MAX, description="The result.")],
    ) -> m.WorkflowResult:
        """Submit an execution's result: it is validated by the workflow's result_checks on
        the repository as it is now, never by its word."""

        def work() -> m.WorkflowResult:
            from agentos.workflows.results import submit_result as submit

            return m.WorkflowResult.model_validate(submit(ws, execution, summary).as_dict())

        return await call(work)

    @tool(
        "Save a memory",
        readOnlyHint=False,
        destructiveHint=False,
        idempotentHint=False,
        openWorldHint=False,
    )
    async def save_memory(
        text: Annotated[str, Field(max_length=REQUEST_MAX, description="The note.")],
        title: Annotated[str | None, Field(max_length=NAME_MAX, description="Its title.")] = None,
    ) -> m.Memory:
        """Leave a note for later tasks: a Markdown file under the workspace's memory/
        folder, indexed in the knowledge store (later tasks' context finds it)."""

        def work() -> m.Memory:
            from agentos.workflows.memory import save_memory as save

            return m.Memory(path=str(save(ws, text, title)))

        return await call(work)
