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

from agentos.errors import BadInput, check_request
from agentos.run.store import new_run_id
from agentos.workflows import embeddings
from agentos.workflows.definitions import WorkflowDefinition, find_workflow
from agentos.workflows.index import Match
from agentos.workflows.store import TaskRecord, WorkflowStore
from agentos.workspace.layout import Workspace

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
    check_request(first, field="--param")  # the first task is its run's request
    execution_id = open_execution(ws, workflow, repo, params)
    store = WorkflowStore(ws)
    try:
        task = store.add_task(
            execution_id, workflow.phases[0].id, first, creator="launch", dedup=False
        )
    finally:
        store.close()
    return execution_id, task


def launch(
    ws: Workspace, workflow_id: str, repo: Path, params: dict[str, Any]
) -> tuple[str, TaskRecord]:
    """``agentos workflows launch``: workflow ``workflow_id`` (the workspace's or a
    bundled one) on the git repository ``repo``, a new execution and its first task (see
    :func:`create_execution`); the caller runs its scheduler or :func:`start_detached`."""
    from agentos.run.preflight import check_repo

    workflow, _ = find_workflow(ws, workflow_id)
    repo = repo.expanduser().resolve()
    check_repo(repo)
    return create_execution(ws, workflow, repo, params)


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
    check_request(description, field="description")  # a task's description is a request
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
        if len(store.tasks(execution_id)) >= config.max_tasks:
            # Agents that keep adding work (each task adding more) end here.
            raise BadInput(
                f"execution {execution_id} has {config.max_tasks} tasks, its workflow's max_tasks",
                field="max_tasks",
            )
        embedder = embeddings.from_settings(ws) if config.task_deduplication_enabled else None
        return store.add_task(
            execution_id,
            phase,
            description,
            creator=creator or (f"task {parent}" if parent else "cli"),
            parent=parent,
            dedup=config.task_deduplication_enabled,
            threshold=config.similarity_threshold,
            embedding=embedder.embed(description) if embedder else None,
        )
    finally:
        store.close()


def similar_tasks(
    ws: Workspace,
    text: str,
    *,
    execution_id: str | None = None,
    phase: int | None = None,
    limit: int = 5,
) -> list[Match]:
    """``agentos tasks similar``: the live tasks most alike ``text``, best first, with the
    score a new task of that text would get against each (and by which method)."""
    if not text.strip():
        raise BadInput("a task needs a description", field="TEXT")
    embedder = embeddings.from_settings(ws)
    store = WorkflowStore(ws)
    try:
        return store.similar(
            text,
            execution_id=execution_id,
            phase=phase,
            limit=limit,
            embedding=embedder.embed(text) if embedder else None,
        )
    finally:
        store.close()


def pid_file(ws: Workspace, execution_id: str) -> Path:
    """Where the background process of an execution writes its pid (and start time)."""
    return ws.state_dir / "executions" / f"{execution_id}.pid"


def start_detached(
    ws: Workspace, execution_id: str, backend: str | None = None, watch: str | None = None
) -> Path:
    """Run the execution's tasks in a background process (their agents on ``backend``,
    by default ``cluster.backend``, watched on their nodes by ``watch``, a
    ``module:function``); returns its log."""
    import subprocess
    import sys

    log = ws.state_dir / "executions" / f"{execution_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentos.workflows.detached",
                str(ws.root),
                execution_id,
                backend or "settings",
                *([watch] if watch else []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    return log


def cancel_execution(ws: Workspace, execution_id: str, wait: float = 60.0) -> str:
    """Stop an execution: its background process, when one runs it (the running tasks
    stop, their work stays on their branches); the tasks not started are cancelled."""
    import signal
    import time

    from agentos.run.store import pid_alive
    from agentos.workflows.store import ExecutionStatus, TaskStatus

    store = WorkflowStore(ws)
    try:
        execution = store.execution(execution_id)
        if execution.status != ExecutionStatus.RUNNING:
            raise BadInput(f"execution {execution_id} is {execution.status}", field="EXECUTION")
        try:
            pid_text, _, started = pid_file(ws, execution_id).read_text().partition(" ")
            pid: int | None = int(pid_text)
        except (OSError, ValueError):
            pid = None
        if pid is not None and pid_alive(pid, started.strip() or None):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + wait
            while pid_alive(pid, started.strip() or None) and time.monotonic() < deadline:
                time.sleep(0.05)
        for task in store.tasks(execution_id):
            if task.status in (TaskStatus.PENDING, TaskStatus.QUEUED):
                store.set_task(task.id, TaskStatus.CANCELLED, message="the execution was cancelled")
        if store.execution(execution_id).status == ExecutionStatus.RUNNING:
            store.end_execution(execution_id, ExecutionStatus.CANCELLED)
        return str(store.execution(execution_id).status)
    finally:
        store.close()
