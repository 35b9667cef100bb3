"""Workflow executions and their tasks in ``state.db`` (migration ``005_workflows``).

A task is added with its similarity features (:mod:`agentos.workflows.similarity`), its
words and names, and, while it is live, in deduplication's index
(:mod:`agentos.workflows.index`), which compares a new task with the live tasks of the same
execution and phase without reading them all. At or over the workflow's threshold it is
``duplicated`` (pointing at the task it repeats, with the score, its message naming that
task) and never runs; between the related threshold and it, it runs and is linked to that
task as related."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from agentos.errors import BadInput, NotFound
from agentos.state import database
from agentos.workflows.embeddings import Embedding
from agentos.workflows.index import Match, Method, TaskIndex
from agentos.workflows.similarity import DEFAULT_THRESHOLD, RELATED_THRESHOLD, features
from agentos.workspace.layout import Workspace


class TaskStatus(StrEnum):
    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    DUPLICATED = "duplicated"
    CANCELLED = "cancelled"


class ExecutionStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"  # every task ended
    STOPPED = "stopped"  # a validated result ended it (on_result_found: stop_all)
    CANCELLED = "cancelled"


# The tasks a new one may repeat: those that will run, run, or ran well.
LIVE = (TaskStatus.PENDING, TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.DONE)


@dataclass(frozen=True)
class TaskRecord:
    id: int
    execution: str
    phase: int
    description: str
    status: TaskStatus
    parent: int | None
    creator: str
    duplicate_of: int | None
    related_to: int | None
    similarity: float | None
    run_id: str | None
    message: str
    created_at: float
    started_at: float | None
    ended_at: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ExecutionRecord:
    id: str
    workflow: str
    definition: dict[str, Any]
    repo: str
    parameters: dict[str, Any]
    status: ExecutionStatus
    result: dict[str, Any] | None
    created_at: float
    ended_at: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ResultRecord:
    id: int
    execution: str
    task: int | None
    summary: str
    validated: bool  # the workflow's result_checks passed
    detail: str  # what the checks said
    at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_TASK_COLUMNS = (
    "id, execution, phase, description, status, parent, creator, duplicate_of, related_to, "
    "similarity, run_id, message, created_at, started_at, ended_at"
)


class WorkflowStore(database.Store):
    """state.db's executions and tasks (see :class:`agentos.state.database.Store`)."""

    def __init__(self, ws: Workspace) -> None:
        super().__init__(ws.state_db)
        self.ws = ws
        self.index = TaskIndex(self.con)

    # -- executions -------------------------------------------------------------------------

    def create_execution(
        self, execution_id: str, workflow: dict[str, Any], repo: str, parameters: dict[str, Any]
    ) -> None:
        with self._write():
            self.con.execute(
                "INSERT INTO executions (id, workflow, definition, repo, parameters, status, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    execution_id,
                    workflow["id"],
                    json.dumps(workflow),
                    repo,
                    json.dumps(parameters),
                    ExecutionStatus.RUNNING,
                    time.time(),
                ),
            )

    def execution(self, execution_id: str) -> ExecutionRecord:
        with self._read():
            row = self.con.execute(
                "SELECT id, workflow, definition, repo, parameters, status, result, created_at, "
                "ended_at FROM executions WHERE id = ?",
                (execution_id,),
            ).fetchone()
        if row is None:
            raise NotFound(f"no execution {execution_id!r}", field="EXECUTION")
        return _execution(row)

    def executions(self) -> list[ExecutionRecord]:
        with self._read():
            rows = self.con.execute(
                "SELECT id, workflow, definition, repo, parameters, status, result, created_at, "
                "ended_at FROM executions ORDER BY created_at DESC, id DESC"
            ).fetchall()
        return [_execution(r) for r in rows]

    def end_execution(
        self, execution_id: str, status: ExecutionStatus, result: dict[str, Any] | None = None
    ) -> None:
        with self._write():
            self.con.execute(
                "UPDATE executions SET status = ?, result = COALESCE(?, result), ended_at = ? "
                "WHERE id = ?",
                (status, json.dumps(result) if result else None, time.time(), execution_id),
            )

    # -- results ----------------------------------------------------------------------------

    def record_result(
        self, execution_id: str, task_id: int | None, summary: str, validated: bool, detail: str
    ) -> ResultRecord:
        with self._write():
            self.con.execute(
                "INSERT INTO results (execution, task, summary, validated, detail, at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (execution_id, task_id, summary, int(validated), detail, time.time()),
            )
            result_id = int(self.con.last_insert_rowid())
        return next(r for r in self.results(execution_id) if r.id == result_id)

    def results(self, execution_id: str | None = None) -> list[ResultRecord]:
        clause, args = ("WHERE execution = ?", [execution_id]) if execution_id else ("", [])
        with self._read():
            rows = self.con.execute(
                f"SELECT id, execution, task, summary, validated, detail, at FROM results "
                f"{clause} ORDER BY id",
                args,
            ).fetchall()
        return [
            ResultRecord(
                int(str(r[0])),
                str(r[1]),
                None if r[2] is None else int(str(r[2])),
                str(r[3]),
                bool(r[4]),
                str(r[5]),
                float(str(r[6])),
            )
            for r in rows
        ]

    # -- tasks ------------------------------------------------------------------------------

    def add_task(
        self,
        execution_id: str,
        phase: int,
        description: str,
        *,
        creator: str,
        parent: int | None = None,
        dedup: bool = True,
        threshold: float = DEFAULT_THRESHOLD,
        related: float = RELATED_THRESHOLD,
        embedding: Embedding | None = None,
    ) -> TaskRecord:
        """A new task: ``duplicated`` when a live task of the same execution and phase is
        at least ``threshold`` alike (it never runs; its message names the task it
        repeats), else ``pending`` (linked to the most alike one when over ``related``).
        ``embedding``: the new task's vector from an Ollama model
        (:mod:`agentos.workflows.embeddings`): compared with the vectors of the live tasks
        the same model embedded, besides the words."""
        if not description.strip():
            raise BadInput("a task needs a description", field="DESCRIPTION")
        self.execution(execution_id)  # exists
        found = features(description)
        with self._write():
            best = None
            if dedup:
                scope = (execution_id, phase)
                method = Method.words(threshold, related)
                matches = self.index.matches(scope, found, method, 1, floor=threshold)
                if embedding is not None:
                    matches += self.index.embedding_matches(scope, found, embedding, 1)
                best = max(matches, key=lambda m: (m.duplicate, m.margin), default=None)
            duplicate = best is not None and best.duplicate
            status = TaskStatus.DUPLICATED if duplicate else TaskStatus.PENDING
            message = ""
            if best is not None and duplicate:
                original = self._description(best.task)
                message = f"a duplicate of task {best.task}: {original[:200]}"
            self.con.execute(
                "INSERT INTO tasks (execution, phase, description, status, parent, creator, "
                "duplicate_of, related_to, similarity, message, created_at, words, names) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    execution_id,
                    phase,
                    description,
                    status,
                    parent,
                    creator,
                    best.task if duplicate and best else None,
                    best.task if best and not duplicate else None,
                    round(best.score, 4) if best else None,
                    message,
                    time.time(),
                    json.dumps(sorted(found.words)),
                    json.dumps(sorted(found.names)),
                ),
            )
            task_id = int(self.con.last_insert_rowid())
            self._task_event(task_id, status, description[:200])
            if not duplicate:  # a duplicate is no task to repeat
                self.index.add(task_id, execution_id, phase, found, embedding)
        return self.task(task_id)

    def _description(self, task_id: int) -> str:
        row = self.con.execute("SELECT description FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return str(row[0]) if row else ""

    def _task_event(self, task_id: int, status: TaskStatus, note: str) -> None:
        """The task's change into the event stream (inside the caller's transaction)."""
        self.con.execute(
            "INSERT INTO events (at, source, kind, run, task, status, message) "
            "SELECT ?, 'workflow', 'task', run_id, id, status, ? FROM tasks WHERE id = ?",
            (time.time(), f"task {task_id} {status}" + (f": {note}" if note else ""), task_id),
        )

    def similar(
        self,
        text: str,
        *,
        execution_id: str | None = None,
        phase: int | None = None,
        limit: int = 5,
        floor: float = 0.1,
        embedding: Embedding | None = None,
    ) -> list[Match]:
        """The live tasks most alike ``text`` (``agentos tasks similar``), in every
        execution and phase or those given: the scores a new task there would get."""
        new = features(text)
        found: list[Match] = []
        with self._read():
            for scope in self.index.scopes(execution_id, phase):
                method = Method.words(DEFAULT_THRESHOLD, floor)
                found += self.index.matches(scope, new, method, limit, floor=floor)
                if embedding is not None:
                    found += self.index.embedding_matches(scope, new, embedding, limit)
        found.sort(key=lambda m: (-m.margin, m.task))
        best: dict[int, Match] = {}
        for match in found:  # a task found by both methods: its better margin
            best.setdefault(match.task, match)
        return list(best.values())[:limit]

    def term_counts(self, execution_id: str, phase: int) -> dict[str, int]:
        """How many live tasks of the execution and phase hold each term (``""``: how many
        live tasks there are): the document frequencies deduplication weighs terms by."""
        with self._read():
            return self.index.counts(execution_id, phase)

    def plain_matches(self, execution_id: str, phase: int, text: str) -> list[Match]:
        """The scores the index gives, by reading every live task of the scope and scoring
        each: what ``benchmarks/workflow_bench.py`` measures the index against."""
        with self._read():
            return self.index.plain_matches((execution_id, phase), features(text))

    def task(self, task_id: int) -> TaskRecord:
        with self._read():
            row = self.con.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,)
            ).fetchone()
        if row is None:
            raise NotFound(f"no task {task_id}", field="TASK")
        return _task(row)

    def tasks(
        self, execution_id: str | None = None, status: TaskStatus | None = None
    ) -> list[TaskRecord]:
        where, args = [], []
        if execution_id is not None:
            where.append("execution = ?")
            args.append(execution_id)
        if status is not None:
            where.append("status = ?")
            args.append(status)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._read():
            rows = self.con.execute(
                f"SELECT {_TASK_COLUMNS} FROM tasks {clause} ORDER BY id", args
            ).fetchall()
        return [_task(r) for r in rows]

    def set_task(self, task_id: int, status: TaskStatus, **fields: Any) -> None:
        allowed = {"run_id", "message", "started_at", "ended_at"}
        unknown = set(fields) - allowed
        assert not unknown, unknown
        sets = ", ".join(["status = ?", *(f"{k} = ?" for k in fields)])
        with self._write():
            self.con.execute(
                f"UPDATE tasks SET {sets} WHERE id = ?", (status, *fields.values(), task_id)
            )
            if status not in LIVE:  # no longer a task a new one could repeat
                self.index.remove(task_id)
            self._task_event(task_id, status, str(fields.get("message") or ""))


def _task(row: Any) -> TaskRecord:
    values = list(row)
    values[4] = TaskStatus(values[4])
    return TaskRecord(*values)


def _execution(row: Any) -> ExecutionRecord:
    (eid, workflow, definition, repo, parameters, status, result, created, ended) = row
    return ExecutionRecord(
        eid,
        workflow,
        json.loads(definition),
        repo,
        json.loads(parameters),
        ExecutionStatus(status),
        json.loads(result) if result else None,
        created,
        ended,
    )
