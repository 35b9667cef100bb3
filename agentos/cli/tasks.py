"""``agentos tasks`` and ``agentos executions``: a workflow's tasks and its executions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agentos.cli._common import json_option, print_json, table, workspace

if TYPE_CHECKING:
    from agentos.workflows.store import TaskRecord


@click.group()
def tasks() -> None:
    """Tasks of workflow executions: create one (agents do, from inside their run), list,
    show, and find the live ones most alike a text."""


@tasks.command()
@click.argument("description", metavar="DESCRIPTION")
@click.option("--phase", type=click.IntRange(min=1), required=True, help="The phase it is for.")
@click.option("--execution", "execution_id", help="Default: $AGENTOS_EXECUTION_ID.")
@click.option("--parent", type=int, help="The task it comes from (default: $AGENTOS_TASK_ID).")
@json_option
def create(
    description: str, phase: int, execution_id: str | None, parent: int | None, as_json: bool
) -> None:
    """Add a task to a phase of an execution. A task too like a live one of the same phase
    is recorded as its duplicate and never runs. Inside a task's run (where the workspace
    is out of reach) the request goes to the run's outbox and is added, deduplicated,
    when the attempt ends."""
    from agentos.run import outbox
    from agentos.workflows.executions import create_task

    if outbox.in_a_run() and execution_id is None:
        _require_task_run()
        outbox.post({"kind": "task", "description": description, "phase": phase})
        if as_json:
            print_json({"queued": True, "description": description, "phase": phase})
        else:
            click.echo(f"queued for phase {phase}: added when this attempt ends")
        return

    task = create_task(workspace(), description, phase, execution_id=execution_id, parent=parent)
    if as_json:
        print_json(task.as_dict())
        return
    if task.duplicate_of is not None:
        click.echo(
            f"task {task.id}: {task.message} (similarity {task.similarity:.2f}); "
            f"it will not run (agentos tasks similar TEXT shows the nearest tasks)"
        )
    else:
        related = f"; related to task {task.related_to}" if task.related_to else ""
        click.echo(f"task {task.id}: {task.status} in phase {task.phase}{related}")


def _require_task_run() -> None:
    """Inside a run, only a workflow task's run has an execution to post to."""
    import os

    from agentos.errors import BadInput
    from agentos.workflows.executions import EXECUTION_ENV

    if not os.environ.get(EXECUTION_ENV):
        raise BadInput(
            "this run is not a workflow task's: there is no execution to add to", field="run"
        )


@tasks.command()
@click.argument("text", metavar="TEXT")
@click.option("--execution", "execution_id", help="Only this execution's tasks.")
@click.option("--phase", type=click.IntRange(min=1), help="Only this phase's tasks.")
@click.option(
    "--limit", type=click.IntRange(min=1), default=5, show_default=True, help="At most this many."
)
@json_option
def similar(
    text: str, execution_id: str | None, phase: int | None, limit: int, as_json: bool
) -> None:
    """The live tasks most alike TEXT, best first, with the score a new task of that text
    would get against each and the threshold it is judged by: why a task was refused as a
    duplicate, or why it was not."""
    from agentos.workflows.executions import similar_tasks
    from agentos.workflows.store import WorkflowStore

    ws = workspace()
    found = similar_tasks(ws, text, execution_id=execution_id, phase=phase, limit=limit)
    store = WorkflowStore(ws)
    try:
        described = {m.task: store.task(m.task).description for m in found}
    finally:
        store.close()
    if as_json:
        print_json([{**m.as_dict(), "description": described[m.task]} for m in found])
        return
    table(
        "similar tasks",
        ["task", "execution", "phase", "score", "method", "duplicate", "description"],
        [
            (
                m.task,
                m.execution,
                m.phase,
                f"{m.score:.2f}",
                m.method.name,
                f"yes (>= {m.method.threshold:g})" if m.duplicate else "no",
                described[m.task][:80],
            )
            for m in found
        ],
    )


@tasks.command("list")
@click.option("--execution", "execution_id", help="Only this execution's tasks.")
@json_option
def list_(execution_id: str | None, as_json: bool) -> None:
    """Tasks, oldest first."""
    from agentos.workflows.store import WorkflowStore

    store = WorkflowStore(workspace())
    try:
        found = store.tasks(execution_id)
    finally:
        store.close()
    if as_json:
        print_json([t.as_dict() for t in found])
        return
    table(
        "tasks",
        ["id", "execution", "phase", "status", "parent", "description"],
        [
            (
                t.id,
                t.execution,
                t.phase,
                _status(t.status, t.duplicate_of),
                t.parent or "",
                t.description[:80],
            )
            for t in found
        ],
    )


def _status(status: str, duplicate_of: int | None) -> str:
    """A task's status, and whose duplicate it is when it is one."""
    return str(status) if duplicate_of is None else f"{status} (of {duplicate_of})"


@tasks.command()
@click.argument("task_id", metavar="TASK", type=int)
@json_option
def show(task_id: int, as_json: bool) -> None:
    """One task whole."""
    from agentos.workflows.store import WorkflowStore

    store = WorkflowStore(workspace())
    try:
        task = store.task(task_id)
    finally:
        store.close()
    if as_json:
        print_json(task.as_dict())
        return
    for key, value in task.as_dict().items():
        if value not in (None, ""):
            click.echo(f"{key}: {value}")


