"""Before a run: what would stop it at once, checked where the caller sees it (the
orchestrator checks again in its own process)."""

from __future__ import annotations

from pathlib import Path

from agentos.errors import BadInput
from agentos.hub.store import Hub
from agentos.workspace.layout import Workspace
from agentos.worktrees import repo as wt


def check_repo(repo_dir: Path) -> tuple[str, str]:
    """Check that a run can work on ``repo_dir``; return (target branch, base commit).

    Agents branch from HEAD and their work is merged into the checked-out branch, so the
    repository needs a commit, a checked-out branch and no uncommitted changes to tracked
    files (which a merge could otherwise overwrite).
    """
    if not repo_dir.is_dir():
        raise BadInput("repository not found", file=repo_dir, field="--repo")
    state = wt.checkout_state(repo_dir)  # one git process, when all is well
    if state is None or state[0].resolve() != repo_dir:
        repo = wt.open_repo(repo_dir)  # says what is wrong
        if Path(repo.working_tree_dir or "").resolve() != repo_dir:
            raise BadInput(
                "give the repository's top-level directory", file=repo_dir, field="--repo"
            )
        branch, base = wt.head(repo_dir)
        common = Path(repo.common_dir)
    else:
        _top, common, base, branch = state
    if branch is None:
        raise BadInput(
            "HEAD is detached: check out the branch to merge into",
            file=repo_dir,
            field="--repo",
        )
    wt.refuse_uncommitted(repo_dir)
    wt.ensure_agent_files_excluded(common)
    return branch, base


def check_agent(ws: Workspace, ref: str | None) -> None:
    """``--agent NAME[@VERSION]`` names an installed package (else :class:`NotFound`)."""
    if ref:
        try:
            Hub(ws.hub_dir).get(ref)
        except BadInput as exc:
            raise exc.with_context(field="--agent") from None
