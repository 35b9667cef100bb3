"""``agentos gc``: what a crashed orchestrator left behind, cleaned up.

Runs whose orchestrator is gone are marked ``aborted`` (their agents' work committed to
their branches first); where the state is shared, only this host's runs are judged by their
process ids, and another host's live runs are aborted only once that host has been silent
(no heartbeat, :mod:`agentos.run.liveness`) for longer than ``AGENTOS_HOST_SILENT_AFTER``.
Orphaned AgentOS tmux sessions are ended, orphaned worktrees are removed and pruned, and
leftovers of interrupted hub installs are deleted. AgentOS's own locks (hub, receipts) are
``flock`` locks, which the kernel frees when their holder dies, so a crash can never leave
one held; git's locks inside an agent's worktree go with it.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from agentos.errors import AgentOSError
from agentos.run.sessions import SESSION_PREFIX, Sessions
from agentos.run.store import (
    ACTIVE,
    UNFINISHED,
    AgentStatus,
    RunRecord,
    RunStatus,
    RunStore,
    pid_alive,
)
from agentos.state.host import SILENT_ENV, silent_after
from agentos.workspace.files import RunFiles, runs_root
from agentos.workspace.layout import Workspace
from agentos.worktrees import landing
from agentos.worktrees import repo as wt

T = TypeVar("T")
RECENT = 24 * 3600  # ended runs whose orchestrator may still be tearing down


@dataclass
class GcReport:
    aborted_runs: list[str] = field(default_factory=list)
    killed_sessions: list[str] = field(default_factory=list)
    removed_worktrees: list[str] = field(default_factory=list)
    saved_commits: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # leftovers gc could not clean

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "aborted_runs": self.aborted_runs,
            "killed_sessions": self.killed_sessions,
            "removed_worktrees": self.removed_worktrees,
            "saved_commits": self.saved_commits,
            "problems": self.problems,
        }

    @property
    def empty(self) -> bool:
        return not any(self.as_dict().values())


def collect_garbage(ws: Workspace, store: RunStore | None = None) -> GcReport:
    """Clean up after orchestrators that died. A step that fails is reported in
    ``problems`` and the rest still runs, so one broken leftover never blocks a new run.
    ``store``: the caller's connection to the state (kept open), else one of its own."""
    report = GcReport()
    own = store is None
    store = RunStore(ws) if store is None else store
    try:
        now = time.time()
        runs = {r.id: r for r in store.list(statuses=ACTIVE, limit=10_000)}
        runs.update({r.id: r for r in store.list(limit=200) if (r.ended_at or 0) > now - RECENT})
        # A run is live while its orchestrator lives, whatever its status says: a cancelled
        # run is still tearing down until its process ends. Another host's run is live
        # while that host heartbeats: its pids mean nothing here.
        beats = store.heartbeats() if store.shared else {}
        silence = silent_after()
        live_runs = set()
        for run_id, r in runs.items():
            if store.local(r):
                if pid_alive(r.pid, r.pid_start):
                    live_runs.add(run_id)
            elif now - _last_seen(r, beats) <= silence:
                live_runs.add(run_id)
        for run in runs.values():
            if run.id in live_runs or run.status not in ACTIVE:
                continue
            if store.local(run):
                _abort(ws, store, run, report)
            else:
                _abort_silent(ws, store, run, _last_seen(run, beats), report)
        _orphan_sessions(ws, live_runs, report)
        _orphan_worktrees(ws, live_runs, report)
        from agentos.sandbox.limits import reap_orphans

        report.killed_sessions.extend(f"control group {name}" for name in reap_orphans())
        staging = ws.hub_dir / ".staging"
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        if own:
            store.close()
    return report


