"""The guardian's decisions: pure, deterministic functions of an agent's signals and a policy.

No model, no clock, no I/O: :func:`decide` sees what the monitor measured (with ``now``
inside the signals) and the intervention history from state.db, and returns the agent's
health and at most one action. The same inputs always give the same decision.

The ladder for an agent that has gone quiet (no output change, no heartbeat) is::

    quiet >= stuck_after                      -> nudge (once per quiet spell)
    stuck_after more after the nudge          -> restart, while restarts < max_restarts
    restarts used up and quiet >= kill_after  -> kill (the orchestrator fails the run)

Each step gives the one before it ``stuck_after`` seconds to work: a kill also waits until
the nudge is that old.

A restart starts a new quiet spell, so a restarted agent is nudged again before it is
killed. An agent at a prompt of Claude Code, Gemini CLI or Codex is *waiting*, not stuck,
once the prompt has been seen on two cycles in a row; it is left for a person to answer
(``agentos attach``). A run past its timeout has its agents killed whatever their health.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from agentos.hub.manifest import GuardianOverrides
from agentos.workspace.settings import GuardianSettings

PROMPT_CONFIRMATIONS = 2  # cycles in a row a prompt must be seen before "waiting"


class Health(StrEnum):
    HEALTHY = "healthy"
    WAITING = "waiting"
    STUCK = "stuck"
    DEAD = "dead"


class Action(StrEnum):
    NONE = "none"
    NUDGE = "nudge"
    RESTART = "restart"
    KILL = "kill"


@dataclass(frozen=True)
class Policy:
    interval: float
    stuck_after: float
    nudge: str
    max_restarts: int
    kill_after: float

    @classmethod
    def from_settings(
        cls, settings: GuardianSettings, override: GuardianOverrides | None = None
    ) -> Policy:
        """The workspace's policy with a package's overrides applied, key by key."""
        values: dict[str, Any] = settings.model_dump()
        if override is not None:
            values.update(override.model_dump(exclude_none=True))
        return cls(**{k: values[k] for k in cls.__dataclass_fields__})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Signals:
    """What the monitor saw of one agent on one cycle (times are epoch seconds)."""

    run_id: str
    agent: str
    session: str
    now: float
    pane: bool  # the tmux pane exists
    alive: bool  # ... and its process is running
    exit_code: int | None  # the wrapper's exit-status file, once written
    stopped: bool  # the guardian's kill marker exists
    output_changed_at: float  # when the pane's output last changed
    heartbeat_at: float | None = None  # mtime of the heartbeat file, when the runtime writes one
    prompt: str | None = None  # the input prompt recognised on screen this cycle
    prompt_streak: int = 0  # cycles in a row with a prompt on screen
    run_started_at: float | None = None
    run_timeout: float | None = None
    restarts: int = 0  # restarts the guardian made of this agent in this run
    last_restart_at: float | None = None
    last_nudge_at: float | None = None

    @property
    def quiet_since(self) -> float:
        """The start of the current quiet spell: output, heartbeat or restart, the latest."""
        return max(self.output_changed_at, self.heartbeat_at or 0.0, self.last_restart_at or 0.0)

    @property
    def output_age(self) -> float:
        return max(0.0, self.now - self.output_changed_at)

    @property
    def quiet_for(self) -> float:
        return max(0.0, self.now - self.quiet_since)


@dataclass(frozen=True)
class Decision:
    health: Health
    action: Action
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"health": str(self.health), "action": str(self.action), "reason": self.reason}


def decide(s: Signals, p: Policy) -> Decision:
    """The health of one agent and the one intervention (or none) it needs now."""
    if s.stopped:
        return Decision(Health.DEAD, Action.NONE, "stopped by the guardian")
    if s.exit_code is not None:
        return Decision(
            Health.DEAD,
            Action.NONE,
            f"exited with status {s.exit_code}; the orchestrator takes over",
        )
    health = _health(s, p)
    if (
        s.run_timeout is not None
        and s.run_started_at is not None
        and s.now - s.run_started_at >= s.run_timeout
    ):
        return Decision(
            health.health, Action.KILL, f"the run passed its timeout of {_secs(s.run_timeout)}"
        )
    return health


def _health(s: Signals, p: Policy) -> Decision:
    if not s.alive:
        if not s.pane:
            return Decision(
                Health.DEAD,
                Action.NONE,
                "the session ended without an exit status; the orchestrator "
                "counts it as a failed attempt",
            )
        if s.restarts < p.max_restarts:
            return Decision(
                Health.DEAD,
                Action.RESTART,
                "the pane's process died without an exit status; restart "
                f"{s.restarts + 1} of {p.max_restarts}",
            )
        return Decision(
            Health.DEAD,
            Action.KILL,
            f"the pane's process died without an exit status after {s.restarts} restart(s)",
        )
    if s.prompt is not None and s.prompt_streak >= PROMPT_CONFIRMATIONS:
        return Decision(
            Health.WAITING,
            Action.NONE,
            f"waiting for input at a {s.prompt} prompt (answer it with `agentos attach`)",
        )
    quiet = s.quiet_for
    if quiet < p.stuck_after:
        return Decision(Health.HEALTHY, Action.NONE, f"output {_secs(s.output_age)} ago")
    if s.prompt is not None:
        return Decision(
            Health.STUCK, Action.NONE, f"a {s.prompt} prompt is on screen; confirming it next cycle"
        )
    silent = f"no output for {_secs(quiet)}"
    nudged_at = (
        s.last_nudge_at
        if (s.last_nudge_at is not None and s.last_nudge_at >= s.quiet_since)
        else None
    )
    if nudged_at is None:
        return Decision(
            Health.STUCK, Action.NUDGE, f"{silent} (stuck_after {_secs(p.stuck_after)})"
        )
    since_nudge = s.now - nudged_at
    if s.restarts < p.max_restarts:
        if since_nudge >= p.stuck_after:
            return Decision(
                Health.STUCK,
                Action.RESTART,
                f"{silent}, {_secs(since_nudge)} of it after a nudge; restart "
                f"{s.restarts + 1} of {p.max_restarts}",
            )
        return Decision(Health.STUCK, Action.NONE, f"{silent}; nudged {_secs(since_nudge)} ago")
    if quiet >= p.kill_after and since_nudge >= p.stuck_after:
        return Decision(
            Health.STUCK,
            Action.KILL,
            f"{silent} (kill_after {_secs(p.kill_after)}) after a nudge and "
            f"{s.restarts} restart(s)",
        )
    return Decision(
        Health.STUCK,
        Action.NONE,
        f"{silent}; nudged {_secs(since_nudge)} ago; killed at "
        f"{_secs(max(p.kill_after, quiet - since_nudge + p.stuck_after))} "
        "of silence",
    )


def _secs(value: float) -> str:
    return f"{value:.0f}s" if value >= 10 else f"{value:.1f}s"
