"""The cluster as ``agentos cluster status`` shows it, and the line that makes a machine a node.

Status: each live node of the Ray cluster with its slots (``agentos_slot``), the runtimes it
advertises, and the agents running there now, from the node's own record (a small task
pinned to each node reads its workspace; the run's record is its driver's).

Join: ``ray start`` with what AgentOS schedules by: ``agentos_slot`` (how many agents the
machine runs at once; its cores by default) and, at 100 each, the runtimes and sandbox
found on its PATH (``claude``, ``gemini``, ``codex``, ``bwrap``); usage statistics off.
Ray's raylet subreaper (``RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper``)
stays off: it kills an agent's tmux server, a daemon, while the attempt runs; the
attempt's own reaper (:mod:`agentos.cluster.reaper`) ends what a dead worker left instead.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentos.cluster.dispatch import RUNTIME_RESOURCES, SLOT
from agentos.workspace.layout import Workspace

TOOLS = (*RUNTIME_RESOURCES.values(), "bwrap")  # what a node advertises when it has it
TOOL_CAPACITY = 100
DEFAULT_PORT = 6379


@dataclass(frozen=True)
class JoinLine:
    argv: list[str]
    env: dict[str, str]

    def shell(self) -> str:
        import shlex

        return " ".join(
            [*(f"{k}={shlex.quote(v)}" for k, v in self.env.items()), shlex.join(self.argv)]
        )


def join_line(
    address: str | None, *, head: bool = False, port: int = DEFAULT_PORT, slots: int | None = None
) -> JoinLine:
    """The ``ray start`` that makes this machine a node (the head with ``head``)."""
    resources: dict[str, int] = {SLOT: slots or os.cpu_count() or 1}
    for tool in TOOLS:
        if shutil.which(tool):
            resources[tool] = TOOL_CAPACITY
    ray = str(Path(sys.executable).with_name("ray"))
    argv = [ray, "start"]
    argv += ["--head", f"--port={port}"] if head else [f"--address={address}"]
    argv += [f"--resources={json.dumps(resources, sort_keys=True)}", "--disable-usage-stats"]
    return JoinLine(argv, {"RAY_USAGE_STATS_ENABLED": "0"})


def cluster_status(ws: Workspace) -> dict[str, Any]:
    """Every live node: its id, address, slots (busy and all), runtimes and agents."""
    from agentos.cluster.connect import connect
    from agentos.cluster.tasks import node_agents

    ray = connect(ws)
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    agents = node_agents([n["NodeID"] for n in nodes])
    out = []
    for node in sorted(nodes, key=lambda n: (n["NodeManagerAddress"], n["NodeID"])):
        resources = node.get("Resources", {})
        running = agents.get(node["NodeID"], [])
        out.append(
            {
                "node": f"{node['NodeManagerHostname']}/{node['NodeID'][:8]}",
                "id": node["NodeID"],
                "address": node["NodeManagerAddress"],
                "slots": int(resources.get(SLOT, 0)),
                "busy": len(running),
                "runtimes": sorted(t for t in TOOLS if resources.get(t)),
                "agents": running,
            }
        )
    return {"address": ws.settings.cluster.address, "nodes": out}
