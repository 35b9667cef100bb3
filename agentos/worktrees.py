"""Git worktrees and branches for agents (through gitpython).

Every agent works on its own branch ``agentos/<run-id>/<agent>`` in its own worktree.
Its work is committed to that branch before the worktree is removed, and the branches of a
run are merged together in a separate integration worktree first, so the target branch
moves only when the whole task force merges cleanly.
"""

from __future__ import annotations

import subprocess
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agentos.errors import BadInput, MissingTool, OperationFailed

if TYPE_CHECKING:
    import git

# Files AgentOS writes into a worktree for the agent; never committed, never merged.
AGENT_FILES_GLOB = "/AGENTOS_*.md"
SPARSE_MIN_FILES = 2000
MERGE_DIR = "_merge"  # a run's scratch worktree for merging its agents' branches together


def branch_name(run_id: str, agent: str) -> str:
    return f"agentos/{run_id}/{agent}"


def open_repo(path: Path) -> git.Repo:
    """The git repository at ``path`` (which must have at least one commit)."""
    try:
        import git
    except ImportError as exc:  # gitpython raises ImportError when git itself is missing
        raise MissingTool(f"git is not available: {exc}", field="git") from None
    try:
        repo = git.Repo(path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise BadInput(
            "not a git repository (run `git init` and commit first)", file=path, field="--repo"
        ) from None
    if not repo.head.is_valid():
        raise BadInput("the repository has no commit yet", file=path, field="--repo")
    return repo


def _git(repo_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a git command in ``repo_dir`` through gitpython's command runner."""
    import git

    argv = ["git", "-c", "user.name=AgentOS", "-c", "user.email=agentos@localhost", *args]
    status, out, err = git.Git(repo_dir).execute(
        argv, with_extended_output=True, with_exceptions=False, strip_newline_in_stdout=False
    )
    result = subprocess.CompletedProcess(argv, int(status or 0), str(out), str(err))
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise OperationFailed(
            f"git {args[0]} failed in {repo_dir}: {detail[-1] if detail else result.returncode}"
        )
    return result


def ensure_agent_files_excluded(repo: git.Repo) -> None:
    """Keep AgentOS's files in worktrees out of status, diffs and commits."""
    exclude = Path(repo.common_dir) / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text() if exclude.exists() else ""
    if AGENT_FILES_GLOB not in text.splitlines():
        with exclude.open("a") as fh:
            fh.write(
                ("" if text.endswith("\n") or not text else "\n")
                + "# AgentOS: context and feedback files in agent worktrees\n"
                + AGENT_FILES_GLOB
                + "\n"
            )


def tracked_changes(repo_dir: Path) -> list[str]:
    """Tracked files with uncommitted changes."""
    out = _git(repo_dir, "status", "--porcelain", "--untracked-files=no").stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def add_worktree(
    repo_dir: Path,
    path: Path,
    branch: str,
    base: str,
    sparse_paths: list[str] | None = None,
    admin_lock: AbstractContextManager[object] | None = None,
) -> None:
    """Create ``path`` on a new ``branch`` at ``base``; sparse when paths are given and the
    repository is large.

    Only registering the worktree takes ``admin_lock`` (concurrent ``git worktree add``s
    race on ``.git/worktrees``); checking out its files runs in parallel with others.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sparse = bool(sparse_paths) and _file_count(repo_dir, base) >= SPARSE_MIN_FILES
    with admin_lock or nullcontext():
        _git(repo_dir, "worktree", "add", "-q", "--no-checkout", "-b", branch, str(path), base)
    if sparse:
        _git(path, "sparse-checkout", "set", "--no-cone", *(sparse_paths or []))
    _git(path, "checkout", "-q", branch)


def _file_count(repo_dir: Path, rev: str) -> int:
    out = _git(repo_dir, "ls-tree", "-r", "--name-only", rev).stdout
    return out.count("\n")


def commit_all(worktree: Path, message: str, author: str) -> str | None:
    """Commit everything the agent changed; returns the commit, or None when nothing changed."""
    if not worktree.is_dir():
        return None
    sparse = _git(worktree, "sparse-checkout", "list", check=False).returncode == 0
    # In a sparse worktree, new files outside the sparse paths are the agent's work too.
    _git(worktree, "add", "-A", *(["--sparse"] if sparse else []))
    if _git(worktree, "diff", "--cached", "--quiet", check=False).returncode == 0:
        return None
    _git(
        worktree,
        "-c",
        f"user.name={author}",
        "-c",
        "user.email=agent@agentos.localhost",
        "commit",
        "-q",
        "--no-verify",
        "-m",
        message,
    )
    return _git(worktree, "rev-parse", "HEAD").stdout.strip()


def reset_to_head(worktree: Path) -> None:
    """Drop what is not committed (not ignored files): what a gate's checks left behind."""
    _git(worktree, "reset", "-q", "--hard", check=False)
    _git(worktree, "clean", "-fdq", check=False)


def remove_worktree(repo_dir: Path, path: Path) -> None:
    """Remove a worktree and its registration (its work must be committed first)."""
    if path.exists():
        _git(repo_dir, "worktree", "remove", "--force", "--force", str(path), check=False)
    _git(repo_dir, "worktree", "prune", check=False)


def commits_ahead(repo_dir: Path, branch: str, base: str) -> int:
    """Commits on ``branch`` since ``base``: 0 when the branch does not exist; -1 when git
    cannot tell (callers must then treat the branch as holding work)."""
    if not branch_exists(repo_dir, branch):
        return 0
    result = _git(repo_dir, "rev-list", "--count", f"{base}..{branch}", check=False)
    return int(result.stdout.strip()) if result.returncode == 0 else -1


def branch_exists(repo_dir: Path, branch: str) -> bool:
    return (
        _git(
            repo_dir, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False
        ).returncode
        == 0
    )


def delete_branch(repo_dir: Path, *branches: str) -> None:
    if branches:
        _git(repo_dir, "branch", "-D", *branches, check=False)


def head(repo_dir: Path) -> tuple[str | None, str]:
    """(the checked-out branch or None when detached, the HEAD commit)."""
    branch = _git(repo_dir, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    commit = _git(repo_dir, "rev-parse", "HEAD").stdout.strip()
    return (branch.stdout.strip() or None) if branch.returncode == 0 else None, commit


@dataclass
class MergeResult:
    merged: bool
    commit: str | None = None
    conflicts: list[str] = field(default_factory=list)
    conflicting_branch: str | None = None
    message: str = ""


def merge_branches(
    repo_dir: Path, target: str, branches: list[str], run_id: str, scratch: Path
) -> MergeResult:
    """Merge ``branches`` into ``target``, all or nothing.

    The branches are merged together in a scratch worktree first; the target moves only
    when every merge is clean (fast-forward when it can, else a merge commit). On a
    conflict nothing moves, the conflicting files are listed and every branch is kept.
    """
    with_work = [b for b in branches if commits_ahead(repo_dir, b, target) != 0]
    if not with_work:
        return MergeResult(True, None, message="no agent changed anything; nothing to merge")
    integration = f"agentos/{run_id}/merge"
    delete_branch(repo_dir, integration)
    _git(repo_dir, "worktree", "add", "-q", "-b", integration, str(scratch), target)
    try:
        for branch in with_work:
            result = _git(
                scratch, "merge", "--no-edit", "-m", f"agentos: merge {branch}", branch, check=False
            )
            if result.returncode != 0:
                conflicts = _git(
                    scratch, "diff", "--name-only", "--diff-filter=U", check=False
                ).stdout.split()
                _git(scratch, "merge", "--abort", check=False)
                remove_worktree(repo_dir, scratch)
                delete_branch(repo_dir, integration)
                return MergeResult(
                    False,
                    conflicts=conflicts,
                    conflicting_branch=branch,
                    message=f"{branch} conflicts with the others in: "
                    f"{', '.join(conflicts) or result.stderr.strip()}",
                )
        merged = _git(scratch, "rev-parse", "HEAD").stdout.strip()
    finally:
        remove_worktree(repo_dir, scratch)
    try:
        _advance(repo_dir, target, merged, integration)
    finally:
        delete_branch(repo_dir, integration)
    return MergeResult(True, merged, message=f"merged {', '.join(with_work)} into {target}")


def _advance(repo_dir: Path, target: str, merged: str, integration: str) -> None:
    checked_out, _ = head(repo_dir)
    if checked_out == target:
        # The user's checkout is on the target: a real merge keeps their working tree right.
        result = _git(repo_dir, "merge", "--no-edit", integration, check=False)
        if result.returncode != 0:
            _git(repo_dir, "merge", "--abort", check=False)
            raise OperationFailed(
                f"could not merge into {target} in {repo_dir}: "
                f"{(result.stderr or result.stdout).strip().splitlines()[-1:]} "
                "(the agent branches are kept)"
            )
        return
    old = _git(repo_dir, "rev-parse", f"refs/heads/{target}").stdout.strip()
    if _git(repo_dir, "merge-base", "--is-ancestor", old, merged, check=False).returncode != 0:
        raise OperationFailed(
            f"{target} moved during the run and is not checked out; "
            "merge the agent branches by hand (they are kept)"
        )
    _git(repo_dir, "update-ref", f"refs/heads/{target}", merged, old)


def prune(repo_dir: Path) -> None:
    _git(repo_dir, "worktree", "prune", check=False)


def common_repo(worktree: Path) -> Path | None:
    """The main repository a worktree belongs to, or None when it is not a worktree."""
    if not (worktree / ".git").exists():
        return None
    result = _git(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False)
    if result.returncode != 0:
        return None
    return Path(result.stdout.strip()).parent