def _abort(ws: Workspace, store: RunStore, run: RunRecord, report: GcReport) -> None:
    sessions = Sessions(ws.root)
    saved: list[str] = []
    for agent in run.agents:
        if agent.session and sessions.kill(agent.session):
            report.killed_sessions.append(agent.session)
        check = _kill_check(RunFiles.of(ws, run.id).agent(agent.agent).check_pid)
        if check:
            report.killed_sessions.append(f"gate check of {agent.agent} ({check})")
        if agent.worktree and Path(agent.worktree).exists():
            message = (
                f"agentos: {agent.agent} (run {run.id}), saved by gc after the orchestrator died\n"
            )
            # Past "running", the agent's work is already on its branch: what is in the tree
            # now is what a gate check wrote, never the agent's work.
            commit = _save_and_remove(
                Path(agent.worktree),
                message,
                agent.agent,
                report,
                save=agent.status in (AgentStatus.PENDING, AgentStatus.RUNNING),
            )
            if commit:
                saved.append(f"{agent.branch}@{commit[:12]}")
        if not (run.status is RunStatus.MERGING and agent.status is AgentStatus.PASSED):
            store.update_agent(run.id, agent.agent, status=AgentStatus.ABORTED)
    status, message = (
        RunStatus.ABORTED,
        ("the orchestrator died; gc aborted the run (agents' work kept on their branches)"),
    )
    repo = Path(run.repo)
    if repo.is_dir():
        _tolerant(report, "prune worktrees", wt.prune, repo)
        if run.status is RunStatus.MERGING:
            status, message = _merge_cut_short(repo, run, report)
    store.update(run.id, status=status, ended_at=time.time(), message=message)
    report.aborted_runs.append(run.id)
    report.saved_commits.extend(saved)
    from agentos.receipts import write_receipt

    write_receipt(
        ws,
        "run",
        {"status": status, "by": "gc", "message": message, "saved_commits": saved},
        run_id=run.id,
        about=run.request,
    )


def _last_seen(run: RunRecord, beats: dict[str, float]) -> float:
    """When the host of ``run`` was last heard of: its heartbeat, or the run's start."""
    return beats.get(run.host or "", run.started_at or run.created_at)


def _abort_silent(
    ws: Workspace, store: RunStore, run: RunRecord, seen: float, report: GcReport
) -> None:
    """Mark a live run of a host that went silent ``aborted``, naming the host. Its
    sessions, worktrees and branches are on that host: they are its own gc's to clean when
    it comes back (they are read as that host's, never here)."""
    silent = time.time() - seen
    message = (
        f"host {run.host} went silent: no heartbeat for {silent:.0f}s (over "
        f"{silent_after():g}s, {SILENT_ENV}); aborted by gc on {store.host}. What its agents "
        "did is on that host, on their branches, for its gc to keep when it is back"
    )
    if not store.claim(run.id, ACTIVE, RunStatus.ABORTED, ended_at=time.time(), message=message):
        return  # another machine aborted it first, or its host came back and ended it
    for agent in run.agents:
        if agent.status in UNFINISHED:
            store.update_agent(run.id, agent.agent, status=AgentStatus.ABORTED)
    report.aborted_runs.append(run.id)
    from agentos.receipts import write_receipt

    write_receipt(
        ws,
        "run",
        {"status": RunStatus.ABORTED, "by": "gc", "host": run.host, "message": message},
        run_id=run.id,
        about=run.request,
    )


def _merge_cut_short(repo: Path, run: RunRecord, report: GcReport) -> tuple[RunStatus, str]:
    """The status of a run whose process died while merging: ``succeeded`` when its
    commits had landed on the target (its branches then go out of sight, as after any
    merge), ``ready`` when nothing landed and every gate had passed (``runs merge`` lands
    it), else ``aborted``."""
    from agentos.run import review

    _tolerant(
        report,
        "delete the merge branch",
        wt.delete_branch,
        repo,
        landing.integration_branch(run.id),
    )
    agents = [(a.agent, a.branch or "") for a in run.agents]
    if review.landed_commits(repo, run):
        _tolerant(report, "archive merged branches", review.archive_branches, repo, run.id, agents)
        return RunStatus.SUCCEEDED, "the merge had landed when its process died; gc recorded it"
    if run.agents and all(a.status is AgentStatus.PASSED and a.gated_commit for a in run.agents):
        return RunStatus.READY, (
            f"the merge was cut short before anything landed; `agentos runs merge {run.id}` "
            "lands it"
        )
    return (
        RunStatus.ABORTED,
        "the process died while merging; nothing landed (work kept on branches)",
    )


