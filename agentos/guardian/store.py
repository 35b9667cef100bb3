"""The guardian's own tables in the state: what its last cycle saw of each watched agent
(``guardian_agents``), and the cycle itself (``guardian_cycles``), one host's apart from
another's (their schema is in :mod:`agentos.state.migrations`). The runs' tables,
interventions included, belong to :class:`agentos.run.store.RunStore`."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agentos.state import database
from agentos.state.host import host_id
from agentos.workspace.layout import Workspace


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


class GuardianStore(database.Store):
    """The guardian's tables, this host's part of them (see
    :class:`agentos.state.database.Store`): a guardian watches its own host's agents, and
    each host's guardian keeps its memory and its cycle apart. What every host's last cycle
    saw is read by :meth:`health`."""

    def __init__(self, ws: Workspace) -> None:
        super().__init__(ws.state)
        self.ws = ws
        self.host = host_id()

    def memory(self) -> dict[str, Memory]:
        rows = self.query(
            "SELECT session, screen, log_size, changed_at, prompt_streak, checked_at "
            "FROM guardian_agents WHERE host = ?",
            (self.host,),
        )
        return {str(r[0]): Memory(tuple(str(r[1]).split()), *r[2:]) for r in rows}

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
        seen = list(seen)

        def record(con: database.Connection) -> None:
            for s in seen:
                con.write(
                    "INSERT INTO guardian_agents (session, host, run_id, agent, screen, "
                    "log_size, changed_at, prompt, prompt_streak, heartbeat_at, health, action, "
                    "reason, checked_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (session) DO UPDATE SET host = excluded.host, "
                    "run_id = excluded.run_id, agent = excluded.agent, screen = excluded.screen, "
                    "log_size = excluded.log_size, changed_at = excluded.changed_at, "
                    "prompt = excluded.prompt, prompt_streak = excluded.prompt_streak, "
                    "heartbeat_at = excluded.heartbeat_at, health = excluded.health, "
                    "action = excluded.action, reason = excluded.reason, "
                    "checked_at = excluded.checked_at",
                    (
                        s.session,
                        self.host,
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
            for (session,) in con.rows(
                "SELECT session FROM guardian_agents WHERE host = ?", (self.host,)
            ):
                if session not in keep:
                    con.write("DELETE FROM guardian_agents WHERE session = ?", (session,))
            con.write(
                "INSERT INTO guardian_cycles (host, pid, started_at, at, cycles, agents, interval) "
                "VALUES (?, ?, ?, ?, 1, ?, ?) ON CONFLICT (host) DO UPDATE SET pid = excluded.pid, "
                "started_at = excluded.started_at, at = excluded.at, agents = excluded.agents, "
                "interval = excluded.interval, cycles = CASE WHEN guardian_cycles.pid IS NOT "
                "DISTINCT FROM excluded.pid THEN guardian_cycles.cycles + 1 ELSE 1 END",
                (self.host, pid, started_at, now, len(keep), interval),
            )

        self.transaction(record)

    def last_cycle(self) -> dict[str, Any] | None:
        """This host's guardian's last cycle."""
        row = self.one(
            "SELECT pid, started_at, at, cycles, agents, interval "
            "FROM guardian_cycles WHERE host = ?",
            (self.host,),
        )
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
        """Each watched session's health as the last cycle of its host's guardian recorded
        it (see :func:`agentos.guardian.monitor.last_health`)."""
        rows = self.query(
            "SELECT session, run_id, agent, health, action, reason, changed_at, "
            "prompt, checked_at FROM guardian_agents ORDER BY session"
        )
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
    if not ws.state.shared and not ws.state_db.exists():
        return {}
    store = GuardianStore(ws)
    try:
        return store.health()
    finally:
        store.close()
