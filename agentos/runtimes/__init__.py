"""Runtimes: how an agent package is started inside its tmux pane.

A runtime turns an :class:`AgentTask` into the argv the pane's wrapper runs (cwd = the
agent's worktree), and checks before anything starts that what it needs is installed.
Runtimes are loaded lazily: the heavy frameworks are imported only by the agent process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentos.shared.faces import lazy

if TYPE_CHECKING:
    from agentos.runtimes.registry import egress_hosts, get_runtime, ready_package
    from agentos.runtimes.task import CONTEXT_FILE, FEEDBACK_FILE, AgentTask, Runtime

# Imported when first used: `runs list` reads runtimes.usage and needs none of these.
FACE = {
    "CONTEXT_FILE": "agentos.runtimes.task",
    "FEEDBACK_FILE": "agentos.runtimes.task",
    "AgentTask": "agentos.runtimes.task",
    "Runtime": "agentos.runtimes.task",
    "egress_hosts": "agentos.runtimes.registry",
    "get_runtime": "agentos.runtimes.registry",
    "ready_package": "agentos.runtimes.registry",
}
__all__ = [
    "CONTEXT_FILE",
    "FEEDBACK_FILE",
    "AgentTask",
    "Runtime",
    "egress_hosts",
    "get_runtime",
    "ready_package",
]

if not TYPE_CHECKING:  # a type checker reads the imports above instead
    __getattr__, __dir__ = lazy(__name__, FACE)
