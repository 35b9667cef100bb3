"""Git worktrees and branches for agents: each agent's own branch and worktree, the run's
integration of them, and the guard on what an agent could change in git's administration.

Its parts: :mod:`~agentos.worktrees.repo` (worktrees, branches, refs, one writer at a time),
:mod:`~agentos.worktrees.landing` (a run's work integrated and landed, all or nothing) and
:mod:`~agentos.worktrees.guard` (git's administration, checked and put back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentos.shared.faces import lazy

if TYPE_CHECKING:
    from agentos.worktrees.landing import integrate, land
    from agentos.worktrees.repo import add_worktree, common_repo, remove_worktree

FACE = {
    "add_worktree": "agentos.worktrees.repo",
    "remove_worktree": "agentos.worktrees.repo",
    "land": "agentos.worktrees.landing",
    "integrate": "agentos.worktrees.landing",
    "common_repo": "agentos.worktrees.repo",
}
__all__ = [
    "add_worktree",
    "common_repo",
    "integrate",
    "land",
    "remove_worktree",
]
if not TYPE_CHECKING:  # a type checker reads the imports above instead
    __getattr__, __dir__ = lazy(__name__, FACE)
