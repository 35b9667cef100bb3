"""Runs and their agents as recorded in the state (state.db, or PostgreSQL), with the
host that runs each, the hosts' heartbeats, and the event stream."""

from __future__ import annotations

import builtins
import json
import os
import secrets
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from agentos.errors import BadInput, NotFound, OperationFailed
from agentos.state import database
from agentos.state.host import host_id
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
    host: str | None = None  # the machine it runs on

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
    host: str | None = None  # the machine that runs it (None: recorded before hosts were)
    cancel_requested: str | None = None  # the host that asked it to cancel
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
    "created_at, started_at, ended_at, message, pid_start, options, host, cancel_requested"
)
_AGENT_COLS = (
    "run_id, agent, version, card, branch, worktree, session, status, attempts, "
    "exit_code, restarts, started_at, ended_at, gate, gated_commit, receipts, usage, host"
)
_JSON_COLUMNS = ("gate", "receipts", "options", "usage")
_EVENT_COLS = ("id", "at", "source", "kind", "run", "seq", "task", "agent", "status", "message")


class RunStore(database.Store):
    """The state's runs for one process (see :class:`agentos.state.database.Store`), in
    state.db or on PostgreSQL (:attr:`Workspace.state`)."""

    def __init__(self, ws: Workspace) -> None:
        super().__init__(ws.state)
        self.ws = ws
        self.host = host_id()

    @property
    def shared(self) -> bool:
        """Whether other machines share this state (then a record's pids are its host's)."""
        return self.location.shared

    def local(self, record: RunRecord) -> bool:
        """Whether ``record``'s processes, sessions and files are on this machine: every run
        of an unshared state, and the runs this host runs (or, recorded before hosts were,
        none)."""
        return not self.shared or record.host in (None, self.host)

    def create(
        self, run_id: str, request: str, repo: Path, *, status: RunStatus = RunStatus.PENDING
    ) -> None:
        self.write(
            "INSERT INTO runs (id, request, repo, status, pid, pid_start, created_at, host) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                request,
                str(repo),
                status,
                os.getpid(),
                process_start(os.getpid()),
                time.time(),
                self.host,
            ),
        )

    def update(self, run_id: str, **fields: Any) -> None:
        if not fields:
            return
        fields = _encode(fields)
        cols = ", ".join(f"{k} = ?" for k in fields)
        self.write(f"UPDATE runs SET {cols} WHERE id = ?", (*fields.values(), run_id))

    def claim(
        self,
        run_id: str,
        from_statuses: tuple[RunStatus, ...],
        status: RunStatus,
        **fields: Any,
    ) -> bool:
        """Move a run to ``status`` (with ``fields``) only if it is in one of
        ``from_statuses``, atomically; whether it moved. Two processes claiming one run:
        one wins. A claim that records a pid records this host with it."""
        if "pid" in fields:
            fields["host"] = self.host
        fields = _encode({"status": status, **fields})
        cols = ", ".join(f"{k} = ?" for k in fields)
        marks = ", ".join("?" for _ in from_statuses)
        return bool(
            self.write(
                f"UPDATE runs SET {cols} WHERE id = ? AND status IN ({marks})",
                (*fields.values(), run_id, *from_statuses),
            )
        )

    def add_agent(self, run_id: str, agent: str, version: str, **fields: Any) -> None:
        """Record an agent of a run (on this host), or record it afresh: what ``fields``
        does not give takes its default."""
        data = _encode(
            {
                "run_id": run_id,
                "agent": agent,
                "version": version,
                "status": AgentStatus.PENDING,
                "host": self.host,
                **fields,
            }
        )
        keep = ("run_id", "agent")
        defaults = {"attempts": "0", "restarts": "0"}
        updates = ", ".join(
            f"{c} = excluded.{c}" if c in data else f"{c} = {defaults.get(c, 'NULL')}"
            for c in _AGENT_COLS.split(", ")
            if c not in keep
        )
        cols = ", ".join(data)
        marks = ", ".join("?" for _ in data)
        self.write(
            f"INSERT INTO run_agents ({cols}) VALUES ({marks}) "
            f"ON CONFLICT (run_id, agent) DO UPDATE SET {updates}",
            tuple(data.values()),
        )

    def update_agent(self, run_id: str, agent: str, **fields: Any) -> None:
        fields = _encode(fields)
        cols = ", ".join(f"{k} = ?" for k in fields)
        self.write(
            f"UPDATE run_agents SET {cols} WHERE run_id = ? AND agent = ?",
            (*fields.values(), run_id, agent),
        )

    # -- hosts: who is alive, and who was asked to cancel -------------------------------------

    def heartbeat(self, at: float | None = None) -> None:
        """Say that this host is alive (its runs' orchestrators do, while they run)."""
        self.write(
            "INSERT INTO hosts (id, heartbeat_at) VALUES (?, ?) "
            "ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at",
            (self.host, time.time() if at is None else at),
        )

    def heartbeats(self) -> dict[str, float]:
        """Every host's last heartbeat (seconds since the epoch)."""
        return {str(h): float(at) for h, at in self.query("SELECT id, heartbeat_at FROM hosts")}

    def request_cancel(self, run_id: str) -> bool:
        """Ask the host that runs ``run_id`` to cancel it (its orchestrator is woken, on
        PostgreSQL, by a notification); whether the run was live to ask."""

        def ask(con: database.Connection) -> bool:
            asked = con.write(
                "UPDATE runs SET cancel_requested = ? WHERE id = ? AND status IN "
                f"({', '.join('?' for _ in ACTIVE)})",
                (self.host, run_id, *ACTIVE),
            )
            if asked and con.dialect == "postgresql":
                con.rows("SELECT pg_notify(?, ?)", (database.CANCELS, run_id))
            return bool(asked)

        return self.transaction(ask)

    def cancel_requested(self, run_id: str) -> str | None:
        """The host that asked ``run_id`` to cancel, if one did."""
        row = self.one("SELECT cancel_requested FROM runs WHERE id = ?", (run_id,))
        return None if row is None or row[0] is None else str(row[0])

    # -- what the guardian did to a run's agents ---------------------------------------------

    def record_intervention(
        self, run_id: str, agent: str, action: str, reason: str, at: float
    ) -> int:
        """Record an intervention (its receipt comes later: :meth:`link_intervention`); a
        restart also counts in the agent's ``restarts``, in the same transaction, so the
        two always agree. Returns the intervention's id."""

        def record(con: database.Connection) -> int:
            row_id = int(
                con.rows(
                    "INSERT INTO interventions (run_id, agent, action, reason, at) "
                    "VALUES (?, ?, ?, ?, ?) RETURNING id",
                    (run_id, agent, action, reason, at),
                )[0][0]
            )
            if action == "restart":
                con.write(
                    "UPDATE run_agents SET restarts = restarts + 1 WHERE run_id = ? AND agent = ?",
                    (run_id, agent),
                )
            con.write(  # the event stream says it too, in the same transaction
                "INSERT INTO events (at, source, kind, run, agent, status, message) "
                "VALUES (?, 'guardian', 'intervention', ?, ?, ?, ?)",
                (at, run_id, agent, action, f"guardian: {action} {agent}: {reason}"),
            )
            return row_id

        return self.transaction(record)

    def link_intervention(self, intervention: int, receipt: str) -> None:
        self.write("UPDATE interventions SET receipt = ? WHERE id = ?", (receipt, intervention))

    def interventions(self, limit: int = 20, *, run: str | None = None) -> list[InterventionRecord]:
        """The latest interventions (of one run, with ``run``), newest first."""
        clause, args = ("WHERE run_id = ? ", [run]) if run else ("", [])
        rows = self.query(
            "SELECT id, run_id, agent, action, reason, receipt, at "
            f"FROM interventions {clause}ORDER BY id DESC LIMIT ?",
            (*args, limit),
        )
        return [InterventionRecord(*row) for row in rows]

    def intervention_counts(
        self, run_ids: Iterable[str]
    ) -> dict[tuple[str, str], dict[str, tuple[int, float]]]:
        """Per (run, agent) and action: how many interventions, and the latest one's time."""
        ids = sorted(run_ids)
        if not ids:
            return {}
        rows = self.query(
            "SELECT run_id, agent, action, COUNT(*), MAX(at) FROM interventions "
            f"WHERE run_id IN ({', '.join('?' for _ in ids)}) GROUP BY run_id, agent, action",
            ids,
        )
        out: dict[tuple[str, str], dict[str, tuple[int, float]]] = {}
        for run_id, agent, action, count, at in rows:
            out.setdefault((run_id, agent), {})[action] = (int(count), float(at))
        return out

    def get(self, run_id: str) -> RunRecord:
        row = self.one(f"SELECT {_RUN_COLS} FROM runs WHERE id = ?", (run_id,))
        if row is None:
            matches = [
                r[0]
                for r in self.query(
                    "SELECT id FROM runs WHERE id LIKE ? ORDER BY id", (f"%{run_id}%",)
                )
            ]
            if len(matches) != 1:
                raise NotFound(f"no run {run_id!r}", field="run")
            return self.get(matches[0])
        return self._records([row])[0]

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
        """One event into the state's stream (see :mod:`agentos.run.events`)."""
        self.write(
            "INSERT INTO events (at, source, kind, run, seq, task, agent, status, message) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (at or time.time(), source, kind, run, seq, task, agent, status, message),
        )

    def events_after(
        self, after: int = 0, *, run: str | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """The events with an id over ``after`` (of one run, with ``run``), oldest first."""
        clause, args = ("AND run = ?", [run]) if run else ("", [])
        rows = self.query(
            f"SELECT {', '.join(_EVENT_COLS)} FROM events "
            f"WHERE id > ? {clause} ORDER BY id LIMIT ?",
            (after, *args, limit),
        )
        return [
            {k: v for k, v in zip(_EVENT_COLS, row, strict=True) if v is not None} for row in rows
        ]

    def follow(
        self,
        after: int | None = None,
        *,
        run: str | None = None,
        poll: float = 0.2,
        limit: int = 1000,
        stop: Callable[[], bool] = lambda: False,
    ) -> Generator[builtins.list[dict[str, Any]]]:
        """The events written after event ``after`` (None: after the newest now), in
        batches as they are written, until ``stop()`` (asked after each wait of up to
        ``poll`` s). On PostgreSQL the state announces each event (``NOTIFY``) and nothing
        is read between announcements, nor for one about another run's event or one already
        read; on SQLite the table is read again after each ``poll``."""
        listener = self.listen(database.EVENTS)  # before the first read: nothing slips by
        try:
            last = self.last_event_id() if after is None else after
        except BaseException:
            listener.close()
            raise
        return self._following(listener, last, run, poll, limit, stop)

    def _following(
        self,
        listener: database.Listener,
        last: int,
        run: str | None,
        poll: float,
        limit: int,
        stop: Callable[[], bool],
    ) -> Generator[builtins.list[dict[str, Any]]]:
        try:
            wake = True
            while not stop():
                while wake:
                    found = self.events_after(last, run=run, limit=limit)
                    if found:
                        last = int(found[-1]["id"])
                        yield found
                    wake = len(found) == limit
                wake = announces(listener.wait(poll), last, run)
        finally:
            listener.close()

    def last_event_id(self) -> int:
        row = self.one("SELECT COALESCE(MAX(id), 0) FROM events")
        return int(str(row[0])) if row else 0

    def list(
        self, *, statuses: tuple[RunStatus, ...] | None = None, limit: int = 50
    ) -> list[RunRecord]:
        sql = f"SELECT {_RUN_COLS} FROM runs"
        args: tuple[Any, ...] = ()
        if statuses:
            sql += f" WHERE status IN ({', '.join('?' for _ in statuses)})"
            args = statuses
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        return self._records(self.query(sql, (*args, limit)))

    def _records(self, rows: builtins.list[tuple[Any, ...]]) -> builtins.list[RunRecord]:
        """Runs from their rows, with their agents (read in one query)."""
        agents: dict[str, builtins.list[AgentRecord]] = {}
        ids = [str(row[0]) for row in rows]
        for start in range(0, len(ids), 500):  # SQLite takes a bounded number of parameters
            part = ids[start : start + 500]
            for a in self.query(
                f"SELECT {_AGENT_COLS} FROM run_agents WHERE run_id IN "
                f"({', '.join('?' for _ in part)}) ORDER BY run_id, agent",
                part,
            ):
                record = AgentRecord(**self._status(_decode(_AGENT_COLS, a), AgentStatus))
                agents.setdefault(record.run_id, []).append(record)
        return [
            RunRecord(
                **self._status(_decode(_RUN_COLS, row), RunStatus),
                agents=tuple(agents.get(str(row[0]), ())),
            )
            for row in rows
        ]

    def _status(self, data: dict[str, Any], kind: type[StrEnum]) -> dict[str, Any]:
        try:
            data["status"] = kind(data["status"])
        except ValueError:
            raise OperationFailed(
                f"run {data.get('run_id') or data.get('id')} has an unknown status "
                f"{data['status']!r}: the state was changed by hand or by a newer AgentOS",
                file=self.where,
                field="status",
            ) from None
        return data


def announces(payloads: Iterable[str], last: int, run: str | None) -> bool:
    """Whether any of the ``payloads`` a listener handed back ("ID RUN", or
    :data:`~agentos.state.database.POLL`) may be an event after ``last`` (of ``run``)."""
    for payload in payloads:
        if payload == database.POLL:
            return True
        number, _, of = payload.partition(" ")
        if (not number.isdigit() or int(number) > last) and (run is None or of == run):
            return True
    return False


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


def require_here(ws: Workspace, record: RunRecord, what: str) -> None:
    """Refuse to use what only the host that runs ``record`` has (its tmux sessions, its
    worktrees, its logs) from another machine: :class:`BadInput` naming that host."""
    if ws.state.shared and record.host not in (None, host_id()):
        raise BadInput(
            f"run {record.id} runs on host {record.host}, not this one ({host_id()}): {what} there"
        )


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
