"""The guardian's word on agents that work on a node of the cluster (agentos.cluster).

A remote agent's pane is on its node, out of this guardian's reach: its node measures it
every guardian interval (whether its pane lives, since when its output is quiet, its last
heartbeat) and the driver keeps the measurement with the run (``options.cluster``). Here
the guardian's own policy judges it, as it judges a local agent, for ``agentos status``,
the terminal UI and the dashboard.

On the node, the same guardian watches the attempt (:func:`watch_attempt`, handed to the
run by name, :data:`agentos.guardian.REMOTE_WATCH`): it nudges, restarts or stops the agent
there, as it would here, and the driver writes the intervention's receipt.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from agentos.errors import AgentOSError
from agentos.guardian.interventions import act
from agentos.guardian.monitor import Monitor, Watched
from agentos.guardian.policy import Action, Policy, Signals, decide
from agentos.hub.manifest import Manifest
from agentos.hub.store import Hub
from agentos.run.dispatch import DispatchFactory
from agentos.run.sessions import Sessions
from agentos.run.store import AgentRecord, AgentStatus, RunRecord
from agentos.workspace.files import AgentFiles
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


# --- on a node: the guardian's cycle for one attempt ------------------------------------------


def watch_attempt(
    ws: Workspace,
    sessions: Sessions,
    files: AgentFiles,
    run_id: str,
    manifest: Manifest,
    done: threading.Event,
    report: Callable[[str, dict[str, Any]], None],
) -> None:
    """On the node an agent works on: each guardian interval until ``done``, what the
    guardian's monitor sees of its pane and files, the policy's decision, and the
    intervention it calls for (a nudge typed into the pane, a restart of it, a stop),
    carried out there on the attempt's own tmux socket. ``report("health", ...)`` and
    ``report("intervention", fields)`` send them to the driver, which writes the receipt
    (one writer); the node keeps its own count of interventions for the policy."""
    monitor = Monitor(ws, sessions)
    policy = Policy.from_settings(monitor.settings, manifest.guardian)
    try:
        while not done.wait(min(monitor.settings.interval, policy.interval)):
            record = monitor.store.get(run_id)
            agent = next((a for a in record.agents if a.agent == manifest.name), None)
            if agent is None or agent.status is not AgentStatus.RUNNING or not agent.session:
                continue
            watched = Watched(
                record, agent, agent.session, files, manifest.runtime, manifest.version, policy
            )
            now = time.time()
            seen = []
            for obs in monitor.observe([watched], now=now):
                decision = decide(obs.signals, policy)
                report(
                    "health",
                    {
                        "alive": obs.signals.alive,
                        "output_age": round(obs.signals.output_age, 1),
                        "heartbeat_age": None
                        if obs.signals.heartbeat_at is None
                        else round(now - obs.signals.heartbeat_at, 1),
                        "at": now,
                    },
                )
                if decision.action is not Action.NONE and not done.is_set():
                    monitor.store.record_intervention(
                        run_id, manifest.name, str(decision.action), decision.reason, now
                    )
                    fields = act(sessions, obs, decision)
                    report("intervention", {"fields": fields, "at": now})
                seen.append((obs, decision))
            monitor.record(seen, [watched], now=now)
    finally:
        monitor.close()


def ray_dispatch(ws: Workspace) -> DispatchFactory:
    """The cluster's dispatch with the guardian watching each remote agent on its node:
    what a background run is handed by name (:data:`agentos.guardian.RAY_DISPATCH`)."""
    from agentos.cluster.dispatch import ray_dispatch as dispatch
    from agentos.guardian import REMOTE_WATCH

    return dispatch(ws, watch=REMOTE_WATCH)
