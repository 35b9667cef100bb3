"""The guardian's own tables in state.db: what its last cycle saw of each watched agent
(``guardian_agents``), and the cycle itself (``guardian_cycles``). The runs' tables,
interventions included, belong to :class:`agentos.run.store.RunStore`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import apsw

from agentos.state import database
from agentos.state.errors import guarded
from agentos.workspace.layout import Workspace

GUARDIAN_MIGRATIONS = [
    database.Migration(
        "guardian_001_agents",
        """
        CREATE TABLE guardian_agents (
            session TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            agent TEXT NOT NULL,
            screen TEXT NOT NULL DEFAULT '',
            log_size INTEGER NOT NULL DEFAULT -1,
            changed_at REAL NOT NULL,
            prompt TEXT,
            prompt_streak INTEGER NOT NULL DEFAULT 0,
            heartbeat_at REAL,
            health TEXT NOT NULL,
            action TEXT NOT NULL,
            reason TEXT NOT NULL,
            checked_at REAL NOT NULL
        );
        CREATE TABLE guardian_cycles (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            pid INTEGER,
            started_at REAL,
            at REAL NOT NULL,
            cycles INTEGER NOT NULL,
            agents INTEGER NOT NULL,
            interval REAL
        );
        """,
    ),
]


@dataclass(frozen=True)
class Memory:
    """What the previous cycle recorded of one session."""

    screen: tuple[str, ...]
    log_size: int
    changed_at: float
    prompt_streak: int
    checked_at: float


@dataclass(frozen=True)
class Seen:
    """What one cycle saw of one agent, and what it decided."""

    session: str
    run_id: str
    agent: str
    screen: tuple[str, ...]
    log_size: int
    changed_at: float
    prompt: str | None
    prompt_streak: int
    heartbeat_at: float | None
    health: str
    action: str
    reason: str


class GuardianStore:
    """The guardian's tables; one connection, used by one thread at a time. A damaged
    state.db raises a one-line error naming it (:mod:`agentos.state.errors`)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        with guarded(ws.state_db):
            self.con: apsw.Connection = database.connect(
                ws.state_db, [*database.STATE_MIGRATIONS, *GUARDIAN_MIGRATIONS]
            )

    def close(self) -> None:
        self.con.close()

    def memory(self) -> dict[str, Memory]:
        with guarded(self.ws.state_db):
            rows = self.con.execute(
                "SELECT session, screen, log_size, changed_at, prompt_streak, checked_at "
                "FROM guardian_agents"
            ).fetchall()
        return {
            str(r[0]): Memory(tuple(str(r[1]).split()), *r[2:])  # type: ignore[arg-type]
            for r in rows
        }

    def record_cycle(
        self,
        seen: Iterable[Seen],
        keep: set[str],
        *,
        now: float,
        pid: int | None,
        started_at: float | None,
        interval: float | None,
    ) -> None:
        """One cycle: what it saw of each agent (agents no longer watched are forgotten),
        and the cycle's count (reset when another guardian process took over)."""
        with guarded(self.ws.state_db), database.transaction(self.con):
            for s in seen:
                self.con.execute(
                    "INSERT OR REPLACE INTO guardian_agents (session, run_id, agent, screen, "
                    "log_size, changed_at, prompt, prompt_streak, heartbeat_at, health, action, "
                    "reason, checked_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        s.session,
                        s.run_id,
                        s.agent,
                        " ".join(s.screen),
                        s.log_size,
                        s.changed_at,
                        s.prompt,
                        s.prompt_streak,
                        s.heartbeat_at,
                        s.health,
                        s.action,
                        s.reason,
                        now,
                    ),
                )
            for (session,) in list(self.con.execute("SELECT session FROM guardian_agents")):
                if session not in keep:
                    self.con.execute("DELETE FROM guardian_agents WHERE session = ?", (session,))
            self.con.execute(
                "INSERT INTO guardian_cycles (id, pid, started_at, at, cycles, agents, interval) "
                "VALUES (1, ?, ?, ?, 1, ?, ?) ON CONFLICT (id) DO UPDATE SET pid = excluded.pid, "
                "started_at = excluded.started_at, at = excluded.at, agents = excluded.agents, "
                "interval = excluded.interval, cycles = CASE WHEN guardian_cycles.pid IS "
                "excluded.pid THEN guardian_cycles.cycles + 1 ELSE 1 END",
                (pid, started_at, now, len(keep), interval),
            )

    def last_cycle(self) -> dict[str, Any] | None:
        with guarded(self.ws.state_db):
            row = self.con.execute(
                "SELECT pid, started_at, at, cycles, agents, interval "
                "FROM guardian_cycles WHERE id = 1"
            ).fetchone()
        if row is None:
            return None
        pid, started_at, at, cycles, agents, interval = row
        return {
            "pid": pid,
            "started_at": started_at,
            "at": at,
            "ago": round(time.time() - float(at or 0), 1),
            "cycles": cycles,
            "agents": agents,
            "interval": interval,
        }

    def health(self) -> dict[str, dict[str, Any]]:
        """Each watched session's health as the last cycle recorded it (see
        :func:`agentos.guardian.monitor.last_health`)."""
        with guarded(self.ws.state_db):
            rows: list[tuple[Any, ...]] = self.con.execute(
                "SELECT session, run_id, agent, health, action, reason, changed_at, "
                "prompt, checked_at FROM guardian_agents ORDER BY session"
            ).fetchall()
        now = time.time()
        out = {}
        for session, run_id, agent, health, action, reason, changed, prompt, checked in rows:
            out[session] = {
                "health": health,
                "output_age": round(max(0.0, now - changed), 1),
                "reason": reason,
                "action": action,
                "run": run_id,
                "agent": agent,
                "prompt": prompt,
                "checked_at": checked,
                "checked_ago": round(max(0.0, now - checked), 1),
            }
        return out


def last_health(ws: Workspace) -> dict[str, dict[str, Any]]:
    """Each watched session's health as the guardian's last cycle recorded it.

    ``{session: {"health", "output_age", "reason", "action", "run", "agent", "prompt",
    "checked_at", "checked_ago"}}``; ``output_age`` is seconds since the output last
    changed, as of now. Empty when no guardian has run.
    """
    if not ws.state_db.exists():
        return {}
    store = GuardianStore(ws)
    try:
        return store.health()
    finally:
        store.close()
