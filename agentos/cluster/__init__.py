"""The cluster: agents, eval tasks and workflow tasks dispatched across machines, on Ray.

``cluster: {backend: ray}`` in agentos.yaml (or ``--backend ray``) hands the orchestrator
:func:`agentos.cluster.dispatch.ray_dispatch`; the local orchestrator stays the default.
What travels and what stays: docs/cluster.md. Ray is imported only by the parts that need
it (``connect``, ``tasks``, ``dispatch``, ``fanout``, ``status``), never by the CLI unless
the backend is ``ray``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentos.run.dispatch import DispatchFactory
    from agentos.workspace.layout import Workspace
    from agentos.workspace.settings import Backend

# What `start_detached` hands a background run, by name (a function cannot cross processes).
RAY_DISPATCH = "agentos.cluster.dispatch:ray_dispatch"


def backend_of(ws: Workspace, backend: Backend | str | None = None) -> Backend:
    """``backend`` when given (``--backend``), else ``cluster.backend`` of agentos.yaml."""
    chosen = backend or ws.settings.cluster.backend
    return "ray" if chosen == "ray" else "local"


def dispatch_for(
    ws: Workspace, backend: Backend | str | None = None, *, watch: str | None = None
) -> DispatchFactory | None:
    """What a run's caller hands ``start_run(dispatch=...)``: None for this machine (Ray is
    not imported); for ``ray``, the cluster's dispatch, joined now (bad input naming the
    address when no cluster answers there). ``watch`` names what watches each remote agent
    on its node (``agentos.guardian.REMOTE_WATCH``)."""
    if backend_of(ws, backend) == "local":
        return None
    from agentos.cluster.dispatch import ray_dispatch

    return ray_dispatch(ws, watch=watch)
