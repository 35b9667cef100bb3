"""Git worktrees and branches for agents (through gitpython).

Every agent works on its own branch ``agentos/<run-id>/<agent>`` in its own worktree.
Its work is committed to that branch before the worktree is removed, and the branches of a
run are merged together in a separate integration worktree first, so the target branch
moves only when the whole task force merges cleanly.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from agentos.errors import BadInput, MissingTool, OperationFailed

if TYPE_CHECKING:
    import git


# Files AgentOS writes into a worktree for the agent; never committed, never merged.
AGENT_FILES_GLOB = "/AGENTOS_*.md"
SPARSE_MIN_FILES = 2000
MERGE_DIR = "_merge"  # a run's scratch worktree for merging its agents' branches together
LOCK_WAIT = 300.0  # seconds to wait for another AgentOS process's git administration


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
            "not a git repository",
            file=path,
            field="--repo",
            hint="run `git init` and commit first",
        ) from None
    if not repo.head.is_valid():
        raise BadInput("the repository has no commit yet", file=path, field="--repo")
    return repo


# What AgentOS's own git commands see of its environment: where to find programs, whose
# home (the user's git configuration, which may hold the LFS filters), the locale. Never
# the secrets a run was started with, nor GIT_* variables that would point git elsewhere.
_GIT_ENV_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")


def git_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in _GIT_ENV_KEEP if k in os.environ}
    env.setdefault("PATH", os.defpath)
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def run_git(repo_dir: Path, *args: str) -> str:
    """A git command of AgentOS's own in ``repo_dir`` (see :func:`_git`); its output.
    A failure is :class:`OperationFailed` naming the command."""
    return git_result(repo_dir, *args).stdout


def git_result(
    repo_dir: Path,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a git command in ``repo_dir``: no hooks, no file-system monitor, no signing
    program, with :func:`git_env` (so a filter or program a configuration names does not
    get the secrets of the run) and ``env`` added to it."""
    try:
        result = subprocess.run(
            _argv(args),
            cwd=repo_dir,
            env={**git_env(), **(env or {})},
            input=input,
            stdin=subprocess.DEVNULL if input is None else None,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            check=False,
        )
    except FileNotFoundError as exc:
        missing = "git is not installed" if exc.filename == "git" else str(exc)
        raise MissingTool(f"{missing} (or {repo_dir} is gone)", field="git") from None
    if check and result.returncode != 0:
        raise _failed(repo_dir, args, result)
    return result


