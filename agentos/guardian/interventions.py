"""Carrying out the guardian's decisions: nudge, restart, kill; each a receipt and a row.

The row in ``interventions`` (state.db) is written *before* the action, together with the
bump of ``run_agents.restarts`` for a restart, so a guardian that crashes half-way still
counts it: restart counts come from these rows, and a restarted guardian never exceeds
``max_restarts`` (at worst it counts a restart that a crash cut short). The receipt,
written after, records how the action went, and its id is put on the row.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentos.guardian.monitor import Observation
from agentos.guardian.policy import Action, Decision
from agentos.receipts import write_receipt
from agentos.run.sessions import Sessions
from agentos.run.store import RunStore
from agentos.shared.fs import atomic_write
from agentos.workspace.layout import Workspace


@dataclass(frozen=True)
class Intervention:
    run_id: str
    agent: str
    session: str
    action: str
    reason: str
    ok: bool
    receipt: str | None
    at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def intervene(
    ws: Workspace, sessions: Sessions, store: RunStore, obs: Observation, decision: Decision
) -> Intervention:
    """Carry out ``decision.action`` on the observed agent and record it."""
    s = obs.signals
    action = decision.action
    at = s.now  # the cycle's clock, which decided it
    row_id = store.record_intervention(s.run_id, s.agent, str(action), decision.reason, at)
    fields = act(sessions, obs, decision)
    receipt = write_receipt(ws, "guardian", fields, run_id=s.run_id)
    store.link_intervention(row_id, receipt.id)
    return Intervention(
        s.run_id, s.agent, s.session, str(action), decision.reason, fields["ok"], receipt.id, at
    )


def act(sessions: Sessions, obs: Observation, decision: Decision) -> dict[str, Any]:
    """Carry out ``decision.action`` on the observed agent; the fields of its receipt (for
    an agent on a node of a cluster, its driver writes the receipt from them)."""
    s, w = obs.signals, obs.watched
    action = decision.action
    if action is Action.NUDGE:
        ok = sessions.send_text(s.session, w.policy.nudge)
        detail = "" if ok else "tmux could not type into the pane"
    elif action is Action.RESTART:
        ok, detail = _restart(sessions, obs)
    elif action is Action.KILL:
        w.files.run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(w.files.stopped, (decision.reason + "\n").encode())
        ended = sessions.kill(s.session)
        ok, detail = True, "" if ended else "the session had already ended"
    else:
        raise ValueError(f"not an intervention: {action}")
    fields: dict[str, Any] = {
        "agent": w.ref,
        "session": s.session,
        "action": str(action),
        "ok": ok,
        "health": str(decision.health),
        "reason": decision.reason,
        "output_age": round(s.output_age, 1),
        "quiet_for": round(s.quiet_for, 1),
        "restarts": s.restarts + (1 if action is Action.RESTART else 0),
        "policy": w.policy.as_dict(),
    }
    if detail:
        fields["detail"] = detail
    return fields


def _restart(sessions: Sessions, obs: Observation) -> tuple[bool, str]:
    """Respawn the pane's command in the same session (and so the same worktree)."""
    s, w = obs.signals, obs.watched
    w.files.exit_file.unlink(missing_ok=True)
    worktree = Path(w.agent.worktree) if w.agent.worktree else None
    failed = sessions.respawn(
        s.session, w.files.pane_command, worktree if worktree and worktree.is_dir() else None
    )
    if failed is not None:
        return False, f"tmux could not respawn the pane: {failed}"
    return True, ""
