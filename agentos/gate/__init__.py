"""The gate: deterministic checks that decide whether work is done, judged against the base.

Checks come from the agent's package, the routing card and ``agentos.yaml``, never from the
agent's worktree (:mod:`~agentos.gate.selection`); they run with the repository's own
environment (:mod:`~agentos.gate.environment`, :mod:`~agentos.gate.repo`,
:mod:`~agentos.gate.detect`, :mod:`~agentos.gate.prepare`) in order
(:mod:`~agentos.gate.runner`, the built-in ones in :mod:`~agentos.gate.builtin`) and what
they found is :mod:`~agentos.gate.results`. The tests check judges the agent's code with the
base's tests, test by test (:mod:`~agentos.gate.judge`), from records a recorder writes
outside the tree (``agentos/gate/site/_agentos_gate.py``, read by
:mod:`~agentos.gate.records`), with what the diff did to the tests
(:mod:`~agentos.gate.findings`) and scratch trees made with git's plumbing
(:mod:`~agentos.gate.trees`). :mod:`~agentos.gate.hook` and
:mod:`~agentos.gate.claude_settings` make it Claude Code's ``Stop`` hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentos.shared.faces import lazy

if TYPE_CHECKING:
    from agentos.gate.findings import Finding
    from agentos.gate.judge import Judging, TestChanges, TestsJudge, Verdict
    from agentos.gate.repo import RepoProfile, repo_profile
    from agentos.gate.results import CheckResult, GateResult
    from agentos.gate.runner import run_gate
    from agentos.gate.selection import collect_checks

FACE = {
    "run_gate": "agentos.gate.runner",
    "GateResult": "agentos.gate.results",
    "CheckResult": "agentos.gate.results",
    "collect_checks": "agentos.gate.selection",
    "RepoProfile": "agentos.gate.repo",
    "repo_profile": "agentos.gate.repo",
    "TestsJudge": "agentos.gate.judge",
    "Judging": "agentos.gate.judge",
    "TestChanges": "agentos.gate.judge",
    "Verdict": "agentos.gate.judge",
    "Finding": "agentos.gate.findings",
}
__all__ = [
    "CheckResult",
    "Finding",
    "GateResult",
    "Judging",
    "RepoProfile",
    "TestChanges",
    "TestsJudge",
    "Verdict",
    "collect_checks",
    "repo_profile",
    "run_gate",
]
if not TYPE_CHECKING:  # a type checker reads the imports above instead
    __getattr__, __dir__ = lazy(__name__, FACE)
