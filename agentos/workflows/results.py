"""A workflow's result: submitted by a task's agent, validated by the workflow's
``result_checks`` on the repository as the task left it (merged), never by its word."""

from __future__ import annotations

from pathlib import Path

from agentos.workflows.definitions import WorkflowDefinition
from agentos.workspace import Workspace


def validate_result(ws: Workspace, workflow: WorkflowDefinition, repo: Path) -> tuple[bool, str]:
    """Whether the result holds, and one line why. With no ``result_checks`` the result
    of a task whose gate passed stands (that gate was its check)."""
    checks = workflow.config.result_checks
    if not checks:
        return True, "no result checks: the task's passing gate stands for it"
    from agentos.stormbreaker import gate_confiner, gate_environment, run_gate, tree_profile

    profile = tree_profile(ws, repo)
    env = gate_environment(profile, repo)
    result = run_gate(
        checks, repo, env=env, profile=profile, confiner=gate_confiner(ws, repo, profile, env)
    )
    return result.passed, result.summary()
