"""The trees a tests check runs in, made with git's plumbing and checked out outside the
agent's worktree.

- :func:`tree_of`: what a working tree holds now (committed, staged, unstaged, untracked;
  not what git ignores), as a git tree object, through a private copy of its index;
- :func:`compose`: a tree with some paths taken from another one (the judged tree: the
  agent's code with the base's tests and runner configuration);
- :class:`Scratch`: a detached git worktree of such a tree in a directory AgentOS owns,
  removed with its registration when the check is done.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agentos.errors import OperationFailed
from agentos.worktrees import repo as wt
from agentos.worktrees.repo import git_result as git  # AgentOS's own git commands

EMPTY_MODE = "0" * 6
NULL_SHA = "0" * 40


def _index_file(tree_dir: Path) -> Path | None:
    out = git(tree_dir, "rev-parse", "--path-format=absolute", "--git-path", "index", check=False)
    path = Path(out.stdout.strip())
    return path if out.returncode == 0 and path.is_file() else None


def tree_of(tree_dir: Path) -> str:
    """The git tree of ``tree_dir`` as it is now, untracked files included and ignored ones
    not, computed in a copy of its index (the real index is never touched)."""
    with tempfile.TemporaryDirectory(prefix="agentos-index-") as scratch:
        index = Path(scratch) / "index"
        real = _index_file(tree_dir)
        env = {"GIT_INDEX_FILE": str(index)}
        if real is not None:
            shutil.copyfile(real, index)  # its stat data: unchanged files are not re-read
        else:
            git(tree_dir, "read-tree", "HEAD", env=env)
        git(tree_dir, "add", "-A", "--", ".", env=env)
        return git(tree_dir, "write-tree", env=env).stdout.strip()


def commit_tree(repo: Path, tree: str) -> str:
    """The tree as a parentless commit (a detached worktree needs a commit)."""
    return git(repo, "commit-tree", tree, "-m", "agentos gate: judged tree").stdout.strip()


@dataclass(frozen=True)
class Entry:
    mode: str
    sha: str
    path: str


def entries(repo: Path, tree: str) -> dict[str, Entry]:
    """Every file of ``tree``, by path."""
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", tree).stdout
    found: dict[str, Entry] = {}
    for record in out.split("\0"):
        if not record:
            continue
        meta, _, path = record.partition("\t")
        mode, _, sha = meta.split(" ", 2)
        found[path] = Entry(mode, sha.split(" ")[-1], path)
    return found


def compose(repo: Path, onto: str, source: dict[str, Entry], paths: Iterable[str]) -> str:
    """``onto`` with each of ``paths`` as ``source`` has it: replaced, added back, or
    removed where ``source`` has no such file. Returns the new tree."""
    lines = []
    for path in sorted(set(paths)):
        entry = source.get(path)
        if entry is None:
            lines.append(f"{EMPTY_MODE} {NULL_SHA}\t{path}")
        else:
            lines.append(f"{entry.mode} {entry.sha}\t{path}")
    if not lines:
        return onto
    with tempfile.TemporaryDirectory(prefix="agentos-index-") as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        git(repo, "read-tree", onto, env=env)
        proc = subprocess.run(
            ["git", "update-index", "-z", "--index-info"],
            cwd=repo,
            env={**wt.git_env(), **env},
            input="\0".join(lines) + "\0",
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise OperationFailed(f"git update-index failed in {repo}: {proc.stderr.strip()}")
        return git(repo, "write-tree", env=env).stdout.strip()


class Scratch:
    """A detached worktree of ``commit`` at ``path``, for one check; :meth:`remove` takes it
    and its registration away (also when it was only half made)."""

    def __init__(self, repo: Path, path: Path, commit: str) -> None:
        self.repo, self.path, self.commit = repo, path, commit
        path.parent.mkdir(parents=True, exist_ok=True)
        with wt.repo_lock(repo):
            git(repo, "worktree", "add", "-q", "--detach", "--no-checkout", str(path), commit)
        git(path, "checkout", "-q", "--detach", commit)

    def remove(self) -> None:
        wt.remove_worktree(self.repo, self.path)
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
