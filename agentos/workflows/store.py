"""Workflow executions and their tasks in ``state.db`` (migration ``005_workflows``).

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
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from agentos.errors import BadInput, NotFound
from agentos.state import database
from agentos.workflows.embeddings import Embedding, cosine, pack, unpack
from agentos.workflows.similarity import (
    DEFAULT_THRESHOLD,
    RELATED_THRESHOLD,
    Features,
    Frequencies,
    Scorer,
    background,
    features,
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


_BATCH = 64  # tasks scored exactly at a time, best bound first

# The tasks a new one may repeat: those that will run, run, or ran well.
LIVE = (TaskStatus.PENDING, TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.DONE)


@dataclass(frozen=True)
class Method:
    """How a score was found, and the thresholds it is judged by."""

    name: str  # "words" or "embeddings"
    threshold: float  # at or over it: a duplicate
    related: float  # at or over it: related

    @classmethod
    def words(cls, threshold: float, related: float) -> Method:
        return cls("words", threshold, min(related, threshold))

    @classmethod
    def embeddings(cls, threshold: float) -> Method:
        return cls("embeddings", threshold, max(0.0, threshold - EMBEDDING_RELATED_BELOW))


EMBEDDING_RELATED_BELOW = 0.1  # embeddings: related from this far under the threshold


@dataclass(frozen=True)
class Match:
    """A live task and how alike it is to the one compared."""

    task: int
    execution: str
    phase: int
    score: float
    method: Method

    @property
    def duplicate(self) -> bool:
        return self.score >= self.method.threshold

    @property
    def margin(self) -> float:
        """How far over (or under) its method's threshold: comparable across methods."""
        return self.score - self.method.threshold

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "execution": self.execution,
            "phase": self.phase,
            "score": round(self.score, 4),
            "method": self.method.name,
            "threshold": self.method.threshold,
            "duplicate": self.duplicate,
        }


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
                matches = self._matches(scope, found, method, 1, floor=threshold)
                if embedding is not None:
                    matches += self._embedding_matches(scope, found, embedding, 1)
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
                self._index(task_id, execution_id, phase, found, embedding)
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

    # -- the index: terms, their document frequencies, vectors ------------------------------

    def _index(
        self,
        task_id: int,
        execution_id: str,
        phase: int,
        found: Features,
        embedding: Embedding | None,
    ) -> None:
        """A live task into the index (inside the caller's transaction): its terms, one
        more task for each term's count and for the scope's, its vector if it has one."""
        terms = sorted(found.terms())
        self.con.executemany(
            "INSERT INTO task_terms (task, execution, phase, term, nwords, nnames) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(task_id, execution_id, phase, t, len(found.words), len(found.names)) for t in terms],
        )
        self.con.executemany(
            "INSERT INTO task_term_counts (execution, phase, term, tasks) VALUES (?, ?, ?, 1) "
            "ON CONFLICT (execution, phase, term) DO UPDATE SET tasks = tasks + 1",
            [(execution_id, phase, t) for t in ["", *terms]],
        )
        if embedding is not None:
            self.con.execute(
                "INSERT INTO task_embeddings (task, execution, phase, model, vector) "
                "VALUES (?, ?, ?, ?, ?)",
                (task_id, execution_id, phase, embedding.model, pack(embedding.vector)),
            )

    def _unindex(self, task_id: int) -> None:
        """A task that is no longer live out of the index (inside the caller's transaction)."""
        rows = self.con.execute(
            "SELECT execution, phase, term FROM task_terms WHERE task = ?", (task_id,)
        ).fetchall()
        if rows:
            execution_id, phase = rows[0][0], rows[0][1]
            self.con.executemany(
                "UPDATE task_term_counts SET tasks = tasks - 1 "
                "WHERE execution = ? AND phase = ? AND term = ?",
                [(execution_id, phase, t) for t in ["", *(str(r[2]) for r in rows)]],
            )
            self.con.execute(
                "DELETE FROM task_term_counts WHERE execution = ? AND phase = ? AND tasks <= 0",
                (execution_id, phase),
            )
        self.con.execute("DELETE FROM task_terms WHERE task = ?", (task_id,))
        self.con.execute("DELETE FROM task_embeddings WHERE task = ?", (task_id,))

    def _frequencies(
        self, scope: tuple[str, int], terms: Iterable[str], new: Features
    ) -> Frequencies:
        """The frequencies a comparison in ``scope`` weighs ``terms`` with: the background's,
        the scope's live tasks' (the index's counts) and ``new``'s own."""
        wanted = sorted({"", *terms})
        counts = {t: 0 for t in wanted}
        for chunk in _chunks(wanted):
            for term, tasks in self.con.execute(
                f"SELECT term, tasks FROM task_term_counts WHERE execution = ? AND phase = ? "
                f"AND term IN ({','.join('?' * len(chunk))})",
                (*scope, *chunk),
            ):
                counts[str(term)] = int(str(tasks))
        live = counts.pop("")
        return background().plus_counts(live, counts).plus(new)

    def _matches(
        self, scope: tuple[str, int], new: Features, method: Method, limit: int, floor: float
    ) -> list[Match]:
        """The ``limit`` live tasks of ``scope`` most alike ``new`` by their words among
        those that could score ``floor``, those scoring at least ``method.related``.

        A task's score is at most 2X / (W + X), X the weight of the terms it shares with
        ``new`` and W the weight of ``new``'s: a task must share at least X_min to reach
        ``floor``. A task sharing none of the heaviest terms of ``new`` (those whose
        lighter rest weighs less than X_min) cannot, so only the tasks holding one of
        those heaviest, rarest terms are read from the index; their shared weight is then
        summed, and the ones that can still reach the floor scored exactly, best bound
        first. Every task that can reach ``floor`` is found; one under it only when it is
        among those read (a new task's related one: the most alike of those)."""
        terms = sorted(new.terms())
        if not terms:
            return []
        freq = self._frequencies(scope, terms, new)
        weights = {t: freq.weight(t) for t in terms}
        least = floor * sum(weights.values()) / (2 - floor)  # X_min
        heaviest, rest = [], sum(weights.values())
        for term in sorted(terms, key=lambda t: (-weights[t], t)):
            if rest < least:
                break
            heaviest.append(term)
            rest -= weights[term]
        candidates: set[int] = set()
        for chunk in _chunks(heaviest):
            candidates.update(
                int(str(r[0]))
                for r in self.con.execute(
                    f"SELECT task FROM task_terms WHERE execution = ? AND phase = ? "
                    f"AND term IN ({','.join('?' * len(chunk))})",
                    (*scope, *chunk),
                )
            )
        if not candidates:
            return []
        shared: dict[int, float] = {}
        for chunk in _chunks(terms):
            for task, term in self.con.execute(
                f"SELECT task, term FROM task_terms WHERE execution = ? AND phase = ? "
                f"AND term IN ({','.join('?' * len(chunk))}) "
                f"AND task IN ({','.join('?' * len(candidates))})",
                (*scope, *chunk, *sorted(candidates)),
            ):
                key = int(str(task))
                shared[key] = shared.get(key, 0.0) + weights[str(term)]
        total = sum(weights.values())
        # Best bound first: once ``limit`` tasks scored at least the next one's bound, the
        # rest cannot do better.
        hopeful = sorted(
            ((2 * x / (total + x), t) for t, x in shared.items() if x >= least - 1e-9),
            key=lambda bound_task: (-bound_task[0], bound_task[1]),
        )
        return self._score(scope, new, hopeful, method, limit, freq)

    def _score(
        self,
        scope: tuple[str, int],
        new: Features,
        hopeful: list[tuple[float, int]],
        method: Method,
        limit: int,
        freq: Frequencies | None = None,
    ) -> list[Match]:
        """The tasks of ``hopeful`` (their score's upper bound, the task; best bound first)
        scored exactly against ``new``, in batches, until ``limit`` of them score at least
        the next bound; the best ``limit`` at or over the floor."""
        found: list[Match] = []
        for start in range(0, len(hopeful), _BATCH):
            batch = hopeful[start : start + _BATCH]
            if len(found) >= limit and found[limit - 1].score >= batch[0][0]:
                break
            olds = self._features([t for _, t in batch])
            every = frozenset().union(*(f.terms() for f in olds.values()), new.terms())
            if freq is None or not every <= freq.counts.keys():
                known = freq.counts.keys() if freq is not None else frozenset()
                freq = self._frequencies(scope, every | known, new)
            score = Scorer(freq)
            found += [
                Match(task, scope[0], scope[1], score(new, old), method)
                for task, old in olds.items()
            ]
            found = [m for m in found if m.score >= method.related]
            found.sort(key=lambda m: (-m.score, m.task))  # ties: the oldest
        return found[:limit]

    def _features(self, tasks: list[int]) -> dict[int, Features]:
        out = {}
        for chunk in _chunks(tasks):
            for task, words, names in self.con.execute(
                f"SELECT id, words, names FROM tasks WHERE id IN ({','.join('?' * len(chunk))}) "
                "ORDER BY id",
                chunk,
            ):
                out[int(str(task))] = Features(
                    frozenset(json.loads(str(words))), frozenset(json.loads(str(names)))
                )
        return out

    def _embedding_matches(
        self, scope: tuple[str, int], new: Features, embedding: Embedding, limit: int
    ) -> list[Match]:
        """The live tasks of ``scope`` whose vectors (from the same model) are nearest
        ``embedding``: cosine times the substitution factor of the names (a vector finds
        "HTTP 429" and "HTTP 503", or parse_date and format_date, alike; the names do
        not). Not of the words: most paraphrases have a word of their own on each side."""
        method = Method.embeddings(embedding.threshold)
        rows = self.con.execute(
            "SELECT task, vector FROM task_embeddings WHERE execution = ? AND phase = ? "
            "AND model = ?",
            (*scope, embedding.model),
        ).fetchall()
        near = [
            (cosine(embedding.vector, unpack(vector)), int(str(task)))
            for task, vector in rows
            if isinstance(vector, bytes)
        ]
        near = sorted((c, t) for c, t in near if c >= method.related)[::-1][: 4 * limit + 4]
        if not near:
            return []
        olds = self._features([t for _, t in near])
        freq = self._frequencies(
            scope, frozenset().union(new.terms(), *(f.terms() for f in olds.values())), new
        )
        found = []
        for score, task in near:
            old = olds[task]
            factor = Scorer(freq).substitution(
                old.terms() - new.terms(), new.terms() - old.terms(), names_only=True
            )
            if score * factor >= method.related:
                found.append(Match(task, scope[0], scope[1], score * factor, method))
        found.sort(key=lambda m: (-m.score, m.task))
        return found[:limit]

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
        clauses, args = ["term = ''", "tasks > 0"], list[str | int]()
        if execution_id is not None:
            clauses.append("execution = ?")
            args.append(execution_id)
        if phase is not None:
            clauses.append("phase = ?")
            args.append(phase)
        found: list[Match] = []
        with self._read():
            scopes = self.con.execute(
                f"SELECT execution, phase FROM task_term_counts WHERE {' AND '.join(clauses)} "
                "ORDER BY execution, phase",
                args,
            ).fetchall()
            for execution, phase_id in scopes:
                scope = (str(execution), int(str(phase_id)))
                method = Method.words(DEFAULT_THRESHOLD, floor)
                found += self._matches(scope, new, method, limit, floor=floor)
                if embedding is not None:
                    found += self._embedding_matches(scope, new, embedding, limit)
        found.sort(key=lambda m: (-m.margin, m.task))
        best: dict[int, Match] = {}
        for match in found:  # a task found by both methods: its better margin
            best.setdefault(match.task, match)
        return list(best.values())[:limit]

    def term_counts(self, execution_id: str, phase: int) -> dict[str, int]:
        """How many live tasks of the execution and phase hold each term (``""``: how many
        live tasks there are): the document frequencies deduplication weighs terms by."""
        with self._read():
            return {
                str(term): int(str(n))
                for term, n in self.con.execute(
                    "SELECT term, tasks FROM task_term_counts WHERE execution = ? AND phase = ? "
                    "ORDER BY term",
                    (execution_id, phase),
                )
            }

    def plain_matches(self, execution_id: str, phase: int, text: str) -> list[Match]:
        """The same scores as the index gives, by reading every live task of the scope and
        scoring each: what ``benchmarks/workflow_bench.py`` measures the index against."""
        new = features(text)
        scope = (execution_id, phase)
        with self._read():
            tasks = [
                int(str(r[0]))
                for r in self.con.execute(
                    "SELECT DISTINCT task FROM task_terms WHERE execution = ? AND phase = ?",
                    scope,
                )
            ]
            every = self.term_counts(execution_id, phase)
            live = every.pop("", 0)
            every.update({t: every.get(t, 0) for t in new.terms()})
            freq = background().plus_counts(live, every).plus(new)
            method = Method.words(DEFAULT_THRESHOLD, RELATED_THRESHOLD)
            score = Scorer(freq)
            found = [
                Match(task, execution_id, phase, score(new, old), method)
                for task, old in self._features(tasks).items()
            ]
        found = [m for m in found if m.score >= method.related]
        found.sort(key=lambda m: (-m.score, m.task))
        return found

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
                self._unindex(task_id)
            self._task_event(task_id, status, str(fields.get("message") or ""))


def _chunks(items: list[Any] | list[str] | list[int], size: int = 400) -> list[list[Any]]:
    """``items`` in slices small enough for one statement's parameters."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)] or []


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
