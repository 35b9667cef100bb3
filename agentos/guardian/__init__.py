"""The guardian: a daemon per workspace that watches live agents and nudges, restarts or
stops them (see :mod:`agentos.guardian.daemon`). The library never imports it: callers hand it
to a run (``start_run(..., supervise=...)``, or by name, :data:`SUPERVISOR`, to a
background run)."""

# What a background run calls to make sure a guardian watches its agents.
SUPERVISOR = "agentos.guardian.daemon:ensure_running"
# What a node of a cluster runs beside each remote attempt: the guardian's cycle for it there
# (agentos.cluster hands it to the node by name; see agentos.guardian.remote).
REMOTE_WATCH = "agentos.guardian.remote:watch_attempt"
# What a background run on the cluster is handed by name: the cluster's dispatch, with the
# guardian watching each remote agent on its node.
RAY_DISPATCH = "agentos.guardian.remote:ray_dispatch"
