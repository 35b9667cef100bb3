"""The Python SDK: run workflows from code (the seed's verbs).

```python
from agentos.sdk import AgentOS, Phase

with AgentOS(workspace=".", repo=".", phases=[
    Phase(id=1, name="review", description="Review the change; write REVIEW.md",
          checks=[{"name": "review written", "file_exists": "REVIEW.md"}]),
]) as aos:
    aos.create_task("Review the change on branch feature/x", phase_id=1)
    result = aos.wait_for_result(timeout=1800)
    if not result.validated:
        raise SystemExit(1)
```

``AgentOS(workflow_definitions=[...])`` registers workflows to :meth:`AgentOS.launch` with
their launch template's parameters; ``phases=[...]`` (with an optional
``workflow_config``) is one workflow whose tasks are created from code. Each execution's
tasks are run by a scheduler thread of this process (each task a normal run: worktree,
tmux, sandbox, gate, merge, receipts); :meth:`AgentOS.shutdown` (or leaving the ``with``
block) waits for them (``graceful``) or stops them, and leaves no tmux session, worktree or
scheduler behind.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos.errors import BadInput, TaskFailed, check_request
from agentos.workflows.definitions import (
    LaunchParameter,
    LaunchTemplate,
    Phase,
    WorkflowConfig,
    WorkflowDefinition,
)
from agentos.workflows.similarity import DEFAULT_THRESHOLD
from agentos.workflows.store import ExecutionStatus, TaskRecord, TaskStatus, WorkflowStore
from agentos.workspace.layout import find_workspace

__all__ = [
    "AgentOS",
    "LaunchParameter",
    "LaunchTemplate",
    "Phase",
    "Result",
    "TaskFailed",
    "WorkflowConfig",
    "WorkflowDefinition",
]

POLL = 0.1


@dataclass(frozen=True)
class Result:
    validated: bool  # the workflow's result_checks passed on what the task left
    summary: str  # what the agent said
    detail: str  # what the checks said
    execution: str | None
    task: int | None
    failures: tuple[tuple[int, str], ...] = ()  # (task, why) of each task that failed


class AgentOS:
    def __init__(
        self,
        workspace: str | Path | None = None,
        *,
        workflow_definitions: list[WorkflowDefinition] | None = None,
        phases: list[Phase] | None = None,
        workflow_config: WorkflowConfig | None = None,
        repo: str | Path | None = None,
        max_concurrent: int | None = None,
        dedup: bool = True,
        similarity_threshold: float = DEFAULT_THRESHOLD,
    ) -> None:
        """Workflows to run in ``workspace`` (found as the CLI finds it) on ``repo``.

        Raises:
            BadInput: neither or both of ``workflow_definitions`` and ``phases``.
            NotFound: no workspace (its ``hint`` says how to make one).
        """
        if workflow_definitions and phases:
            raise BadInput("give workflow_definitions or phases, not both", field="phases")
        if not workflow_definitions and not phases:
            raise BadInput("give workflow_definitions or phases", field="phases")
        # As the CLI finds it: given, then AGENTOS_HOME, then a parent with .agentos/.
        self.ws = find_workspace(workspace)
        self.repo = Path(repo or ".").expanduser().resolve()
        self.max_concurrent = max_concurrent
        config_overrides = {
            "task_deduplication_enabled": dedup,
            "similarity_threshold": similarity_threshold,
            **({"max_concurrent": max_concurrent} if max_concurrent else {}),
        }
        if phases:
            base = workflow_config or WorkflowConfig()
            workflow_definitions = [
                WorkflowDefinition(
                    id="default",
                    name="default",
                    phases=phases,
                    config=base.model_copy(update=config_overrides),
                )
            ]
        assert workflow_definitions is not None
        self.workflows = {w.id: w for w in workflow_definitions}
        self._default = workflow_definitions[0].id if len(workflow_definitions) == 1 else None
        self._threads: dict[str, threading.Thread] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self._execution: str | None = None  # the one create_task adds to by default

    # -- life -------------------------------------------------------------------------------

    def start(self) -> AgentOS:
        """Ready the workspace; ``with AgentOS(...) as aos`` calls it."""
        self.ws.ensure()
        self._started = True
        return self

    def __enter__(self) -> AgentOS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown(graceful=exc == (None, None, None))

    def shutdown(self, graceful: bool = True) -> None:
        """Wait for the running executions (``graceful``), or stop them (their work stays
        on their branches); then nothing of this SDK runs any more."""
        if not graceful:
            self._stop.set()
        for thread in list(self._threads.values()):
            thread.join()
        self._started = False

    # -- work ---------------------------------------------------------------------------------

    def launch(self, workflow_id: str, **params: Any) -> str:
        """A new execution of a registered workflow, its first task from the launch
        template with ``params``; its id.

        Raises:
            BadInput: not started, no such workflow, or ``params`` that do not fit its
                launch template.
        """
        from agentos.workflows.executions import create_execution

        self._require_started()
        workflow = self.workflows.get(workflow_id)
        if workflow is None:
            raise BadInput(
                f"no workflow {workflow_id!r} registered (these are: {', '.join(self.workflows)})",
                field="workflow_id",
            )
        execution, _ = create_execution(self.ws, workflow, self.repo, params)
        self._schedule(execution)
        return execution

    def create_task(
        self, description: str, phase_id: int = 1, *, execution: str | None = None
    ) -> TaskRecord:
        """A task for ``phase_id``: of ``execution``, or of this SDK's execution of its one
        workflow (made with the first task).

        Raises:
            BadInput: not started, an empty or oversized description, an unknown phase, or
                several workflows and no ``execution``.
        """
        from agentos.workflows.executions import create_task, open_execution

        self._require_started()
        check_request(description, field="description")  # before any execution is opened
        with self._lock:
            target = execution or self._execution
            if target is None:
                if self._default is None:
                    raise BadInput("several workflows: say which execution", field="execution")
                workflow = self.workflows[self._default]
                workflow.phase(phase_id)
                target = self._execution = open_execution(self.ws, workflow, self.repo, {})
            task = create_task(self.ws, description, phase_id, execution_id=target, creator="sdk")
        self._schedule(target)
        return task

    def get_task(self, task_id: int) -> TaskRecord:
        """Task ``task_id`` as recorded now.

        Raises:
            NotFound: no such task.
        """
        store = WorkflowStore(self.ws)
        try:
            return store.task(task_id)
        finally:
            store.close()

    def tasks(self, execution: str | None = None) -> list[TaskRecord]:
        """The tasks of ``execution`` (default: this SDK's), as recorded now."""
        store = WorkflowStore(self.ws)
        try:
            return store.tasks(execution or self._execution)
        finally:
            store.close()

    def wait_for_completion(self, timeout: float | None = None) -> list[TaskRecord]:
        """Every task of this SDK's executions, once none is left to run;
        :class:`TimeoutError` after ``timeout`` seconds.

        Raises:
            TimeoutError: tasks still run after ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in list(self._threads.values()):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)
            if thread.is_alive():
                raise TimeoutError(f"the tasks did not end within {timeout}s")
        return [t for e in self._threads for t in self.tasks(e)]

    def wait_for_result(self, timeout: float | None = None) -> Result:
        """The first result submitted to this SDK's executions (validated or not), or an
        unvalidated one once they all ended without any and none failed.

        Raises:
            TaskFailed: they all ended without a result and tasks failed; the message says
                why each failed (what its run said).
            TimeoutError: no result within ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            store = WorkflowStore(self.ws)
            try:
                found = [r for e in list(self._threads) for r in store.results(e)]
                ended = all(
                    store.execution(e).status != ExecutionStatus.RUNNING for e in self._threads
                )
                failures = tuple(
                    (t.id, t.message or "(no reason recorded)")
                    for e in list(self._threads)
                    for t in store.tasks(e, TaskStatus.FAILED)
                )
            finally:
                store.close()
            validated = [r for r in found if r.validated]
            picked = validated or found
            chosen = picked[0] if picked else None
            if validated or (ended and not any(t.is_alive() for t in self._threads.values())):
                if chosen is None and failures:
                    raise TaskFailed(
                        list(failures), hint="no result was submitted; `agentos tasks show ID`"
                    )
                if chosen is None:
                    return Result(False, "", "no result was submitted", None, None)
                return Result(
                    chosen.validated,
                    chosen.summary,
                    chosen.detail,
                    chosen.execution,
                    chosen.task,
                    failures,
                )
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"no result within {timeout}s")
            time.sleep(POLL)

    # -- inside -------------------------------------------------------------------------------

    def _require_started(self) -> None:
        if not self._started:
            raise BadInput(
                "not started", hint="call start() first, or use `with AgentOS(...) as aos`"
            )

    def _schedule(self, execution: str) -> None:
        """A scheduler thread for ``execution`` unless one runs (it ends when no task is
        left; a task created later starts another)."""
        from agentos.workflows.scheduler import Scheduler

        with self._lock:
            thread = self._threads.get(execution)
            if thread is not None and thread.is_alive():
                return
            scheduler = Scheduler(
                self.ws,
                execution,
                max_concurrent=self.max_concurrent,
                stop=self._stop,
                on_failure=_say_failed,
            )
            thread = threading.Thread(
                target=scheduler.run, name=f"agentos-scheduler-{execution}", daemon=True
            )
            self._threads[execution] = thread
            thread.start()


def _say_failed(task: TaskRecord) -> None:
    """A failed task on stderr, as it fails: a script that only checks a result still says
    why it got none."""
    print(
        f"agentos: task {task.id} (phase {task.phase}) failed: {task.message} "
        f"(`agentos tasks show {task.id}`)",
        file=sys.stderr,
        flush=True,
    )
