"""The guardian's word on agents that work on a node of the cluster (agentos.cluster).

A remote agent's pane is on its node, out of this guardian's reach: its node measures it
every guardian interval (whether its pane lives, since when its output is quiet, its last
heartbeat) and the driver keeps the measurement with the run (``options.cluster``). Here
the guardian's own policy judges it, as it judges a local agent, for ``agentos status``,
the terminal UI and the dashboard. Nudging, restarting or stopping a remote agent is not
done from here (``agentos runs cancel`` stops it).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from agentos.errors import AgentOSError
from agentos.guardian.policy import Policy, Signals, decide
from agentos.hub.store import Hub
from agentos.run.store import AgentRecord, RunRecord
from agentos.workspace.layout import Workspace


def remote_health(ws: Workspace, run: RunRecord, agent: AgentRecord) -> dict[str, Any] | None:
    """The health of ``agent`` of ``run`` when it works on a node and its node measured
    it; else None. The same fields as a local agent's, and the node."""
    entry = ((run.options or {}).get("cluster") or {}).get(agent.agent) or {}
    measured = entry.get("health")
    if not isinstance(measured, dict) or "at" not in measured:
        return None
    at = float(measured["at"])
    manifest = None
    with contextlib.suppress(AgentOSError):
        manifest = Hub(ws.hub_dir).get(f"{agent.agent}@{agent.version}")[1]
    policy = Policy.from_settings(ws.settings.guardian, manifest.guardian if manifest else None)
    beat = measured.get("heartbeat_age")
    alive = bool(measured.get("alive"))
    signals = Signals(
        run_id=run.id,
        agent=agent.agent,
        session=str(entry.get("session") or ""),
        now=at,
        pane=alive,
        alive=alive,
        exit_code=None,
        stopped=False,
        output_changed_at=at - float(measured.get("output_age") or 0.0),
        heartbeat_at=None if beat is None else at - float(beat),
        run_started_at=run.started_at or run.created_at,
        run_timeout=float(ws.settings.run.timeout),
    )
    decision = decide(signals, policy)
    return {
        **decision.as_dict(),
        "output_age": round(signals.output_age + max(0.0, time.time() - at), 1),
        "node": entry.get("node"),
        "checked_at": at,
        "checked_ago": round(max(0.0, time.time() - at), 1),
    }
