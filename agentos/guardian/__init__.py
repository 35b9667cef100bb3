"""The guardian: a daemon per workspace that watches live agents and nudges, restarts or
stops them (see :mod:`agentos.guardian.daemon`). The library never imports it: callers hand it
to a run (``start_run(..., supervise=...)``, or by name, :data:`SUPERVISOR`, to a
background run)."""

# What a background run calls to make sure a guardian watches its agents.
SUPERVISOR = "agentos.guardian.daemon:ensure_running"
