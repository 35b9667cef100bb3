"""The guardian's signals: what each live agent of each active run is doing, measured cheaply.

A live agent is one whose run is active in state.db and whose own status is ``running``.
For each, on every cycle:

- **alive**: its tmux pane exists, is not dead, and the pane's process is running; the
  wrapper's exit-status file says whether it already ended (then the orchestrator owns it);
- **output**: when its output last changed. Two measures, either of which counts: the size
  of the agent's log (the wrapper tees everything the agent prints into it) and the visible
  screen (``capture-pane``), kept as one short hash per line. Lines holding the guardian's own
  nudge are left out (the terminal echoes it), and a screen that only scrolled up is not new
  output, so a nudge never passes for progress;
- **heartbeat**: the mtime of ``AGENTOS_HEARTBEAT_FILE``, when the runtime touches it;
- **prompt**: an input prompt of Claude Code, Gemini CLI or Codex at the bottom of the
  screen (counted over consecutive cycles, so the policy can debounce it);
- the run's start and timeout, and the guardian's past interventions from state.db.

A cycle costs one ``list-panes -a`` for every pane's pid and dead flag, and one more tmux
call that captures every live pane at once; nothing else forks. What the last cycle saw is
kept in state.db (``guardian_agents``), so a restarted guardian carries on where the last
one stopped, and :func:`last_health` serves ``agentos status``.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from agentos import state
from agentos._db_errors import guarded
from agentos._run_files import AgentFiles, RunFiles
from agentos.errors import AgentOSError
from agentos.hub import Hub
from agentos.manifest import Manifest
from agentos.runs import ACTIVE, AgentRecord, RunRecord, RunStore, pid_running
from agentos.sessions import PaneInfo, Sessions
from agentos.workspace import Workspace
from guardian._prompts import detect_prompt
from guardian.policy import Decision, Policy, Signals

GUARDIAN_MIGRATIONS = [
    state.Migration(
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

DUE_SLACK = 0.9  # an agent is examined once this fraction of its interval has passed
_Counts = dict[str, tuple[int, float]]  # action -> (how many, the latest one's time)


def open_db(ws: Workspace) -> apsw.Connection:
    """state.db with the guardian's own tables (named migrations ``guardian_*``)."""
    return state.connect(ws.state_db, [*state.STATE_MIGRATIONS, *GUARDIAN_MIGRATIONS])


@dataclass(frozen=True)
class Watched:
    """A live agent the guardian looks after, with the policy that applies to it."""

    run: RunRecord
    agent: AgentRecord
    session: str
    files: AgentFiles
    runtime: str | None  # None when its package is no longer in the hub
    version: str
    policy: Policy

    @property
    def ref(self) -> str:
        return f"{self.agent.agent}@{self.version}"


@dataclass(frozen=True)
class Memory:
    """What the previous cycle recorded of one session."""

    screen: tuple[str, ...]
    log_size: int
    changed_at: float
    prompt_streak: int
    checked_at: float


@dataclass(frozen=True)
class Observation:
    watched: Watched
    signals: Signals
    screen: tuple[str, ...]
    log_size: int


