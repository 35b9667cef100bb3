"""Evals: measure an agent package on a suite of tasks (issue 18, under way).

So far: the evaluators that grade one answer (:mod:`agentos.evals.evaluators`) and the
suite format with its checks (:mod:`agentos.evals.suite`). The harness, reports, the CLI
and the MCP tools come next.
"""
