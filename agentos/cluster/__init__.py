"""The cluster: agents, eval tasks and workflow tasks dispatched across machines, on Ray.

``cluster: {backend: ray}`` in agentos.yaml (or ``--backend ray``) hands the orchestrator
:func:`agentos.cluster.dispatch.ray_dispatch`; the local orchestrator stays the default.
What travels and what stays: docs/cluster.md. Ray is imported only by the parts that need
it (``connect``, ``tasks``, ``dispatch``, ``fanout``, ``status``), never by the CLI unless
the backend is ``ray``.
"""