class Monitor:
    """Measures the live agents of one workspace; one instance lives as long as its guardian."""

    def __init__(
        self, ws: Workspace, sessions: Sessions | None = None, *, interval: float | None = None
    ) -> None:
        self.ws = ws
        settings = ws.settings.guardian
        # ``agentos guardian run --interval`` replaces the workspace's interval.
        self.settings = (
            settings if interval is None else settings.model_copy(update={"interval": interval})
        )
        self.sessions = sessions or Sessions(ws.root)
        self.store = RunStore(ws)
        self.con = self.store.con
        with guarded(ws.state_db):
            state.migrate(self.con, GUARDIAN_MIGRATIONS)
        self._manifests: dict[str, Manifest | None] = {}

    def close(self) -> None:
        self.store.close()

    # -- what to watch ---------------------------------------------------------------------

    def watched(self) -> list[Watched]:
        """The running agents of every active run."""
        out = []
        for run in self.store.list(statuses=ACTIVE, limit=10_000):
            for agent in run.agents:
                if agent.status != "running" or not agent.session:
                    continue
                manifest = self._manifest(agent.agent, agent.version)
                policy = Policy.from_settings(
                    self.settings, manifest.guardian if manifest else None
                )
                out.append(
                    Watched(
                        run,
                        agent,
                        agent.session,
                        RunFiles.of(self.ws, run.id).agent(agent.agent),
                        manifest.runtime if manifest else None,
                        agent.version,
                        policy,
                    )
                )
        return out

    def _manifest(self, name: str, version: str) -> Manifest | None:
        ref = f"{name}@{version}"
        if ref not in self._manifests:  # installed versions never change: cache for good
            try:
                self._manifests[ref] = Hub(self.ws.hub_dir).get(ref)[1]
            except AgentOSError:
                self._manifests[ref] = None
        return self._manifests[ref]

    # -- one cycle's measurements ----------------------------------------------------------

    def observe(
        self, watched: Sequence[Watched] | None = None, *, now: float | None = None
    ) -> list[Observation]:
        """Measure the agents that are due.

        Every agent is due on every cycle, except one whose package sets a longer interval
        than the guardian's: that one is measured once its own interval has passed.
        """
        agents = self.watched() if watched is None else list(watched)
        now = time.time() if now is None else now
        memory = self._memory()
        agents = [
            w
            for w in agents
            if w.policy.interval <= self.settings.interval
            or _due(memory.get(w.session), w.policy, now)
        ]
        if not agents:
            return []
        panes = {p.session: p for p in self.sessions.panes()}
        live = [w.session for w in agents if _pane_alive(panes.get(w.session))]
        screens = self.capture_all(live)
        history = self._history({w.run.id for w in agents})
        out = []
        for w in agents:
            pane = panes.get(w.session)
            mem = memory.get(w.session)
            raw = screens.get(w.session, "")
            screen = screen_lines(raw, (w.policy.nudge,))
            if w.session not in screens and mem is not None:
                screen = mem.screen  # not captured this cycle: nothing is known to change
            log_size = _size(w.files.log)
            if mem is None:
                changed_at = min(now, _mtime(w.files.log) or now)
            elif log_size != mem.log_size or not _is_suffix(screen, mem.screen):
                changed_at = now
            else:
                changed_at = mem.changed_at
            prompt = detect_prompt(raw, w.runtime) if w.session in screens else None
            streak = ((mem.prompt_streak if mem else 0) + 1) if prompt else 0
            past = history.get((w.run.id, w.agent.agent), {})
            restart = past.get("restart")
            nudge = past.get("nudge")
            signals = Signals(
                run_id=w.run.id,
                agent=w.agent.agent,
                session=w.session,
                now=now,
                pane=pane is not None,
                alive=w.session in live,
                exit_code=w.files.exit_code(),
                stopped=w.files.stopped.exists(),
                output_changed_at=changed_at,
                heartbeat_at=_mtime(w.files.heartbeat),
                prompt=prompt,
                prompt_streak=streak,
                run_started_at=w.run.started_at or w.run.created_at,
                run_timeout=float(self.ws.settings.run.timeout),
                restarts=restart[0] if restart else 0,
                last_restart_at=restart[1] if restart else None,
                last_nudge_at=nudge[1] if nudge else None,
            )
            out.append(Observation(w, signals, screen, log_size))
        return out

    def capture_all(self, sessions: Sequence[str]) -> dict[str, str]:
        """Every session's visible screen, from one tmux call (one call each if that fails)."""
        if not sessions:
            return {}
        marker = f"@@agentos-guardian-{secrets.token_hex(8)}@@"
        args: list[str] = []
        for name in sessions:
            args += [
                "capture-pane",
                "-p",
                "-J",
                "-t",
                f"={name}:",
                ";",
                "display-message",
                "-p",
                marker,
                ";",
            ]
        result = self.sessions.server.cmd(*args[:-1])
        if result.returncode == 0:
            parts: list[list[str]] = [[]]
            for line in result.stdout:
                if line == marker:
                    parts.append([])
                else:
                    parts[-1].append(line)
            if len(parts) > len(sessions):
                return {name: "\n".join(part) for name, part in zip(sessions, parts, strict=False)}
        # A session ended between list-panes and capture-pane: tmux stopped at it.
        out = {}
        for name in sessions:
            result = self.sessions.server.cmd("capture-pane", "-p", "-J", "-t", f"={name}:")
            if result.returncode == 0:
                out[name] = "\n".join(result.stdout)
        return out

    def _memory(self) -> dict[str, Memory]:
        rows = self.con.execute(
            "SELECT session, screen, log_size, changed_at, prompt_streak, checked_at "
            "FROM guardian_agents"
        )
        return {r[0]: Memory(tuple(r[1].split()), r[2], r[3], r[4], r[5]) for r in rows}

    def _history(self, run_ids: Iterable[str]) -> dict[tuple[str, str], _Counts]:
        """Per (run, agent) and action: how many interventions, and the latest one's time."""
        ids = sorted(run_ids)
        if not ids:
            return {}
        rows = self.con.execute(
            "SELECT run_id, agent, action, COUNT(*), MAX(at) FROM interventions "
            f"WHERE run_id IN ({', '.join('?' for _ in ids)}) GROUP BY run_id, agent, action",
            ids,
        )
        out: dict[tuple[str, str], _Counts] = {}
        for run_id, agent, action, count, at in rows:
            out.setdefault((run_id, agent), {})[action] = (count, at)
        return out

    # -- what the cycle saw, for the next cycle and for `agentos status` -------------------

    def record(
        self,
        seen: Sequence[tuple[Observation, Decision]],
        watched: Sequence[Watched],
        *,
        now: float,
        pid: int | None = None,
        started_at: float | None = None,
        interval: float | None = None,
    ) -> None:
        keep = {w.session for w in watched}
        with state.transaction(self.con):
            for obs, decision in seen:
                s = obs.signals
                self.con.execute(
                    "INSERT OR REPLACE INTO guardian_agents (session, run_id, agent, screen, "
                    "log_size, changed_at, prompt, prompt_streak, heartbeat_at, health, action, "
                    "reason, checked_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        s.session,
                        s.run_id,
                        s.agent,
                        " ".join(obs.screen),
                        obs.log_size,
                        s.output_changed_at,
                        s.prompt,
                        s.prompt_streak,
                        s.heartbeat_at,
                        str(decision.health),
                        str(decision.action),
                        decision.reason,
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


def screen_lines(screen: str, leave_out: Iterable[str] = ()) -> tuple[str, ...]:
    """A captured screen as one short hash per non-blank line, without the nudge's echo."""
    skip = [text.strip() for text in leave_out if text.strip()]
    out = []
    for line in screen.splitlines():
        text = line.rstrip()
        if not text.strip() or any(s in text for s in skip):
            continue
        out.append(hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:10])
    return tuple(out)