def git_bytes(
    repo_dir: Path, *args: str, data: bytes, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """As :func:`git_result` (check=False), with ``data`` on git's stdin and bytes back."""
    try:
        return subprocess.run(
            _argv(args),
            cwd=repo_dir,
            env={**git_env(), **(env or {})},
            input=data,
            capture_output=True,
            check=False,
        )
    except FileNotFoundError as exc:
        missing = "git is not installed" if exc.filename == "git" else str(exc)
        raise MissingTool(f"{missing} (or {repo_dir} is gone)", field="git") from None


def _argv(args: tuple[str, ...]) -> list[str]:
    return [
        "git",
        "-c",
        "user.name=AgentOS",
        "-c",
        "user.email=agentos@localhost",
        "-c",
        f"core.hooksPath={os.devnull}",  # AgentOS's own git operations never run hooks,
        "-c",
        "core.fsmonitor=false",  # nor a file-system monitor a configuration names,
        "-c",
        "commit.gpgSign=false",  # nor a signing program,
        "-c",
        "maintenance.auto=false",  # nor start the repository's maintenance at every
        *args,  # commit or merge (a landing asks for it once: maintain())
    ]


def _failed(
    repo_dir: Path, args: tuple[str, ...], result: subprocess.CompletedProcess[str]
) -> OperationFailed:
    detail = (result.stderr or result.stdout).strip().splitlines()
    # The subcommand, past any `-c key=value` options given before it.
    words = iter(args)
    command = next((a for a in words if not (a == "-c" and next(words, None))), "?")
    return OperationFailed(
        f"git {command} failed in {repo_dir}: {detail[-1] if detail else result.returncode}"
    )


# --- one writer of a repository's refs and worktrees at a time ------------------------------


class _RepoLock:
    """A re-entrant lock on one repository, for the threads of this process and the other
    AgentOS processes: a ``threading.RLock`` around an ``flock`` of the repository's git
    directory itself (so that nothing is written into the user's repository for it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.thread_lock = threading.RLock()
        self.depth = 0
        self.fd: int | None = None

    @contextmanager
    def held(self) -> Iterator[None]:
        with self.thread_lock:
            try:
                if self.depth == 0:
                    self.fd = _flock(self.path)
                self.depth += 1
                yield
            finally:
                self.depth = max(0, self.depth - 1) if self.fd is not None else 0
                if self.depth == 0 and self.fd is not None:
                    os.close(self.fd)  # releases the flock
                    self.fd = None


def _flock(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise OperationFailed(
                    f"{path}: another AgentOS process has held this repository for over "
                    f"{LOCK_WAIT:.0f} s (`agentos runs list` shows the runs); if one is stuck, "
                    "cancel it"
                ) from None
            time.sleep(0.02)
            continue
        except BaseException:
            os.close(fd)
            raise
        return fd


_LOCKS: dict[Path, _RepoLock] = {}
_LOCKS_GUARD = threading.Lock()


def git_dir(repo_dir: Path) -> Path:
    """The repository's common git directory (``.git`` of the main checkout)."""
    dot_git = repo_dir / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        return dot_git.resolve()
    out = git_result(repo_dir, "rev-parse", "--path-format=absolute", "--git-common-dir").stdout
    return Path(out.strip()).resolve()


@contextmanager
def repo_lock(repo_dir: Path) -> Iterator[None]:
    """Hold the repository while changing its refs, worktrees or checked-out branch, so
    that concurrent runs on one repository take turns: git itself fails a second writer
    ("cannot lock ref 'HEAD'"), sometimes half way through a merge in the user's tree."""
    path = git_dir(repo_dir)
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(path, _RepoLock(path))
    with lock.held():
        yield


def checkout_state(repo_dir: Path) -> tuple[Path, Path, str, str | None] | None:
    """One git process's answer for a repository about to be run on: its top-level
    directory, its common git directory, the HEAD commit and the checked-out branch (None
    when HEAD is detached); None when git cannot say all of it (not a repository, no
    commit yet: :func:`open_repo` then says which)."""
    result = git_result(
        repo_dir,
        "rev-parse",
        "--path-format=absolute",
        "--show-toplevel",
        "--git-common-dir",
        "HEAD",
        "--symbolic-full-name",
        "HEAD",
        check=False,
    )
    lines = result.stdout.splitlines()
    if result.returncode != 0 or len(lines) != 4:
        return None
    top, common, commit, ref = lines
    branch = ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None
    return Path(top), Path(common), commit, branch


def ensure_agent_files_excluded(common_dir: Path) -> None:
    """Keep AgentOS's files in worktrees out of status, diffs and commits (``common_dir``:
    the repository's common git directory)."""
    exclude = Path(common_dir) / "info" / "exclude"
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


def refuse_uncommitted(repo_dir: Path, where: str = "") -> None:
    """:class:`BadInput` when tracked files of ``repo_dir`` have uncommitted changes, which
    a merge could otherwise overwrite."""
    dirty = tracked_changes(repo_dir)
    if dirty:
        raise BadInput(
            f"uncommitted changes ({', '.join(dirty[:5])}){' ' + where if where else ''}: "
            "commit or stash them first, so that merging the agents' work cannot lose yours",
            file=repo_dir,
            field="--repo",
        )


def log_grep(repo_dir: Path, revs: str, text: str) -> list[str]:
    """Commits in ``revs`` whose message holds ``text`` (a fixed string), newest first."""
    out = git_result(
        repo_dir, "log", "--format=%H", "--fixed-strings", f"--grep={text}", revs, check=False
    )
    return out.stdout.split() if out.returncode == 0 else []


def tracked_changes(repo_dir: Path) -> list[str]:
    """Tracked files with uncommitted changes."""
    out = git_result(repo_dir, "status", "--porcelain", "--untracked-files=no").stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def add_worktree(
    repo_dir: Path,
    path: Path,
    branch: str,
    base: str,
    sparse_paths: list[str] | None = None,
) -> None:
    """Create ``path`` on a new ``branch`` at ``base``; sparse when paths are given and the
    repository is large.

    Registering the worktree (and its sparse patterns, which write the repository's
    configuration) holds :func:`repo_lock`; checking out its files runs in parallel."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sparse = bool(sparse_paths) and _file_count(repo_dir, base) >= SPARSE_MIN_FILES
    with repo_lock(repo_dir):
        git_result(
            repo_dir, "worktree", "add", "-q", "--no-checkout", "-b", branch, str(path), base
        )
        if sparse:
            git_result(path, "sparse-checkout", "set", "--no-cone", *(sparse_paths or []))
    git_result(path, "checkout", "-q", branch)


def _file_count(repo_dir: Path, rev: str) -> int:
    out = git_result(repo_dir, "ls-tree", "-r", "--name-only", rev).stdout
    return out.count("\n")


def admin_dir(worktree: Path) -> Path:
    """A worktree's own git directory (``.git/worktrees/<name>``), from its ``.git`` file:
    call it when AgentOS has just made the worktree, before an agent could change that."""
    text = (worktree / ".git").read_text(encoding="utf-8").strip()
    return Path(text.removeprefix("gitdir:").strip())


def restore_gitfile(repo_dir: Path, worktree: Path) -> bool:
    """Put back a worktree's ``.git`` file as git made it, before AgentOS runs git there:
    an agent can rewrite it (to point AgentOS's commit at the main repository, or replace
    it with a repository of its own). The right content comes from the repository's side
    of the worktree (its admin directory, which the agent cannot write). True when it had
    changed (or could not be verified and was left alone: False)."""
    common = git_dir(repo_dir)  # (no git process for a main checkout's .git folder)
    dot_git = worktree / ".git"
    admin = next(
        (
            d
            for d in sorted((common / "worktrees").glob("*"))
            if (d / "gitdir").is_file()
            and Path((d / "gitdir").read_text().strip()) in (dot_git, dot_git.resolve())
        ),
        None,
    )
    if admin is None:
        return False
    expected = f"gitdir: {admin}\n"
    try:
        if dot_git.is_file() and not dot_git.is_symlink() and dot_git.read_text() == expected:
            return False
    except OSError:
        pass
    if dot_git.is_dir() and not dot_git.is_symlink():
        import shutil

        shutil.rmtree(dot_git)
    else:
        dot_git.unlink(missing_ok=True)
    dot_git.write_text(expected)
    return True


def commit_all(worktree: Path, message: str, author: str) -> str | None:
    """Commit everything the agent changed; returns the commit, or None when nothing changed."""
    if not worktree.is_dir():
        return None
    # In a sparse worktree, new files outside the sparse paths are the agent's work too:
    # `add --sparse` takes them (and is plain `add` in a worktree that is not sparse). A git
    # before 2.34 has no --sparse, and its `add` takes them without it.
    add = ("add", "-A", "--sparse")
    added = git_result(worktree, *add, check=False)
    if added.returncode == _USAGE:
        git_result(worktree, *add[:2])
    elif added.returncode != 0:
        raise _failed(worktree, add, added)
    return commit_staged(worktree, message, author) or None


_USAGE = 129  # git's exit code for an option it does not know


def commit_staged(worktree: Path, message: str, author: str) -> str:
    """Commit what is staged (nothing staged: no commit, ""); return the commit."""
    if git_result(worktree, "diff", "--cached", "--quiet", check=False).returncode == 0:
        return ""
    git_result(
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
    return git_result(worktree, "rev-parse", "HEAD").stdout.strip()


def to_commit(worktree: Path) -> list[str]:
    """Make the worktree exactly its HEAD commit, so that a gate judges what would land:
    changes dropped, and every file that is not in the commit removed, those git ignores
    included (build output, caches, ``__pycache__``), but AgentOS's own ``AGENTOS_*.md``.
    Returns the paths removed."""
    git_result(worktree, "reset", "-q", "--hard", check=False)
    removed = git_result(worktree, "clean", "-ffdx", "-e", AGENT_FILES_GLOB, check=False).stdout
    return [
        line.removeprefix("Removing ").rstrip("/")
        for line in removed.splitlines()
        if line.startswith("Removing ")
    ]


def touches(repo_dir: Path, base: str, commit: str, path: str) -> bool:
    """Whether ``commit`` changes ``path`` against ``base``."""
    out = git_result(repo_dir, "diff", "--name-only", base, commit, "--", path, check=False).stdout
    return bool(out.strip())


def new_gitlinks(repo_dir: Path, base: str, commit: str) -> list[str]:
    """Paths that ``commit`` records as a nested repository (a gitlink) and ``base`` did
    not: a repository an agent made inside its worktree lands as a pointer to a commit the
    target does not have, never as its files."""
    if commit == base:  # no work: nothing new
        return []
    out = git_result(repo_dir, "diff", "--raw", "--no-renames", base, commit, check=False).stdout
    found = []
    for line in out.splitlines():
        meta, _, path = line.partition("\t")
        fields = meta.split()
        if len(fields) >= 2 and fields[1] == "160000" and fields[0] != ":160000":
            found.append(path)
    return found


def reset_to_head(worktree: Path) -> None:
    """Drop what is not committed (not ignored files): what a gate's checks left behind."""
    git_result(worktree, "reset", "-q", "--hard", check=False)
    git_result(worktree, "clean", "-fdq", check=False)


def remove_worktree(repo_dir: Path, path: Path) -> None:
    """Remove a worktree and its registration (its work must be committed first)."""
    with repo_lock(repo_dir):
        if path.exists():
            git_result(repo_dir, "worktree", "remove", "--force", "--force", str(path), check=False)
        git_result(repo_dir, "worktree", "prune", check=False)


def branch_tips(repo_dir: Path, branches: Iterable[str]) -> dict[str, str]:
    """The commit each of ``branches`` points at, for those that exist: one git process
    for all of them. :class:`OperationFailed` when git cannot tell."""
    wanted = {f"refs/heads/{b}": b for b in branches if b}
    if not wanted:
        return {}
    listed = run_git(repo_dir, "for-each-ref", "--format=%(objectname) %(refname)", *wanted)
    tips = {}
    for line in listed.splitlines():
        commit, _, ref = line.partition(" ")
        if ref in wanted:  # a pattern matches the refs below it too: exact names only
            tips[wanted[ref]] = commit
    return tips


def branch_exists(repo_dir: Path, branch: str) -> bool:
    return (
        git_result(
            repo_dir, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", check=False
        ).returncode
        == 0
    )


def delete_unmoved(repo_dir: Path, tips: Mapping[str, str]) -> bool:
    """Delete each branch of ``tips`` that still points at its commit there, all or none
    (one ``git update-ref`` transaction: a branch that moved, or is gone, deletes none);
    whether they were deleted."""
    if not tips:
        return True
    # A symbolic ref is deleted itself, never the branch it names (--no-deref), as `git
    # branch -D` does; a branch a worktree has checked out is not deleted here (git
    # branch -D refuses it, update-ref would not).
    lines = "".join(f"delete refs/heads/{b} {tip}\n" for b, tip in tips.items())
    with repo_lock(repo_dir):
        if _checked_out_anywhere(repo_dir, tips):
            return False
        done = git_result(repo_dir, "update-ref", "--no-deref", "--stdin", input=lines, check=False)
        if done.returncode != 0:
            # git made the folders of a branch that is gone to lock it, and leaves them.
            heads = git_dir(repo_dir) / "refs" / "heads"
            for branch in tips:
                folder = (heads / branch).parent
                while folder != heads and folder.is_relative_to(heads):
                    try:
                        folder.rmdir()  # only an empty one: it holds no branch
                    except OSError:
                        break
                    folder = folder.parent
    return done.returncode == 0


def maintain(repo_dir: Path) -> None:
    """What a commit of the user's own does after it: ``git maintenance run --auto``, as the
    repository's settings say (mostly nothing; a gc it starts goes to the background).
    AgentOS's own commits and merges do not start it (:func:`_argv`): a landing asks once."""
    git_result(repo_dir, "maintenance", "run", "--auto", "--quiet", check=False)


def _checked_out_anywhere(repo_dir: Path, branches: Iterable[str]) -> bool:
    """Whether the main checkout or a worktree has one of ``branches`` checked out (their
    HEAD files, read: no git process). True when one cannot be read."""
    common = git_dir(repo_dir)
    wanted = {f"ref: refs/heads/{b}" for b in branches}
    heads = [common / "HEAD", *(common / "worktrees").glob("*/HEAD")]
    for head_file in heads:
        try:
            if head_file.read_text(encoding="utf-8", errors="replace").strip() in wanted:
                return True
        except FileNotFoundError:
            continue
        except OSError:
            return True
    return False


def delete_branch(repo_dir: Path, *branches: str) -> bool:
    """Delete ``branches``; whether git deleted every one."""
    if not branches:
        return True
    with repo_lock(repo_dir):
        return git_result(repo_dir, "branch", "-D", *branches, check=False).returncode == 0


def head(repo_dir: Path) -> tuple[str | None, str]:
    """(the checked-out branch or None when detached, the HEAD commit)."""
    commit = git_result(repo_dir, "rev-parse", "HEAD").stdout.strip()
    return checked_out(repo_dir), commit


def checked_out(repo_dir: Path) -> str | None:
    """The checked-out branch, or None when HEAD is detached."""
    branch = git_result(repo_dir, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return (branch.stdout.strip() or None) if branch.returncode == 0 else None


def archive_ref(run_id: str, agent: str) -> str:
    """Where an agent's branch is kept out of sight once its run is merged or discarded, so
    the commits its receipts name (every attempt) stay in the repository until pruned."""
    return f"refs/agentos/runs/{run_id}/{agent}"


def archive_branch(repo_dir: Path, branch: str, ref: str) -> None:
    """Move ``branch`` to the hidden ``ref`` (and delete the branch)."""
    with repo_lock(repo_dir):
        if branch_exists(repo_dir, branch):
            git_result(repo_dir, "update-ref", ref, f"refs/heads/{branch}")
            delete_branch(repo_dir, branch)


def refs_under(repo_dir: Path, prefix: str) -> list[tuple[str, float]]:
    """Every ref under ``prefix`` with its commit time (seconds since the epoch)."""
    out = git_result(
        repo_dir,
        "for-each-ref",
        "--format=%(refname)%09%(committerdate:unix)",
        prefix,
        check=False,
    ).stdout
    found = []
    for line in out.splitlines():
        name, _, when = line.partition("\t")
        found.append((name, float(when or 0)))
    return found


def delete_refs(repo_dir: Path, *refs: str) -> None:
    with repo_lock(repo_dir):
        for ref in refs:
            git_result(repo_dir, "update-ref", "-d", ref, check=False)


def diff(repo_dir: Path, base: str, commit: str, *, stat: bool = False) -> str:
    """``git diff base commit`` (``--stat`` with ``stat``), as text."""
    args = ["--stat"] if stat else []
    return git_result(
        repo_dir, "-c", "core.quotepath=off", "diff", "--no-ext-diff", *args, base, commit
    ).stdout


def rev(repo_dir: Path, name: str) -> str | None:
    """The commit ``name`` names, or None."""
    result = git_result(
        repo_dir, "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", check=False
    )
    return result.stdout.strip() or None if result.returncode == 0 else None


def prune(repo_dir: Path) -> None:
    with repo_lock(repo_dir):
        git_result(repo_dir, "worktree", "prune", check=False)


def common_repo(worktree: Path) -> Path | None:
    """The main repository a worktree belongs to, or None when it is not a worktree."""
    if not (worktree / ".git").exists():
        return None
    result = git_result(
        worktree, "rev-parse", "--path-format=absolute", "--git-common-dir", check=False
    )
    if result.returncode != 0:
        return None
    return Path(result.stdout.strip()).parent
