"""A workflow's result: submitted by a task's agent, validated by the workflow's
``result_checks`` on the repository as the task left it (merged), never by its word."""

from __future__ import annotations

from pathlib import Path

from agentos.workflows.definitions import WorkflowDefinition
from agentos.workflows.store import ResultRecord
from agentos.workspace.layout import Workspace


def validate_result(ws: Workspace, workflow: WorkflowDefinition, repo: Path) -> tuple[bool, str]:
    """Whether the result holds, and one line why. With no ``result_checks`` the result
    of a task whose gate passed stands (that gate was its check)."""
    checks = workflow.config.result_checks
    if not checks:
        return True, "no result checks: the task's passing gate stands for it"
    import shutil

    from agentos.gate.environment import gate_confiner, gate_environment
    from agentos.gate.repo import tree_profile
    from agentos.gate.runner import gate_judging, run_gate

    profile = tree_profile(ws, repo)
    env = gate_environment(profile, repo)
    judging = gate_judging(ws, repo, None) if any(c.kind == "tests" for c in checks) else None
    try:
        result = run_gate(
            checks,
            repo,
            env=env,
            profile=profile,
            confiner=gate_confiner(ws, repo, profile, env),
            judging=judging,
        )
    finally:
        if judging is not None:
            shutil.rmtree(judging.scratch, ignore_errors=True)
    return result.passed, result.summary()


def validate_result_at(
    ws: Workspace, workflow: WorkflowDefinition, repo: Path, commit: str
) -> tuple[bool, str]:
    """:func:`validate_result` on ``commit`` of ``repo`` (the work of a task whose phase
    changes nothing, kept on its branch): in a scratch worktree of that commit, removed
    after; the repository's branches are not touched."""
    import tempfile

    from agentos.worktrees.repo import git_result, remove_worktree, repo_lock

    ws.worktrees_dir.mkdir(parents=True, exist_ok=True)
    tree = Path(tempfile.mkdtemp(prefix="result-", dir=ws.worktrees_dir)) / "tree"
    with repo_lock(repo):
        git_result(repo, "worktree", "add", "-q", "--detach", str(tree), commit)
    try:
        return validate_result(ws, workflow, tree)
    finally:
        remove_worktree(repo, tree)
        tree.parent.rmdir()


def submit_result(ws: Workspace, execution_id: str, summary: str) -> ResultRecord:
    """A result submitted from outside a run (the CLI, MCP): validated now, on the
    execution's repository as it is, and recorded."""
    from agentos.workflows.store import WorkflowStore

    store = WorkflowStore(ws)
    try:
        execution = store.execution(execution_id)
        workflow = WorkflowDefinition.model_validate(execution.definition)
        validated, detail = validate_result(ws, workflow, Path(execution.repo))
        return store.record_result(execution_id, None, summary, validated, detail)
    finally:
        store.close()
