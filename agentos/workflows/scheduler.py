"""Running an execution's tasks: each task is a normal run (worktree, tmux, sandbox, gate,
merge, receipts) whose gate adds the phase's checks, at most ``max_concurrent`` at once.

A task's request carries the task, its phase's description, the done definitions as a
checklist and the checks that decide it; the agent may say it is done, only the gate makes
it ``done``. What the agent posted to its outbox (:mod:`agentos.run.outbox`) is read when its
run ends: new tasks (deduplicated, the task as their parent) and a result.

A phase changes nothing unless its definition says ``changes: true``: its tasks run as
``agentos run --no-merge`` does, a task is done when its run is ``ready`` (every gate
passed), its work stays on its branches, and nothing lands on the target branch.

A result is validated by the workflow's ``result_checks`` on the repository as the task
left it (for a phase that changes nothing, on the commit its agent's gate passed); a
validated result with ``on_result_found: stop_all`` ends the execution: the tasks still to
run are cancelled and the running ones stopped (their work stays on their branches).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentos.errors import AgentOSError
from agentos.run.store import RunStatus, new_run_id
from agentos.run.values import RunOptions, RunReport
from agentos.workflows.definitions import Phase, WorkflowDefinition
from agentos.workflows.executions import EXECUTION_ENV, TASK_ENV
from agentos.workflows.store import (
    ExecutionStatus,
    TaskRecord,
    TaskStatus,
    WorkflowStore,
)
from agentos.workspace.layout import Workspace
from agentos.workspace.settings import Backend

POLL = 0.1  # seconds between looks for new tasks
DESCRIPTION_MAX = 4000  # characters of a task an agent posts
ENDED = (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.DUPLICATED, TaskStatus.CANCELLED)


def task_request(workflow: WorkflowDefinition, phase: Phase, task: TaskRecord) -> str:
    """What the agent of a task is asked."""
    lines = [
        task.description.strip(),
        "",
        f"This is a task of phase {phase.id} ({phase.name}) of the workflow "
        f"{workflow.name!r}: {phase.description.strip()}",
    ]
    if phase.done_definitions:
        lines += ["", "Done when:", *(f"- [ ] {d}" for d in phase.done_definitions)]
    if phase.checks:
        lines += ["", "These checks decide it: " + ", ".join(c.name for c in phase.checks)]
    later = [p for p in workflow.phases if p.id > phase.id]
    if later:
        names = ", ".join(f"{p.id} ({p.name})" for p in later)
        lines += [
            "",
            f"Work for a later phase ({names}) is added with: "
            'agentos tasks create "WHAT TO DO" --phase N',
        ]
    if workflow.config.has_result:
        lines += [
            "",
            f"The workflow's result: {workflow.config.result_criteria or 'see the workflow'}. "
            'When this task achieves it: agentos results submit "SUMMARY"',
        ]
    if phase.notes:
        lines += ["", phase.notes.strip()]
    return "\n".join(lines)


class Scheduler:
    """Runs one execution's tasks until none is left to run (or it is stopped)."""

    def __init__(
        self,
        ws: Workspace,
        execution_id: str,
        *,
        max_concurrent: int | None = None,
        stop: threading.Event | None = None,
        on_event: Callable[[str], None] | None = None,
        on_failure: Callable[[TaskRecord], None] | None = None,
        backend: Backend | None = None,
        watch: str | None = None,
    ) -> None:
        from agentos.cluster import dispatch_for

        self.ws, self.execution_id = ws, execution_id
        # Each task's run drives its agents here, or on the cluster (`--backend ray`,
        # `cluster.backend`): up to max_concurrent runs at once, their agents on any node,
        # watched there by ``watch`` (the guardian's, handed in by the caller).
        self.dispatch = dispatch_for(ws, backend, watch=watch)
        self.store = WorkflowStore(ws)
        execution = self.store.execution(execution_id)
        self.workflow = WorkflowDefinition.model_validate(execution.definition)
        self.repo = Path(execution.repo)
        self.max_concurrent = max_concurrent or self.workflow.config.max_concurrent
        self.stop = stop or threading.Event()  # set: stop every task (stop_all, shutdown)
        self.say = on_event or (lambda _line: None)
        self.on_failure = on_failure  # told of each task that fails, as it fails
        self._running: dict[int, Future[None]] = {}
        self._wake = threading.Event()  # a task ended: look again at once

    def run(self) -> ExecutionStatus:
        """Until every task has ended, or a validated result stops it all."""
        try:
            with ThreadPoolExecutor(max_workers=self.max_concurrent) as pool:
                while True:
                    self._running = {t: f for t, f in self._running.items() if not f.done()}
                    if self.stop.is_set():
                        break
                    pending = self.store.tasks(self.execution_id, TaskStatus.PENDING)
                    room = self.max_concurrent - len(self._running)
                    for task in pending[: max(0, room)]:
                        self.store.set_task(task.id, TaskStatus.QUEUED)
                        future = pool.submit(self._run_task, task)
                        future.add_done_callback(lambda _f: self._wake.set())
                        self._running[task.id] = future
                    if not self._running and not pending:
                        break
                    self._wake.wait(POLL)  # a task ending, or new tasks from outside
                    self._wake.clear()
            status = self._end()
        finally:
            self.store.close()
        return status

    def _end(self) -> ExecutionStatus:
        for task in self.store.tasks(self.execution_id):
            if task.status in (TaskStatus.PENDING, TaskStatus.QUEUED):
                self.store.set_task(task.id, TaskStatus.CANCELLED, message="the execution stopped")
        execution = self.store.execution(self.execution_id)
        if execution.status != ExecutionStatus.RUNNING:
            return execution.status
        status = ExecutionStatus.CANCELLED if self.stop.is_set() else ExecutionStatus.DONE
        self.store.end_execution(self.execution_id, status)
        return status

    def _run_task(self, task: TaskRecord) -> None:
        phase = self.workflow.phase(task.phase)
        run_id = new_run_id()
        self.store.set_task(task.id, TaskStatus.RUNNING, run_id=run_id, started_at=time.time())
        self.say(f"task {task.id} (phase {phase.id}) started as run {run_id}")
        try:
            report = self._start(task, phase, run_id)
        except AgentOSError as exc:
            self.store.set_task(task.id, TaskStatus.FAILED, message=str(exc), ended_at=time.time())
            self.say(f"task {task.id} failed: {exc}")
            self._failed(task.id)
            return
        # A phase that does not say it changes the repository never merges: its tasks'
        # passing work waits on their branches (the run is `ready`), which is their done.
        done = report.status == (RunStatus.SUCCEEDED if phase.changes else RunStatus.READY)
        message = report.message
        if report.status == RunStatus.READY and not phase.changes:
            message = f"phase {phase.id} changes nothing (no `changes: true`): {message}"
        if report.status == RunStatus.NO_MATCH and not (phase.agent or phase.card):
            message += f"; or name the agent of phase {phase.id} (`agent:` in the workflow)"
        self.store.set_task(
            task.id,
            TaskStatus.DONE if done else TaskStatus.FAILED,
            message=message,
            ended_at=time.time(),
        )
        self.say(f"task {task.id}: {'done' if done else 'failed'} ({message})")
        if not done:
            self._failed(task.id)
        self._read_outboxes(task, report, done)

    def _failed(self, task_id: int) -> None:
        if self.on_failure is not None:
            self.on_failure(self.store.task(task_id))

    def _start(self, task: TaskRecord, phase: Phase, run_id: str) -> RunReport:
        from agentos.run.orchestrator import start_run

        options = RunOptions(
            force=True,  # the workflow, not the interview, decided this task is wanted
            agent=self._agent(phase),
            run_id=run_id,
            merge=phase.changes,  # a phase that does not say it may, changes nothing
            checks=[c.model_dump(mode="json", exclude_defaults=True) for c in phase.checks],
            env={EXECUTION_ENV: self.execution_id, TASK_ENV: str(task.id)},
        )
        return start_run(
            self.ws,
            task_request(self.workflow, phase, task),
            self.repo,
            options,
            stop=self.stop,
            dispatch=self.dispatch,
        )

    def _agent(self, phase: Phase) -> str | None:
        if phase.agent:
            return phase.agent
        if phase.card:
            from agentos.routing.cards import load_cards

            for card in load_cards(self.ws.cards_dir).cards:
                if card.id == phase.card:
                    return card.agent
        return None  # routing decides

    def _read_outboxes(self, task: TaskRecord, report: RunReport, done: bool) -> None:
        from agentos.run.outbox import read_outbox
        from agentos.workflows.executions import create_task
        from agentos.workspace.files import kept_outbox

        for agent in report.agents:
            entries, problems = read_outbox(kept_outbox(agent.log))
            for problem in problems:
                self.say(f"task {task.id}: {agent.agent}'s outbox: {problem}")
            for entry in entries:
                if entry["kind"] == "task":
                    self._posted_task(task, entry, create_task)
                elif entry["kind"] == "result" and done:
                    phase = self.workflow.phase(task.phase)
                    at = None if phase.changes else agent.gated_commit
                    self._posted_result(task, entry, at)
                elif entry["kind"] == "memory" and isinstance(entry.get("text"), str):
                    from agentos.workflows.memory import save_memory

                    try:
                        save_memory(self.ws, entry["text"], entry.get("title"))
                    except AgentOSError as exc:
                        self.say(f"task {task.id}: its memory was refused: {exc}")

    def _posted_task(self, task: TaskRecord, entry: dict[str, Any], create: Any) -> None:
        description = entry.get("description")
        phase = entry.get("phase")
        if not isinstance(description, str) or not isinstance(phase, int):
            self.say(f"task {task.id}: a posted task needs a description and a phase")
            return
        try:
            made = create(
                self.ws,
                description[:DESCRIPTION_MAX],
                phase,
                execution_id=self.execution_id,
                parent=task.id,
                creator=f"task {task.id}",
            )
        except AgentOSError as exc:
            self.say(f"task {task.id}: its posted task was refused: {exc}")
            return
        self.say(f"task {task.id} added task {made.id} ({made.status})")

    def _posted_result(self, task: TaskRecord, entry: dict[str, Any], at: str | None) -> None:
        """A result, checked on the repository as the task left it: the target branch, or
        for a phase that changes nothing, ``at``, the commit its agent's gate passed."""
        from agentos.workflows.results import validate_result, validate_result_at

        summary = str(entry.get("summary", ""))[:DESCRIPTION_MAX]
        if at is None:
            validated, detail = validate_result(self.ws, self.workflow, self.repo)
        else:
            validated, detail = validate_result_at(self.ws, self.workflow, self.repo, at)
        self.store.record_result(self.execution_id, task.id, summary, validated, detail)
        self.say(f"task {task.id} submitted a result: {'validated' if validated else detail}")
        if validated and self.workflow.config.on_result_found == "stop_all":
            self.store.end_execution(self.execution_id, ExecutionStatus.STOPPED)
            self.stop.set()
