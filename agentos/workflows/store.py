"""Workflow executions and their tasks in the state (SQLite migration ``005_workflows``).

A task is added with its similarity features (:mod:`agentos.workflows.similarity`): its
words and names, and one ``task_terms`` row per word and name, indexed by (execution,
phase, term). Deduplication compares a new task only with the live tasks of the same
execution and phase that share a term with it and could still reach the related
threshold (an upper bound on the score computed in SQL from the shared count), so a new
task is checked against thousands in a few milliseconds. Over the workflow's threshold
it is ``duplicated`` (pointing at the task it repeats, with the score) and never runs;
between the related threshold and it, it runs and is linked to that task as related.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from agentos.errors import BadInput, NotFound
from agentos.state import database
from agentos.workflows.similarity import (
    DEFAULT_THRESHOLD,
    ONE_SIDED_NAMES,
    RELATED_THRESHOLD,
    Features,
    features,
    similarity,
)
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
NAME_TERM = "="  # prefixes a name among the terms (a stem never holds one)


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
    """The state's executions and tasks (see :class:`agentos.state.database.Store`)."""

    def __init__(self, ws: Workspace) -> None:
        super().__init__(ws.state)
        self.ws = ws

    # -- executions -------------------------------------------------------------------------

    def create_execution(
        self, execution_id: str, workflow: dict[str, Any], repo: str, parameters: dict[str, Any]
    ) -> None:
        self.write(
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
        row = self.one(
            "SELECT id, workflow, definition, repo, parameters, status, result, created_at, "
            "ended_at FROM executions WHERE id = ?",
            (execution_id,),
        )
        if row is None:
            raise NotFound(f"no execution {execution_id!r}", field="EXECUTION")
        return _execution(row)

    def executions(self) -> list[ExecutionRecord]:
        rows = self.query(
            "SELECT id, workflow, definition, repo, parameters, status, result, created_at, "
            "ended_at FROM executions ORDER BY created_at DESC, id DESC"
        )
        return [_execution(r) for r in rows]

    def end_execution(
        self, execution_id: str, status: ExecutionStatus, result: dict[str, Any] | None = None
    ) -> None:
        self.write(
            "UPDATE executions SET status = ?, result = COALESCE(?, result), ended_at = ? "
            "WHERE id = ?",
            (status, json.dumps(result) if result else None, time.time(), execution_id),
        )

    # -- results ----------------------------------------------------------------------------

    def record_result(
        self, execution_id: str, task_id: int | None, summary: str, validated: bool, detail: str
    ) -> ResultRecord:
        row = self.query(
            "INSERT INTO results (execution, task, summary, validated, detail, at) "
            "VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
            (execution_id, task_id, summary, int(validated), detail, time.time()),
        )
        result_id = int(row[0][0])
        return next(r for r in self.results(execution_id) if r.id == result_id)

    def results(self, execution_id: str | None = None) -> list[ResultRecord]:
        clause, args = ("WHERE execution = ?", [execution_id]) if execution_id else ("", [])
        rows = self.query(
            f"SELECT id, execution, task, summary, validated, detail, at FROM results "
            f"{clause} ORDER BY id",
            args,
        )
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
    ) -> TaskRecord:
        """A new task: ``duplicated`` when a live task of the same execution and phase is
        at least ``threshold`` alike (it never runs), else ``pending`` (linked to the most
        alike one when over ``related``). Two added at once, from any machines, are
        compared with each other: one waits for the other (a lock on the execution)."""
        if not description.strip():
            raise BadInput("a task needs a description", field="DESCRIPTION")
        self.execution(execution_id)  # exists
        found = features(description)

        def add(con: database.Connection) -> int:
            con.lock(f"agentos tasks {execution_id}")
            best = self._most_similar(con, execution_id, phase, found, related) if dedup else None
            duplicate = best is not None and best[1] >= threshold
            status = TaskStatus.DUPLICATED if duplicate else TaskStatus.PENDING
            task_id = int(
                con.rows(
                    "INSERT INTO tasks (execution, phase, description, status, parent, creator, "
                    "duplicate_of, related_to, similarity, created_at, words, names) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                    (
                        execution_id,
                        phase,
                        description,
                        status,
                        parent,
                        creator,
                        best[0] if duplicate and best else None,
                        best[0] if best and not duplicate else None,
                        round(best[1], 4) if best else None,
                        time.time(),
                        json.dumps(sorted(found.words)),
                        json.dumps(sorted(found.names)),
                    ),
                )[0][0]
            )
            _task_event(con, task_id, status, description[:200])
            if not duplicate:  # a duplicate is no task to repeat
                con.write_many(
                    "INSERT INTO task_terms (task, execution, phase, term, nwords, nnames) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (task_id, execution_id, phase, t, len(found.words), len(found.names))
                        for t in _terms(found)
                    ],
                )
            return task_id

        return self.task(self.transaction(add))

    def _most_similar(
        self, con: database.Connection, execution_id: str, phase: int, new: Features, floor: float
    ) -> tuple[int, float] | None:
        """The live task most alike ``new`` scoring at least ``floor``. The index gives,
        for each task sharing a term, how many words and names it shares; from those and
        its word and name counts SQL bounds its score from above (the names' factor is
        exact), so only tasks that could reach ``floor`` are read and scored."""
        terms = _terms(new)
        if not terms:
            return None
        marks = ",".join("?" * len(terms))
        aw, an = len(new.words), len(new.names)
        candidates = con.rows(
            f"""
            SELECT task FROM (
                SELECT task, nwords, nnames, COUNT(*) AS total,
                       SUM(CASE WHEN substr(term, 1, 1) = '{NAME_TERM}' THEN 1 ELSE 0 END)
                           AS names
                FROM task_terms
                WHERE execution = ? AND phase = ? AND term IN ({marks})
                GROUP BY task, nwords, nnames
            ) AS shared
            WHERE (CASE WHEN ? + nwords = 0 THEN 1.0
                        ELSE 2.0 * (total - names) / (? + nwords) END)
                * (CASE WHEN ? > 0 AND nnames > 0 THEN 1.0 * names / (? + nnames - names)
                        WHEN ? > 0 OR nnames > 0 THEN {ONE_SIDED_NAMES}
                        ELSE 1.0 END) >= ?
            """,
            (execution_id, phase, *terms, aw, aw, an, an, an, floor),
        )
        if not candidates:
            return None
        ids = [int(str(c[0])) for c in candidates]
        rows = con.rows(
            f"SELECT id, words, names FROM tasks WHERE id IN ({','.join('?' * len(ids))}) "
            "ORDER BY id",
            ids,
        )
        best: tuple[int, float] | None = None
        for task_id, words, names in rows:
            old = Features(frozenset(json.loads(str(words))), frozenset(json.loads(str(names))))
            score = similarity(new, old)
            if score >= floor and (best is None or score > best[1]):
                best = (int(str(task_id)), score)  # ties: the oldest, found first
        return best

    def task(self, task_id: int) -> TaskRecord:
        row = self.one(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,))
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
        rows = self.query(f"SELECT {_TASK_COLUMNS} FROM tasks {clause} ORDER BY id", args)
        return [_task(r) for r in rows]

    def set_task(self, task_id: int, status: TaskStatus, **fields: Any) -> None:
        allowed = {"run_id", "message", "started_at", "ended_at"}
        unknown = set(fields) - allowed
        assert not unknown, unknown
        sets = ", ".join(["status = ?", *(f"{k} = ?" for k in fields)])

        def change(con: database.Connection) -> None:
            con.write(f"UPDATE tasks SET {sets} WHERE id = ?", (status, *fields.values(), task_id))
            if status not in LIVE:  # no longer a task a new one could repeat
                con.write("DELETE FROM task_terms WHERE task = ?", (task_id,))
            _task_event(con, task_id, status, str(fields.get("message") or ""))

        self.transaction(change)


def _task_event(con: database.Connection, task_id: int, status: TaskStatus, note: str) -> None:
    """The task's change into the event stream (inside the caller's transaction)."""
    con.write(
        "INSERT INTO events (at, source, kind, run, task, status, message) "
        "SELECT ?, 'workflow', 'task', run_id, id, status, ? FROM tasks WHERE id = ?",
        (time.time(), f"task {task_id} {status}" + (f": {note}" if note else ""), task_id),
    )


def _terms(found: Features) -> list[str]:
    return sorted(found.words) + sorted(NAME_TERM + n for n in found.names)


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
