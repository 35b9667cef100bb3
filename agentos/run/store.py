"""Runs and their agents as recorded in state.db."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from agentos.errors import NotFound, OperationFailed
from agentos.state import database
from agentos.workspace.layout import Workspace


class RunStatus(StrEnum):
    """Where a run is. Stored in state.db as the value; a ``str``, so JSON and SQL take it
    as it is."""

    STARTING = "starting"  # started in the background, not in state.db yet (never stored)
    PENDING = "pending"
    RUNNING = "running"
    GATING = "gating"
    MERGING = "merging"
    # Every agent passed its gate and the work waits on its branches for review (``run
    # --no-merge``): ``runs merge`` lands it, ``runs discard`` drops it.
    READY = "ready"
    DISCARDED = "discarded"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CONFLICT = "conflict"
    BLOCKED = "blocked"
    NO_MATCH = "no_match"
    CLARIFY = "clarify"
    CANCELLED = "cancelled"
    ABORTED = "aborted"

    @property
    def active(self) -> bool:
        """The run has (or had) a live orchestrator."""
        return self in ACTIVE

    @property
    def final(self) -> bool:
        return self in FINAL


class AgentStatus(StrEnum):
    """Where one agent of a run is."""

    PENDING = "pending"
    RUNNING = "running"
    GATING = "gating"
    PASSED = "passed"
    FAILED = "failed"
    KILLED = "killed"  # stopped for good by the guardian
    CANCELLED = "cancelled"
    ABORTED = "aborted"  # its orchestrator died; gc ended it


ACTIVE: tuple[RunStatus, ...] = (
    RunStatus.PENDING,
    RunStatus.RUNNING,
    RunStatus.GATING,
    RunStatus.MERGING,
)
READY = RunStatus.READY
FINAL: tuple[RunStatus, ...] = tuple(
    s for s in RunStatus if s not in ACTIVE and s is not RunStatus.STARTING
)
# An agent in one of these has not finished its work.
UNFINISHED: tuple[AgentStatus, ...] = (
    AgentStatus.PENDING,
    AgentStatus.RUNNING,
    AgentStatus.GATING,
)


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


@dataclass(frozen=True)
class AgentRecord:
    run_id: str
    agent: str
    version: str
    card: str | None
    branch: str | None
    worktree: str | None
    session: str | None
    status: AgentStatus
    attempts: int
    exit_code: int | None
    restarts: int
    started_at: float | None
    ended_at: float | None
    gate: dict[str, Any] | None = None  # the last gate result (GateResult.as_dict())
    gated_commit: str | None = None  # the commit the last passing gate judged
    receipts: tuple[str, ...] = ()  # the agent's gate receipts, in order
    usage: dict[str, Any] | None = None  # tokens and cost it used (Usage.as_dict())

    @property
    def failing_checks(self) -> list[dict[str, Any]]:
        """The checks of the last gate that failed: name, kind, exit code, output tail."""
        if not self.gate:
            return []
        return [c for c in self.gate.get("checks", []) if not c.get("passed")]


@dataclass(frozen=True)
class RunRecord:
    id: str
    request: str
    repo: str
    target_branch: str | None
    base_commit: str | None
    status: RunStatus
    decision: str | None
    receipt: str | None
    pid: int | None
    created_at: float
    started_at: float | None
    ended_at: float | None
    message: str | None
    pid_start: str | None = None
    options: dict[str, Any] | None = None
    agents: tuple[AgentRecord, ...] = ()

    @property
    def usage(self) -> dict[str, Any] | None:
        """What its agents used together (tokens, cost), when any reported; a total is
        given only when every agent that reported gave it."""
        used = [a.usage for a in self.agents if a.usage]
        if not used:
            return None
        total: dict[str, Any] = {}
        for key in ("tokens", "cost"):
            if all(key in u for u in used):
                total[key] = sum(u[key] for u in used)
        return total

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["agents"] = [asdict(a) for a in self.agents]
        data["usage"] = self.usage
        return data


@dataclass(frozen=True)
class InterventionRecord:
    id: int
    run: str
    agent: str
    action: str  # nudge, restart, kill
    reason: str
    receipt: str | None
    at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_RUN_COLS = (
    "id, request, repo, target_branch, base_commit, status, decision, receipt, pid, "
    "created_at, started_at, ended_at, message, pid_start, options"
)
_AGENT_COLS = (
    "run_id, agent, version, card, branch, worktree, session, status, attempts, "
    "exit_code, restarts, started_at, ended_at, gate, gated_commit, receipts, usage"
)
_JSON_COLUMNS = ("gate", "receipts", "options", "usage")


class RunStore(database.Store):
    """state.db's runs for one process (see :class:`agentos.state.database.Store`)."""

    def __init__(self, ws: Workspace) -> None:
        super().__init__(ws.state_db)
        self.ws = ws

    def create(
        self, run_id: str, request: str, repo: Path, *, status: RunStatus = RunStatus.PENDING
    ) -> None:
        with self._write():
            self.con.execute(
                "INSERT INTO runs (id, request, repo, status, pid, pid_start, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    request,
                    str(repo),
                    status,
                    os.getpid(),
                    process_start(os.getpid()),
                    time.time(),
                ),
            )

    def update(self, run_id: str, **fields: Any) -> None:
        if not fields:
            return
        fields = _encode(fields)
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._write():
            self.con.execute(f"UPDATE runs SET {cols} WHERE id = ?", (*fields.values(), run_id))

    def claim(
        self,
        run_id: str,
        from_statuses: tuple[RunStatus, ...],
        status: RunStatus,
        **fields: Any,
    ) -> bool:
        """Move a run to ``status`` (with ``fields``) only if it is in one of
        ``from_statuses``, atomically; whether it moved. Two processes claiming one run:
        one wins."""
        fields = _encode({"status": status, **fields})
        cols = ", ".join(f"{k} = ?" for k in fields)
        marks = ", ".join("?" for _ in from_statuses)
        with self._write():
            self.con.execute(
                f"UPDATE runs SET {cols} WHERE id = ? AND status IN ({marks})",
                (*fields.values(), run_id, *from_statuses),
            )
            return bool(self.con.changes())

    def add_agent(self, run_id: str, agent: str, version: str, **fields: Any) -> None:
        data = _encode(
            {
                "run_id": run_id,
                "agent": agent,
                "version": version,
                "status": AgentStatus.PENDING,
                **fields,
            }
        )
        cols = ", ".join(data)
        marks = ", ".join("?" for _ in data)
        with self._write():
            self.con.execute(
                f"INSERT OR REPLACE INTO run_agents ({cols}) VALUES ({marks})", tuple(data.values())
            )

    def update_agent(self, run_id: str, agent: str, **fields: Any) -> None:
        fields = _encode(fields)
        cols = ", ".join(f"{k} = ?" for k in fields)
        with self._write():
            self.con.execute(
                f"UPDATE run_agents SET {cols} WHERE run_id = ? AND agent = ?",
                (*fields.values(), run_id, agent),
            )

    # -- what the guardian did to a run's agents ---------------------------------------------

    def record_intervention(
        self, run_id: str, agent: str, action: str, reason: str, at: float
    ) -> int:
        """Record an intervention (its receipt comes later: :meth:`link_intervention`); a
        restart also counts in the agent's ``restarts``, in the same transaction, so the
        two always agree. Returns the intervention's id."""
        with self._write():
            self.con.execute(
                "INSERT INTO interventions (run_id, agent, action, reason, at) "
                "VALUES (?, ?, ?, ?, ?)",
                (run_id, agent, action, reason, at),
            )
            row_id = self.con.last_insert_rowid()
            if action == "restart":
                self.con.execute(
                    "UPDATE run_agents SET restarts = restarts + 1 WHERE run_id = ? AND agent = ?",
                    (run_id, agent),
                )
            self.con.execute(  # the event stream says it too, in the same transaction
                "INSERT INTO events (at, source, kind, run, agent, status, message) "
                "VALUES (?, 'guardian', 'intervention', ?, ?, ?, ?)",
                (at, run_id, agent, action, f"guardian: {action} {agent}: {reason}"),
            )
        return row_id

    def link_intervention(self, intervention: int, receipt: str) -> None:
        with self._write():
            self.con.execute(
                "UPDATE interventions SET receipt = ? WHERE id = ?", (receipt, intervention)
            )

    def interventions(self, limit: int = 20) -> list[InterventionRecord]:
        """The latest interventions, newest first."""
        rows: list[tuple[Any, ...]]
        with self._read():
            rows = self.con.execute(
                "SELECT id, run_id, agent, action, reason, receipt, at "
                "FROM interventions ORDER BY id DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [InterventionRecord(*row) for row in rows]

    def intervention_counts(
        self, run_ids: Iterable[str]
    ) -> dict[tuple[str, str], dict[str, tuple[int, float]]]:
        """Per (run, agent) and action: how many interventions, and the latest one's time."""
        ids = sorted(run_ids)
        if not ids:
            return {}
        rows: list[tuple[Any, ...]]
        with self._read():
            rows = self.con.execute(
                "SELECT run_id, agent, action, COUNT(*), MAX(at) FROM interventions "
                f"WHERE run_id IN ({', '.join('?' for _ in ids)}) GROUP BY run_id, agent, action",
                ids,
            ).fetchall()
        out: dict[tuple[str, str], dict[str, tuple[int, float]]] = {}
        for run_id, agent, action, count, at in rows:
            out.setdefault((run_id, agent), {})[action] = (count, at)
        return out

    def get(self, run_id: str) -> RunRecord:
        with self._read():
            return self._get(run_id)

    def _get(self, run_id: str) -> RunRecord:
        row = self.con.execute(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            matches = [
                r[0]
                for r in self.con.execute(
                    "SELECT id FROM runs WHERE id LIKE ? ORDER BY id", (f"%{run_id}%",)
                )
            ]
            if len(matches) != 1:
                raise NotFound(f"no run {run_id!r}", field="run")
            return self._get(matches[0])
        return self._record(row)

    # -- events -----------------------------------------------------------------------------

    def record_event(
        self,
        source: str,
        kind: str,
        message: str,
        *,
        run: str | None = None,
        seq: int | None = None,
        task: int | None = None,
        agent: str | None = None,
        status: str | None = None,
        at: float | None = None,
    ) -> None:
        """One event into state.db's stream (see :mod:`agentos.run.events`)."""
        with self._write():
            self.con.execute(
                "INSERT INTO events (at, source, kind, run, seq, task, agent, status, message) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (at or time.time(), source, kind, run, seq, task, agent, status, message),
            )

    def events_after(
        self, after: int = 0, *, run: str | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """The events with an id over ``after`` (of one run, with ``run``), oldest first."""
        clause, args = ("AND run = ?", [run]) if run else ("", [])
        with self._read():
            rows = self.con.execute(
                "SELECT id, at, source, kind, run, seq, task, agent, status, message FROM events "
                f"WHERE id > ? {clause} ORDER BY id LIMIT ?",
                (after, *args, limit),
            ).fetchall()
        keys = ("id", "at", "source", "kind", "run", "seq", "task", "agent", "status", "message")
        return [{k: v for k, v in zip(keys, row, strict=True) if v is not None} for row in rows]

    def last_event_id(self) -> int:
        with self._read():
            row = self.con.execute("SELECT COALESCE(MAX(id), 0) FROM events").fetchone()
        return int(str(row[0])) if row else 0

    def list(
        self, *, statuses: tuple[RunStatus, ...] | None = None, limit: int = 50
    ) -> list[RunRecord]:
        sql = f"SELECT {_RUN_COLS} FROM runs"
        args: tuple[Any, ...] = ()
        if statuses:
            sql += f" WHERE status IN ({', '.join('?' for _ in statuses)})"
            args = statuses
        sql += " ORDER BY created_at DESC LIMIT ?"
        with self._read():
            return [self._record(row) for row in self.con.execute(sql, (*args, limit)).fetchall()]

    def _record(self, row: tuple[Any, ...]) -> RunRecord:
        agents = tuple(
            AgentRecord(**self._status(_decode(_AGENT_COLS, a), AgentStatus))
            for a in self.con.execute(
                f"SELECT {_AGENT_COLS} FROM run_agents WHERE run_id = ? ORDER BY agent", (row[0],)
            )
        )
        return RunRecord(**self._status(_decode(_RUN_COLS, row), RunStatus), agents=agents)

    def _status(self, data: dict[str, Any], kind: type[StrEnum]) -> dict[str, Any]:
        try:
            data["status"] = kind(data["status"])
        except ValueError:
            raise OperationFailed(
                f"run {data.get('run_id') or data.get('id')} has an unknown status "
                f"{data['status']!r}: state.db was changed by hand or by a newer AgentOS",
                file=self.ws.state_db,
                field="status",
            ) from None
        return data


def _encode(fields: dict[str, Any]) -> dict[str, Any]:
    """Values of the JSON columns as JSON text."""
    return {
        k: json.dumps(v) if k in _JSON_COLUMNS and v is not None else v for k, v in fields.items()
    }


def _decode(cols: str, row: tuple[Any, ...]) -> dict[str, Any]:
    data = dict(zip(cols.split(", "), row, strict=True))
    for key in _JSON_COLUMNS:
        if key in data:
            value = json.loads(data[key]) if data[key] else None
            data[key] = tuple(value or ()) if key == "receipts" else value
    return data


def pid_running(pid: int | None) -> bool:
    """Whether ``pid`` is a running process (a zombie is not)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:  # reaped since kill(0), or no /proc (macOS): trust kill(0)
        return not Path("/proc/self/stat").exists()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from /proc), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def pid_alive(pid: int | None, started: str | None = None) -> bool:
    """Whether ``pid`` is still the process that recorded it: running, and (where /proc
    tells) started at ``started``, so that a reused pid does not count."""
    if not pid_running(pid):
        return False
    if started is None or pid is None:
        return True
    now = process_start(pid)
    return now is None or now == started
