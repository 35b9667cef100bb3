"""A run's events: what the orchestrator did, in order, as it happened.

The orchestrator appends one JSON object per line to the run's ``events.jsonl``
(:attr:`agentos.workspace.files.RunFiles.events`), kept after the run. Whoever wants to follow a
run (the CLI, the MCP server's progress notifications, a dashboard) reads that file from an
offset with :func:`read_events`; nothing else is shared with the orchestrator's process.

Each event also goes into state.db's ``events`` table, the one stream every watcher reads
(``agentos events``, a dashboard), with the events of the guardian, evals, evolutions,
synthesis and workflows.

Three kinds: ``phase`` (the run's status changed: ``status`` is the new
:class:`~agentos.run.store.RunStatus`), ``agent`` (an agent's status changed: ``agent`` and
``status``, an :class:`~agentos.run.store.AgentStatus`), and ``note`` (anything else worth
saying, about the run or, with ``agent``, one agent). Messages never hold the request or
secrets: the same text goes to the orchestrator's log.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

MAX_LINE = 64 * 1024  # a longer line is cut: one event never holds a whole log


class EventKind(StrEnum):
    PHASE = "phase"
    AGENT = "agent"
    NOTE = "note"


@dataclass(frozen=True)
class RunEvent:
    run: str
    seq: int  # 1, 2, ... in the order written
    at: float
    kind: EventKind
    message: str
    status: str | None = None
    agent: str | None = None

    def __str__(self) -> str:
        return self.message

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


Listener = Callable[[RunEvent], None]


class EventLog:
    """Appends one run's events to its file and hands each to ``listener``; safe to share
    between the threads of a run (one per agent)."""

    def __init__(
        self,
        run_id: str,
        path: Path | None,
        listener: Listener | None = None,
        sink: Listener | None = None,
    ) -> None:
        self.run_id = run_id
        self.path = path
        self.listener = listener
        self.sink = sink  # state.db's event stream (the orchestrator hands it in)
        self._lock = threading.Lock()
        self._seq = 0

    def emit(
        self,
        kind: EventKind,
        message: str,
        *,
        status: str | None = None,
        agent: str | None = None,
    ) -> RunEvent:
        with self._lock:
            self._seq += 1
            event = RunEvent(
                self.run_id, self._seq, time.time(), kind, message[:MAX_LINE], status, agent
            )
            if self.path is not None:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    with self.path.open("a", encoding="utf-8") as fh:
                        fh.write(json.dumps(event.as_dict()) + "\n")
                except OSError:
                    self.path = None  # a run is not stopped by a log it cannot write
            if self.sink is not None:
                try:
                    self.sink(event)
                except Exception:  # nor by a stream it cannot write (a locked state.db)
                    self.sink = None
        if self.listener is not None:
            self.listener(event)
        return event

    def note(self, message: str, *, agent: str | None = None) -> RunEvent:
        return self.emit(EventKind.NOTE, message, agent=agent)


def read_events(path: Path, offset: int = 0) -> tuple[list[RunEvent], int]:
    """The complete events written at or after byte ``offset``, and the offset to read from
    next time (a line still being written is left for then). A missing file has none; a
    line that is not an event (the file was damaged) is skipped."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except (FileNotFoundError, NotADirectoryError):
        return [], offset
    end = data.rfind(b"\n") + 1
    events = []
    for line in data[:end].splitlines():
        try:
            raw = json.loads(line)
            events.append(
                RunEvent(
                    run=str(raw["run"]),
                    seq=int(raw["seq"]),
                    at=float(raw["at"]),
                    kind=EventKind(raw["kind"]),
                    message=str(raw["message"]),
                    status=raw.get("status"),
                    agent=raw.get("agent"),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return events, offset + end


def record(ws: Any, source: str, kind: str, message: str, **fields: Any) -> None:
    """One event into state.db's stream from outside a run (an eval, an evolution, a
    synthesis): ``fields`` are ``run``, ``task``, ``agent``, ``status``. The stream is for
    watchers: a write that fails never stops what is being recorded."""
    from agentos.errors import AgentOSError
    from agentos.run.store import RunStore

    try:
        store = RunStore(ws)
    except AgentOSError:
        return
    try:
        store.record_event(source, kind, message[:MAX_LINE], **fields)
    except AgentOSError:
        pass
    finally:
        store.close()


def event_line(event: dict[str, Any], *, stamp: bool = True, where: bool = True) -> str:
    """One event of the stream (:meth:`agentos.run.store.RunStore.events_after`, or
    :meth:`RunEvent.as_dict`) as a line for people: its time, what it is about (a run, a
    task or its source), its kind, and its message (which names the agent, if any).
    ``agentos run`` prints its own run's events with neither time nor place; ``agentos
    events`` and the terminal UI with both."""
    parts = []
    if stamp:
        parts.append(time.strftime("%H:%M:%S", time.localtime(float(event["at"]))))
    if where:
        task = event.get("task")
        parts.append(
            event.get("run") or (f"task {task}" if task is not None else event.get("source", ""))
        )
        parts.append(f"{event['kind']}:")
    else:
        parts.append("•")
    return " ".join([*parts, str(event["message"])])