@click.group()
def executions() -> None:
    """Workflow executions: list, show."""


@executions.command("list")
@json_option
def executions_list(as_json: bool) -> None:
    """Executions, newest first."""
    from agentos.workflows.store import WorkflowStore

    store = WorkflowStore(workspace())
    try:
        found = store.executions()
        counts = {e.id: len(store.tasks(e.id)) for e in found}
    finally:
        store.close()
    if as_json:
        print_json([{**e.as_dict(), "tasks": counts[e.id]} for e in found])
        return
    table(
        "executions",
        ["id", "workflow", "status", "tasks", "repo"],
        [(e.id, e.workflow, e.status, counts[e.id], e.repo) for e in found],
    )


@executions.command("wait")
@click.argument("execution_id", metavar="EXECUTION")
@click.option("--timeout", type=click.FloatRange(min=0), help="Seconds; then exit 1.")
@click.pass_context
def executions_wait(ctx: click.Context, execution_id: str, timeout: float | None) -> None:
    """Wait until the execution has ended; exit 0 when no task failed."""
    import time

    from agentos.cli._common import fail
    from agentos.workflows.store import ExecutionStatus, TaskStatus, WorkflowStore

    deadline = None if timeout is None else time.monotonic() + timeout
    store = WorkflowStore(workspace())
    try:
        while store.execution(execution_id).status == ExecutionStatus.RUNNING:
            if deadline is not None and time.monotonic() > deadline:
                click.echo(f"execution {execution_id}: still running after {timeout:g}s")
                fail(ctx, 1)
            time.sleep(0.2)
        execution = store.execution(execution_id)
        failed = [t for t in store.tasks(execution_id) if t.status == TaskStatus.FAILED]
    finally:
        store.close()
    click.echo(f"execution {execution_id}: {execution.status}")
    say_failed(failed)
    if failed or execution.status == ExecutionStatus.CANCELLED:
        fail(ctx, 1)


def say_failed(failed: list[TaskRecord]) -> None:
    """Each failed task and why, on stderr."""
    for task in failed:
        reason = task.message or "(no reason recorded)"
        click.echo(f"task {task.id} (phase {task.phase}) failed: {reason}", err=True)


@executions.command("cancel")
@click.argument("execution_id", metavar="EXECUTION")
def executions_cancel(execution_id: str) -> None:
    """Stop an execution: running tasks stop (their work stays on their branches), the
    others are cancelled."""
    from agentos.workflows.executions import cancel_execution

    click.echo(f"execution {execution_id}: {cancel_execution(workspace(), execution_id)}")


@executions.command("show")
@click.argument("execution_id", metavar="EXECUTION")
@json_option
def executions_show(execution_id: str, as_json: bool) -> None:
    """An execution and its tasks."""
    from agentos.cli import views

    data = views.execution(workspace(), execution_id)
    if as_json:
        print_json(data)
        return
    click.echo(f"execution {data['id']}: {data['workflow']}, {data['status']}")
    for t in data["tasks"]:
        status = _status(t["status"], t["duplicate_of"])
        click.echo(f"  task {t['id']} phase {t['phase']} {status}: {t['description'][:90]}")


@click.group()
def results() -> None:
    """Workflow results: submit one (agents do, from inside their run), list them."""


@results.command()
@click.argument("summary", metavar="SUMMARY")
@click.option("--execution", "execution_id", help="Default: $AGENTOS_EXECUTION_ID.")
@json_option
def submit(summary: str, execution_id: str | None, as_json: bool) -> None:
    """Submit the workflow's result. It counts only once the workflow's result_checks
    pass on the repository as the task left it; inside a run it is checked when the run
    ends and its gate passed."""
    from agentos.run import outbox

    if outbox.in_a_run() and execution_id is None:
        _require_task_run()
        outbox.post({"kind": "result", "summary": summary})
        if as_json:
            print_json({"queued": True, "summary": summary})
        else:
            click.echo("result queued: checked when this run's gate has passed")
        return
    from agentos.errors import BadInput
    from agentos.workflows.results import submit_result

    if not execution_id:
        raise BadInput("which execution? (--execution)", field="--execution")
    record = submit_result(workspace(), execution_id, summary)
    if as_json:
        print_json(record.as_dict())
    else:
        verdict = "validated" if record.validated else "not validated"
        click.echo(f"result {record.id}: {verdict} ({record.detail})")


@results.command("list")
@click.option("--execution", "execution_id", help="Only this execution's results.")
@json_option
def results_list(execution_id: str | None, as_json: bool) -> None:
    """Submitted results, oldest first, with whether their checks passed."""
    from agentos.workflows.store import WorkflowStore

    store = WorkflowStore(workspace())
    try:
        found = store.results(execution_id)
    finally:
        store.close()
    if as_json:
        print_json([r.as_dict() for r in found])
        return
    table(
        "results",
        ["id", "execution", "task", "validated", "summary", "detail"],
        [(r.id, r.execution, r.task or "", r.validated, r.summary[:60], r.detail) for r in found],
    )
