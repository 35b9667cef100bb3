"""Before a run: what would stop it at once is checked where the caller sees it, and a
detached run is started in a background process.

The request reaches that process as data, after ``--``: a request that starts with ``-``
(``--help``, ``--detach``) is never read as an option. The process's pid is kept beside its
log, so that a run whose process ended before it recorded itself in state.db is known to
have failed to start (:func:`detached_running`), never left "starting" forever.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentos import worktrees as wt
from agentos._run_types import RunOptions
from agentos.errors import BadInput, RequestBlocked, check_request
from agentos.hub import Hub
from agentos.runs import new_run_id, pid_alive, process_start
from agentos.workspace import Workspace

PID_FILE = "orchestrator.pid"
# One argument of a command line holds at most 128 KiB (Linux's MAX_ARG_STRLEN): a request
# passed to the background run stays well below it.


def start_detached(
    ws: Workspace, request: str, repo: Path, options: RunOptions | None = None
) -> tuple[str, Path]:
    """Start a run in a background process; returns its id and the orchestrator's log.

    What would stop the run at once stops it here, where the caller sees it: a repository
    the run cannot work on, and a request the interview blocks (:class:`RequestBlocked`,
    with the questions), unless forced. The run is in state.db (and visible to ``runs
    show``) as soon as its orchestrator has checked the repository, within a second or so.
    """
    options = options or RunOptions()
    check_request(request)
    repo = repo.expanduser().resolve()
    check_repo(repo)
    check_agent(ws, options.agent)
    if not options.force:
        from agentos.interview import interview_in

        result = interview_in(ws, request, rewrite=False)
        if not result.passed:
            questions = [f"{q.axis}: {q.text}" for q in result.questions]
            raise RequestBlocked(
                f"the request is too vague to start (ambiguity {result.ambiguity:.3f}); "
                "answer these and run again, or use --force: " + " ".join(questions),
                questions,
            )
    run_id = options.run_id or new_run_id()
    log = ws.logs_dir / run_id / "orchestrator.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "agentos",
        "--workspace",
        str(ws.root),
        "run",
        "--repo",
        str(repo),
        "--run-id",
        run_id,
        "--json",
    ]
    if options.force:
        argv.append("--force")
    if options.agent:
        argv += ["--agent", options.agent]
    if not options.merge:
        argv.append("--no-merge")
    argv += ["--", request]  # data, never an option
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True
        )
    (log.parent / PID_FILE).write_text(f"{proc.pid} {process_start(proc.pid) or ''}\n")
    return run_id, log


def detached_running(ws: Workspace, run_id: str) -> bool:
    """Whether the background process :func:`start_detached` started for ``run_id`` still
    runs. False once it has ended, and when nothing records it: a run not in state.db whose
    process is not running failed to start (its log says why)."""
    try:
        pid, _, started = (ws.logs_dir / run_id / PID_FILE).read_text().partition(" ")
        return pid_alive(int(pid), started.strip() or None)
    except (OSError, ValueError):
        return False


def check_repo(repo_dir: Path) -> tuple[str, str]:
    """Check that a run can work on ``repo_dir``; return (target branch, base commit).

    Agents branch from HEAD and their work is merged into the checked-out branch, so the
    repository needs a commit, a checked-out branch and no uncommitted changes to tracked
    files (which a merge could otherwise overwrite).
    """
    if not repo_dir.is_dir():
        raise BadInput("repository not found", file=repo_dir, field="--repo")
    repo = wt.open_repo(repo_dir)
    if Path(repo.working_tree_dir or "").resolve() != repo_dir:
        raise BadInput("give the repository's top-level directory", file=repo_dir, field="--repo")
    branch, base = wt.head(repo_dir)
    if branch is None:
        raise BadInput(
            "HEAD is detached: check out the branch to merge into",
            file=repo_dir,
            field="--repo",
        )
    wt.refuse_uncommitted(repo_dir)
    wt.ensure_agent_files_excluded(repo)
    return branch, base


def check_agent(ws: Workspace, ref: str | None) -> None:
    """``--agent NAME[@VERSION]`` names an installed package (else :class:`NotFound`)."""
    if ref:
        try:
            Hub(ws.hub_dir).get(ref)
        except BadInput as exc:
            raise type(exc)(exc.message, field="--agent") from None
