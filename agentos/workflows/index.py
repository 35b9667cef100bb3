"""Deduplication's index in the state (SQLite migrations 005 and 008), over the store's
connection (SQLite or PostgreSQL).

A live task (pending, queued, running, done) has one ``task_terms`` row per term (its
words, and its names prefixed with ``=``), indexed by (execution, phase, term), and each
term's count of live tasks per execution and phase in ``task_term_counts`` (the term ``''``
counts the tasks): the document frequencies a term is weighed by, kept up to date in the
transaction that adds a task or ends it. A task an Ollama model embedded has its vector in
``task_embeddings``.

A new task is compared with the live tasks of its execution and phase without reading them
all: see :meth:`TaskIndex.matches`. Its callers (:class:`agentos.workflows.store.WorkflowStore`)
hold the connection's lock, and a transaction to change it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentos.state.connection import Connection
from agentos.workflows.embeddings import Embedding, cosine, pack, unpack
from agentos.workflows.similarity import (
    DEFAULT_THRESHOLD,
    RELATED_THRESHOLD,
    Features,
    Frequencies,
    Scorer,
    background,
)

_BATCH = 64  # tasks scored exactly at a time, best bound first
EMBEDDING_RELATED_BELOW = 0.1  # embeddings: related from this far under the threshold


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


class TaskIndex:
    """The deduplication index over one connection to the state (SQLite or PostgreSQL)."""

    def __init__(self, con: Connection) -> None:
        self.con = con

    def add(
        self,
        task_id: int,
        execution_id: str,
        phase: int,
        found: Features,
        embedding: Embedding | None,
    ) -> None:
        """A live task into the index: its terms, one
        more task for each term's count and for the scope's, its vector if it has one."""
        terms = sorted(found.terms())
        self.con.write_many(
            "INSERT INTO task_terms (task, execution, phase, term, nwords, nnames) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [(task_id, execution_id, phase, t, len(found.words), len(found.names)) for t in terms],
        )
        self.con.write_many(
            "INSERT INTO task_term_counts (execution, phase, term, tasks) VALUES (?, ?, ?, 1) "
            "ON CONFLICT (execution, phase, term) DO UPDATE SET tasks = task_term_counts.tasks + 1",
            [(execution_id, phase, t) for t in ["", *terms]],
        )
        if embedding is not None:
            self.con.write(
                "INSERT INTO task_embeddings (task, execution, phase, model, vector) "
                "VALUES (?, ?, ?, ?, ?)",
                (task_id, execution_id, phase, embedding.model, pack(embedding.vector)),
            )

    def remove(self, task_id: int) -> None:
        """A task that is no longer live out of the index."""
        rows = self.con.rows(
            "SELECT execution, phase, term FROM task_terms WHERE task = ?", (task_id,)
        )
        if rows:
            execution_id, phase = rows[0][0], rows[0][1]
            self.con.write_many(
                "UPDATE task_term_counts SET tasks = tasks - 1 "
                "WHERE execution = ? AND phase = ? AND term = ?",
                [(execution_id, phase, t) for t in ["", *(str(r[2]) for r in rows)]],
            )
            self.con.write(
                "DELETE FROM task_term_counts WHERE execution = ? AND phase = ? AND tasks <= 0",
                (execution_id, phase),
            )
        self.con.write("DELETE FROM task_terms WHERE task = ?", (task_id,))
        self.con.write("DELETE FROM task_embeddings WHERE task = ?", (task_id,))

    def frequencies(
        self, scope: tuple[str, int], terms: Iterable[str], new: Features
    ) -> Frequencies:
        """The frequencies a comparison in ``scope`` weighs ``terms`` with: the background's,
        the scope's live tasks' (the index's counts) and ``new``'s own."""
        wanted = sorted({"", *terms})
        counts = {t: 0 for t in wanted}
        for chunk in _chunks(wanted):
            for term, tasks in self.con.rows(
                f"SELECT term, tasks FROM task_term_counts WHERE execution = ? AND phase = ? "
                f"AND term IN ({','.join('?' * len(chunk))})",
                (*scope, *chunk),
            ):
                counts[str(term)] = int(str(tasks))
        live = counts.pop("")
        return background().plus_counts(live, counts).plus(new)

    def matches(
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
        freq = self.frequencies(scope, terms, new)
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
                for r in self.con.rows(
                    f"SELECT task FROM task_terms WHERE execution = ? AND phase = ? "
                    f"AND term IN ({','.join('?' * len(chunk))})",
                    (*scope, *chunk),
                )
            )
        if not candidates:
            return []
        shared: dict[int, float] = {}
        for chunk in _chunks(terms):
            for task, term in self.con.rows(
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
                freq = self.frequencies(scope, every | known, new)
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
            for task, words, names in self.con.rows(
                f"SELECT id, words, names FROM tasks WHERE id IN ({','.join('?' * len(chunk))}) "
                "ORDER BY id",
                chunk,
            ):
                out[int(str(task))] = Features(
                    frozenset(json.loads(str(words))), frozenset(json.loads(str(names)))
                )
        return out

    def embedding_matches(
        self, scope: tuple[str, int], new: Features, embedding: Embedding, limit: int
    ) -> list[Match]:
        """The live tasks of ``scope`` whose vectors (from the same model) are nearest
        ``embedding``: cosine times the substitution factor of the names (a vector finds
        "HTTP 429" and "HTTP 503", or parse_date and format_date, alike; the names do
        not). Not of the words: most paraphrases have a word of their own on each side."""
        method = Method.embeddings(embedding.threshold)
        rows = self.con.rows(
            "SELECT task, vector FROM task_embeddings WHERE execution = ? AND phase = ? "
            "AND model = ?",
            (*scope, embedding.model),
        )
        near = [
            (cosine(embedding.vector, unpack(vector)), int(str(task)))
            for task, vector in rows
            if isinstance(vector, bytes)
        ]
        near = sorted((c, t) for c, t in near if c >= method.related)[::-1][: 4 * limit + 4]
        if not near:
            return []
        olds = self._features([t for _, t in near])
        freq = self.frequencies(
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

    def counts(self, execution_id: str, phase: int) -> dict[str, int]:
        """How many live tasks of the execution and phase hold each term (``""``: how many
        live tasks there are): the document frequencies terms are weighed by."""
        return {
            str(term): int(str(n))
            for term, n in self.con.rows(
                "SELECT term, tasks FROM task_term_counts WHERE execution = ? AND phase = ? "
                "ORDER BY term",
                (execution_id, phase),
            )
        }

    def scopes(self, execution_id: str | None, phase: int | None) -> list[tuple[str, int]]:
        """The executions and phases that have live tasks (of those given)."""
        clauses, args = ["term = ''", "tasks > 0"], list[str | int]()
        if execution_id is not None:
            clauses.append("execution = ?")
            args.append(execution_id)
        if phase is not None:
            clauses.append("phase = ?")
            args.append(phase)
        rows = self.con.rows(
            f"SELECT execution, phase FROM task_term_counts WHERE {' AND '.join(clauses)} "
            "ORDER BY execution, phase",
            args,
        )
        return [(str(e), int(str(p))) for e, p in rows]

    def plain_matches(self, scope: tuple[str, int], new: Features) -> list[Match]:
        """The scores :meth:`matches` gives, by reading every live task of ``scope`` and
        scoring each: what ``benchmarks/workflow_bench.py`` measures the index against."""
        tasks = [
            int(str(r[0]))
            for r in self.con.rows(
                "SELECT DISTINCT task FROM task_terms WHERE execution = ? AND phase = ?", scope
            )
        ]
        every = self.counts(*scope)
        live = every.pop("", 0)
        every.update({t: every.get(t, 0) for t in new.terms()})
        score = Scorer(background().plus_counts(live, every).plus(new))
        method = Method.words(DEFAULT_THRESHOLD, RELATED_THRESHOLD)
        found = [
            Match(task, scope[0], scope[1], score(new, old), method)
            for task, old in self._features(tasks).items()
        ]
        found = [m for m in found if m.score >= method.related]
        found.sort(key=lambda m: (-m.score, m.task))
        return found


def _chunks(items: list[Any] | list[str] | list[int], size: int = 400) -> list[list[Any]]:
    """``items`` in slices small enough for one statement's parameters."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)] or []
