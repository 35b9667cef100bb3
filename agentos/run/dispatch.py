"""Where a run's agents work: on this machine (:class:`agentos.run.driver.AgentDriver`, the
default) or elsewhere, through a :class:`Dispatch` the run's caller hands the orchestrator
(``agentos.cluster`` dispatches them on a Ray cluster). The orchestrator asks the same four
things of either; interviewing, routing, receipts, merging and teardown stay its own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agentos.run.driver import RunContext
    from agentos.run.values import AgentState


class Dispatch(Protocol):
    """Drives the agents of one run, one thread per agent."""

    def setup(self, agent: AgentState) -> None:
        """Ready the agent to work: its branch (and, here, its worktree)."""

    def tree_at_base(self, agents: list[AgentState]) -> Path:
        """A tree of the repository at the run's base, on this machine, where the run
        proves before any agent starts that its checks can run."""

    def drive(self, agent: AgentState, context: str) -> None:
        """Attempts until one passes, the agent is stopped or the retries are spent; its
        state (status, commits on its branch here, gated commit, receipts) kept current."""

    def close(self) -> None:
        """At the run's teardown, after its agents' own: what the dispatch itself holds."""


# Given the run's shared context, the dispatch of its agents (called once per run).
DispatchFactory = Callable[["RunContext"], Dispatch]
