"""A run: one request, from routing to merged branches, then gone.

Its parts: :mod:`~agentos.run.orchestrator` (the run's phases), :mod:`~agentos.run.driver`
(one agent's attempts), :mod:`~agentos.run.launch` (an agent in its tmux pane),
:mod:`~agentos.run.sessions` (AgentOS's tmux server), :mod:`~agentos.run.oneshot` (a package
run once, outside tmux), :mod:`~agentos.run.values` (options, agent state, the report),
:mod:`~agentos.run.preflight` (what would stop a run at once), :mod:`~agentos.run.store`
(runs and agents in state.db), :mod:`~agentos.run.events` (a run's events, in order),
:mod:`~agentos.run.control` (start in the background, status, cancel, follow),
:mod:`~agentos.run.detached` (the background run's process), :mod:`~agentos.run.review`
(passing work looked at before it lands), :mod:`~agentos.run.outbox` (what an agent asks of
AgentOS), :mod:`~agentos.run.gc` (what a crashed run left behind) and
:mod:`~agentos.run.doctor` (is this machine ready to run agents).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentos.shared.faces import lazy

if TYPE_CHECKING:
    from agentos.run.control import cancel, start_detached, status
    from agentos.run.orchestrator import start_run
    from agentos.run.store import AgentStatus, RunStatus, RunStore
    from agentos.run.values import RunOptions, RunReport

FACE = {
    "start_run": "agentos.run.orchestrator",
    "RunOptions": "agentos.run.values",
    "RunReport": "agentos.run.values",
    "RunStore": "agentos.run.store",
    "RunStatus": "agentos.run.store",
    "AgentStatus": "agentos.run.store",
    "start_detached": "agentos.run.control",
    "status": "agentos.run.control",
    "cancel": "agentos.run.control",
}
__all__ = [
    "AgentStatus",
    "RunOptions",
    "RunReport",
    "RunStatus",
    "RunStore",
    "cancel",
    "start_detached",
    "start_run",
    "status",
]
if not TYPE_CHECKING:  # a type checker reads the imports above instead
    __getattr__, __dir__ = lazy(__name__, FACE)