def last_health(ws: Workspace) -> dict[str, dict[str, Any]]:
    """Each watched session's health as the guardian's last cycle recorded it.

    ``{session: {"health", "output_age", "reason", "action", "run", "agent", "prompt",
    "checked_at", "checked_ago"}}``; ``output_age`` is seconds since the output last
    changed, as of now. Empty when no guardian has run.
    """
    if not ws.state_db.exists():
        return {}
    con = open_db(ws)
    try:
        with guarded(ws.state_db):
            rows = list(
                con.execute(
                    "SELECT session, run_id, agent, health, action, reason, changed_at, "
                    "prompt, checked_at FROM guardian_agents ORDER BY session"
                )
            )
    finally:
        con.close()
    now = time.time()
    return {
        session: {
            "health": health,
            "output_age": round(max(0.0, now - changed_at), 1),
            "reason": reason,
            "action": action,
            "run": run_id,
            "agent": agent,
            "prompt": prompt,
            "checked_at": checked_at,
            "checked_ago": round(max(0.0, now - checked_at), 1),
        }
        for session, run_id, agent, health, action, reason, changed_at, prompt, checked_at in rows
    }


def _due(mem: Memory | None, policy: Policy, now: float) -> bool:
    return mem is None or now - mem.checked_at >= policy.interval * DUE_SLACK


def _is_suffix(new: tuple[str, ...], old: tuple[str, ...]) -> bool:
    """Whether ``new`` is ``old`` scrolled up (or unchanged): no line of output is new."""
    return len(new) <= len(old) and (not new or old[len(old) - len(new) :] == new)


def _pane_alive(pane: PaneInfo | None) -> bool:
    return pane is not None and not pane.dead and pid_running(pane.pane_pid)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None