def _kill_check(pid_file: Path) -> str | None:
    """End the gate check a dead orchestrator left running (its process group, when it is
    still the process that was recorded); what was ended, or None."""
    try:
        pid_text, _, started = pid_file.read_text().strip().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    if pid <= 1 or not pid_alive(pid, None if started in ("", "-") else started):
        return None
    from agentos.shared.process import kill_group

    kill_group(pid)
    return f"process group {pid}"


def _save_and_remove(
    worktree: Path, message: str, author: str, report: GcReport, *, save: bool = True
) -> str | None:
    """Commit what is in a worktree to its branch (with ``save``), then remove it; a
    worktree whose work cannot be committed is kept (and reported), never deleted."""
    repo = wt.common_repo(worktree)
    commit: str | None = None
    if repo is None:
        report.problems.append(
            f"kept {worktree}: it is no longer a worktree of a repository (was the repository "
            "deleted?); look at it and delete it yourself"
        )
        return None
    if worktree.name == wt.MERGE_DIR:  # a merge cut short: nothing of an agent's to keep
        branch = _tolerant(report, "read the merge branch", wt.head, worktree)
        _tolerant(report, "remove the merge worktree", wt.remove_worktree, repo, worktree)
        if branch and branch[0]:
            wt.delete_branch(repo, branch[0])
    else:
        try:
            wt.restore_gitfile(repo, worktree)
            commit = wt.commit_all(worktree, message, author) if save else None
        except AgentOSError as exc:
            report.problems.append(f"kept {worktree}: its work could not be committed ({exc})")
            return None
        _tolerant(report, "remove a worktree", wt.remove_worktree, repo, worktree)
    shutil.rmtree(worktree, ignore_errors=True)
    report.removed_worktrees.append(str(worktree))
    return commit


def _tolerant(report: GcReport, what: str, func: Callable[..., T], *args: Any) -> T | None:
    try:
        return func(*args)
    except AgentOSError as exc:
        report.problems.append(f"could not {what}: {exc}")
        return None


def _orphan_sessions(ws: Workspace, live_runs: set[str], report: GcReport) -> None:
    sessions = Sessions(ws.root)
    for name in sessions.names():
        run_part = name.removeprefix(SESSION_PREFIX)
        orphan = not any(run_part.startswith(run_id + "-") for run_id in live_runs)
        if orphan and sessions.kill(name):
            report.killed_sessions.append(name)


_RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


def _orphan_worktrees(ws: Workspace, live_runs: set[str], report: GcReport) -> None:
    if ws.worktrees_dir.is_dir():
        for run_dir in ws.worktrees_dir.iterdir():
            if run_dir.name in live_runs or not run_dir.is_dir():
                continue
            for worktree in run_dir.iterdir():
                _save_and_remove(worktree, "agentos: work saved by gc\n", worktree.name, report)
            with suppress(OSError):
                run_dir.rmdir()
    runs_dir = runs_root(ws)
    for run_dir in runs_dir.iterdir() if runs_dir.is_dir() else []:
        if run_dir.name not in live_runs:
            shutil.rmtree(run_dir, ignore_errors=True)
    # The gate's scratch trees of runs that ended without their teardown (their git
    # registrations go with the next `git worktree prune`); a `gate run`'s own are its own.
    gate_dir = ws.state_dir / "gate"
    for run_dir in gate_dir.iterdir() if gate_dir.is_dir() else []:
        if _RUN_ID.fullmatch(run_dir.name) and run_dir.name not in live_runs:
            shutil.rmtree(run_dir, ignore_errors=True)
