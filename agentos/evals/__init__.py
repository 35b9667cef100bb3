"""Evals: measure an agent package on a suite of tasks.

The evaluators that grade one answer (:mod:`agentos.evals.evaluators`), the suite format
with its checks (:mod:`agentos.evals.suite`) and the answer-mode harness
(:mod:`agentos.evals.harness`, ``agentos eval run``), the kept reports
(:mod:`agentos.evals.reports`: ``eval reports/show/compare``), and the bundled suites
(``_bundled/``: ``arithmetic``, answer mode; ``repo-basics``, repo mode). Dimensions an
agent reports (tokens, cost) come next.
"""
