"""The gate's tests check: the base's tests judge the agent's code, test by test
(:mod:`agentos.gate.judge`), from records a recorder writes outside the tree
(``agentos/gate/site/_agentos_gate.py``, read by :mod:`agentos.gate.records`), with what the diff
did to the tests named (:mod:`agentos.gate.findings`) and scratch trees made with git's
plumbing (:mod:`agentos.gate.trees`). The checks themselves are run by
:mod:`agentos.gate.runner`."""

from agentos.gate.findings import Finding
from agentos.gate.judge import Judging, TestChanges, TestsJudge, Verdict

__all__ = ["Finding", "Judging", "TestChanges", "TestsJudge", "Verdict"]
