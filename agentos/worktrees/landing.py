"""Landing a run's work: its agents' commits integrated in a scratch worktree, the
integration judged, and the target moved by compare and swap, all or nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agentos.errors import OperationFailed
from agentos.worktrees.repo import (
    checked_out,
    commit_staged,
    delete_branch,
    git_result,
    maintain,
    remove_worktree,
    repo_lock,
)


@dataclass
class MergeResult:
    merged: bool
    commit: str | None = None
    conflicts: list[str] = field(default_factory=list)
    conflicting_branch: str | None = None
    message: str = ""
    commits: list[str] = field(default_factory=list)  # the commits that landed, in order
    onto: str | None = None  # the target's commit the work was integrated onto
    # The integration gate: what it decided on the commit that would land (None: not run).
    gate: IntegrationVerdict | None = None


@dataclass(frozen=True)
class IntegrationVerdict:
    """The checks on the integrated tree, before the target moves."""

    passed: bool
    summary: str  # one line: what ran and what failed
    receipt: str | None = None
    skipped: str = ""  # why it did not run (the tree is one a gate already passed)

    def as_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "summary": self.summary,
            "receipt": self.receipt,
            "skipped": self.skipped or None,
        }


# The integration gate: (the scratch worktree holding the integration commit, that commit,
# the target commit it was made on) -> its verdict.
IntegrationGate = Callable[[Path, str, str], IntegrationVerdict]


@dataclass(frozen=True)
class Landing:
    """One agent's work to land on the target branch: exactly the commit its gate judged,
    squashed into one commit with ``message``."""

    branch: str
    commit: str
    message: str
    author: str
    # Its gate ran on this machine. A gate that ran on a node of a cluster is trusted for
    # that node's attempt only: the integration gate runs here even on the tree it passed.
    gated_here: bool = True


def land(
    repo_dir: Path,
    target: str,
    landings: list[Landing],
    run_id: str,
    scratch: Path,
    *,
    squash: str = "agent",
    gate: IntegrationGate | None = None,
) -> MergeResult:
    """Land the agents' gated commits on ``target``, all or nothing.

    In a scratch worktree at ``target``'s tip, each gated commit is squash-merged (a
    three-way merge against where its branch left the target) and committed with its
    landing's message: one commit per agent, or one for the whole run with ``squash="run"``
    (the messages joined). The earlier attempts on the agents' branches never reach the
    target. On a conflict nothing moves and the conflicting files are listed. Then ``gate``
    judges the integration commit that would land (unless its tree is one an agent's gate
    already passed); when it fails, nothing moves. The target moves only by compare and
    swap, from the commit the integration was made on to the integration commit. The whole
    landing, gate included, holds :func:`repo_lock`: runs on one repository land one at a
    time, and nothing lands on a target that moved since it was judged.
    """
    with repo_lock(repo_dir):
        return _land(repo_dir, target, landings, run_id, scratch, squash, gate)


def integrate(
    repo_dir: Path, onto: str, landings: list[Landing], run_id: str, scratch: Path, ref: str
) -> MergeResult:
    """The landings squashed onto commit ``onto`` without moving any branch: the result is
    kept at ``ref`` (for a run's verifiers to start from). ``merged`` is False on a
    conflict."""
    with repo_lock(repo_dir):
        result = _integrated(repo_dir, onto, landings, run_id, scratch, "run", keep=False)
        if result.merged:
            git_result(repo_dir, "update-ref", ref, result.commit or onto)
            result.commit = result.commit or onto
        return result


def _integrated(
    repo_dir: Path,
    onto: str,
    landings: list[Landing],
    run_id: str,
    scratch: Path,
    squash: str,
    *,
    keep: bool,
) -> MergeResult:
    """The landings merged onto ``onto`` in a scratch worktree on the run's integration
    branch; with ``keep`` the worktree stays for the caller (it removes it)."""
    integration = integration_branch(run_id)
    delete_branch(repo_dir, integration)
    git_result(repo_dir, "worktree", "add", "-q", "-b", integration, str(scratch), onto)
    landed: list[str] = []
    merged = ""
    try:
        for item in landings:
            result = git_result(
                scratch, "merge", "--squash", "--no-commit", item.commit, check=False
            )
            conflicts = git_result(
                scratch, "diff", "--name-only", "--diff-filter=U", check=False
            ).stdout.split()
            if result.returncode != 0 or conflicts:
                git_result(scratch, "reset", "-q", "--hard", check=False)
                return MergeResult(
                    False,
                    conflicts=conflicts,
                    conflicting_branch=item.branch,
                    message=f"{item.branch} conflicts with the target or the other agents in: "
                    f"{', '.join(conflicts) or result.stderr.strip() or result.stdout.strip()}",
                    onto=onto,
                )
            if squash == "agent":
                landed.append(commit_staged(scratch, item.message, item.author))
        if squash != "agent":
            message = "\n\n".join(item.message.rstrip("\n") for item in landings) + "\n"
            authors = ", ".join(dict.fromkeys(item.author for item in landings))
            landed.append(commit_staged(scratch, message, authors))
        landed = [c for c in landed if c]
        # The last commit made is the worktree's HEAD; none made: it is still at onto.
        merged = landed[-1] if landed else onto
        return MergeResult(True, merged if landed else None, commits=landed, onto=onto)
    finally:
        if not keep or not merged:
            remove_worktree(repo_dir, scratch)
            delete_branch(repo_dir, integration)


def _land(
    repo_dir: Path,
    target: str,
    landings: list[Landing],
    run_id: str,
    scratch: Path,
    squash: str,
    gate: IntegrationGate | None,
) -> MergeResult:
    todo = [item for item in landings if _changes_something(repo_dir, target, item.commit)]
    if not todo:
        return MergeResult(True, None, message="no agent changed anything; nothing to merge")
    tip = git_result(repo_dir, "rev-parse", f"refs/heads/{target}").stdout.strip()
    result = _integrated(repo_dir, tip, todo, run_id, scratch, squash, keep=True)
    if not result.merged:
        result.message = result.message.replace("the target", target)
        return result
    integration = integration_branch(run_id)
    try:
        try:
            if not result.commits:
                return MergeResult(True, None, message="the agents' work is already on " + target)
            merged = result.commit or tip
            if gate is not None:
                result.gate = _judge_integration(repo_dir, scratch, merged, tip, todo, gate)
                if not result.gate.passed:
                    names = " + ".join(item.author for item in todo)
                    return MergeResult(
                        False,
                        message=f"not merged: {names} on {target} ({tip[:12]}) fails its "
                        f"checks: {result.gate.summary}",
                        onto=tip,
                        gate=result.gate,
                    )
        finally:
            remove_worktree(repo_dir, scratch)
        _advance(repo_dir, target, merged, tip)
        maintain(repo_dir)  # the repository's maintenance, once, as a commit of its own
    finally:
        delete_branch(repo_dir, integration)
    result.message = (
        f"merged {', '.join(i.branch for i in todo)} into {target} "
        f"({len(result.commits)} commit{'s' * (len(result.commits) != 1)})"
    )
    return result


def _judge_integration(
    repo_dir: Path,
    scratch: Path,
    merged: str,
    tip: str,
    todo: list[Landing],
    gate: IntegrationGate,
) -> IntegrationVerdict:
    """The integration gate, or why it need not run: the integrated tree is exactly one an
    agent's gate passed on this machine (one agent onto the target it started from)."""
    tree = git_result(repo_dir, "rev-parse", f"{merged}^{{tree}}").stdout.strip()
    for item in (i for i in todo if i.gated_here):
        gated = git_result(repo_dir, "rev-parse", f"{item.commit}^{{tree}}").stdout.strip()
        if gated == tree:
            return IntegrationVerdict(
                True,
                f"the integrated tree is the one {item.author}'s gate passed",
                skipped="the tree was already gated",
            )
    return gate(scratch, merged, tip)


def _changes_something(repo_dir: Path, target: str, commit: str) -> bool:
    """Whether ``commit`` holds work that is not on ``target`` yet."""
    result = git_result(repo_dir, "merge-base", "--is-ancestor", commit, target, check=False)
    return result.returncode != 0


def integration_branch(run_id: str) -> str:
    """The branch a run's landings are made on before the target moves (outside the
    ``agentos/<run>/`` namespace of its agents, so that no agent name can collide)."""
    return f"agentos-merge/{run_id}"


def integrated_ref(run_id: str) -> str:
    """Where a run keeps the integration of its change agents' work that its verifiers
    start from (removed with the run's other refs by ``runs prune``)."""
    return f"refs/agentos/runs/{run_id}/_integrated"


def _advance(repo_dir: Path, target: str, merged: str, tip: str) -> None:
    """Move ``target`` from ``tip`` (the commit the work was integrated onto and judged on)
    to ``merged``, by compare and swap: if it moved meanwhile, nothing moves."""
    if checked_out(repo_dir) == target:
        # The user's checkout is on the target: a fast-forward keeps their working tree
        # right, and refuses when the branch is no longer at the judged commit.
        result = git_result(repo_dir, "merge", "--ff-only", "--no-edit", merged, check=False)
        if result.returncode != 0:
            raise OperationFailed(
                f"could not merge into {target} in {repo_dir}: "
                f"{(result.stderr or result.stdout).strip().splitlines()[-1:]} "
                "(the agent branches are kept)"
            )
        return
    result = git_result(repo_dir, "update-ref", f"refs/heads/{target}", merged, tip, check=False)
    if result.returncode != 0:
        raise OperationFailed(
            f"{target} moved while the work was being integrated and judged; nothing "
            "landed (the agent branches are kept): merge again"
        )
