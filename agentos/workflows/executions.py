"""Executions of workflows: launched from a definition, extended by the tasks agents
create. What a task may be is the execution's definition as it was launched (a later edit
of the workflow file does not change a running execution).

Inside a task's run, ``AGENTOS_EXECUTION_ID`` and ``AGENTOS_TASK_ID`` name the execution
and the task, so ``agentos tasks create "..." --phase 2`` needs nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentos.errors import BadInput
from agentos.runs import new_run_id
from agentos.workflows.definitions import WorkflowDefinition
from agentos.workflows.store import TaskRecord, WorkflowStore
from agentos.workspace import Workspace

EXECUTION_ENV = "AGENTOS_EXECUTION_ID"
TASK_ENV = "AGENTOS_TASK_ID"


def create_execution(
    ws: Workspace, workflow: WorkflowDefinition, repo: Path, params: dict[str, Any]
) -> tuple[str, TaskRecord]:
    """A new execution of ``workflow`` on ``repo``, and its first task: the launch
    template's prompt with ``params`` in (or, with no template, the one given as
    ``params["task"]``), in the first phase."""
    if workflow.launch_template is not None:
        first = workflow.launch_template.render(params)
    elif set(params) <= {"task"} and params.get("task"):
        first = str(params["task"])
    else:
        raise BadInput(
            f"workflow {workflow.id} has no launch template: give its first task as "
            "--param task=...",
            field="--param",
        )
    execution_id = open_execution(ws, workflow, repo, params)
    store = WorkflowStore(ws)
    try:
        task = store.add_task(
            execution_id, workflow.phases[0].id, first, creator="launch", dedup=False
        )
    finally:
        store.close()
    return execution_id, task


def open_execution(
    ws: Workspace, workflow: WorkflowDefinition, repo: Path, params: dict[str, Any]
) -> str:
    """A new execution with no task yet (the SDK adds them); its id."""
    execution_id = new_run_id()
    store = WorkflowStore(ws)
    try:
        store.create_execution(
            execution_id, workflow.model_dump(mode="json"), str(repo), dict(params)
        )
    finally:
        store.close()
    return execution_id


def create_task(
    ws: Workspace,
    description: str,
    phase: int,
    *,
    execution_id: str | None = None,
    parent: int | None = None,
    creator: str | None = None,
) -> TaskRecord:
    """A task for ``phase`` of an execution (by default the one whose run this is),
    deduplicated as its workflow says."""
    execution_id = execution_id or os.environ.get(EXECUTION_ENV)
    if not execution_id:
        raise BadInput(
            f"which execution? (--execution, or run inside a task, where {EXECUTION_ENV} is set)",
            field="--execution",
        )
    if parent is None and os.environ.get(TASK_ENV, "").isdigit():
        parent = int(os.environ[TASK_ENV])
    store = WorkflowStore(ws)
    try:
        execution = store.execution(execution_id)
        workflow = WorkflowDefinition.model_validate(execution.definition)
        workflow.phase(phase)  # exists
        config = workflow.config
        return store.add_task(
            execution_id,
            phase,
            description,
            creator=creator or (f"task {parent}" if parent else "cli"),
            parent=parent,
            dedup=config.task_deduplication_enabled,
            threshold=config.similarity_threshold,
        )
    finally:
        store.close()
