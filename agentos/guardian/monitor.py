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
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import AgentOSError
from agentos.guardian.policy import Decision, Policy, Signals
from agentos.guardian.prompts import detect_prompt
from agentos.guardian.store import GuardianStore, Memory, Seen
from agentos.guardian.store import last_health as last_health
from agentos.hub.manifest import Manifest
from agentos.hub.store import Hub
from agentos.run.sessions import PaneInfo, Sessions
from agentos.run.store import ACTIVE, AgentRecord, AgentStatus, RunRecord, RunStore, pid_running
from agentos.workspace.files import AgentFiles, RunFiles
from agentos.workspace.layout import Workspace

DUE_SLACK = 0.9  # an agent is examined once this fraction of its interval has passed
_Counts = dict[str, tuple[int, float]]  # action -> (how many, the latest one's time)


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
        self.memory = GuardianStore(ws)
        self._manifests: dict[str, Manifest | None] = {}

    def close(self) -> None:
        self.memory.close()
        self.store.close()

    # -- what to watch ---------------------------------------------------------------------

    def watched(self) -> list[Watched]:
        """The running agents of every active run of this host."""
        out = []
        for run in self.store.list(statuses=ACTIVE, limit=10_000):
            if not self.store.local(run):  # another host's guardian watches it
                continue
            for agent in run.agents:
                if agent.status is not AgentStatus.RUNNING or not agent.session:
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
        memory = self.memory.memory()
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
        screens = self.sessions.screens(live)
        history = self.store.intervention_counts({w.run.id for w in agents})
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
        self.memory.record_cycle(
            (
                Seen(
                    session=obs.signals.session,
                    run_id=obs.signals.run_id,
                    agent=obs.signals.agent,
                    screen=obs.screen,
                    log_size=obs.log_size,
                    changed_at=obs.signals.output_changed_at,
                    prompt=obs.signals.prompt,
                    prompt_streak=obs.signals.prompt_streak,
                    heartbeat_at=obs.signals.heartbeat_at,
                    health=str(decision.health),
                    action=str(decision.action),
                    reason=decision.reason,
                )
                for obs, decision in seen
            ),
            {w.session for w in watched},
            now=now,
            pid=pid,
            started_at=started_at,
            interval=interval,
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
