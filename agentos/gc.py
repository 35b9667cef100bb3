"""``agentos gc``: what a crashed orchestrator left behind, cleaned up.

Runs whose orchestrator is gone are marked ``aborted`` (their agents' work committed to
their branches first), orphaned AgentOS tmux sessions are ended, orphaned worktrees are
removed and pruned, and leftovers of interrupted hub installs are deleted. AgentOS's own
locks (hub, receipts) are ``flock`` locks, which the kernel frees when their holder dies,
so a crash can never leave one held; git's locks inside an agent's worktree go with it.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from agentos import worktrees as wt
from agentos.runs import ACTIVE, RunStore, pid_alive
from agentos.sessions import SESSION_PREFIX, Sessions
from agentos.workspace import Workspace


@dataclass
class GcReport:
    aborted_runs: list[str] = field(default_factory=list)
    killed_sessions: list[str] = field(default_factory=list)
    removed_worktrees: list[str] = field(default_factory=list)
    saved_commits: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "aborted_runs": self.aborted_runs,
            "killed_sessions": self.killed_sessions,
            "removed_worktrees": self.removed_worktrees,
            "saved_commits": self.saved_commits,
        }

    @property
    def empty(self) -> bool:
        return not any(self.as_dict().values())


def collect_garbage(ws: Workspace) -> GcReport:
    report = GcReport()
    store = RunStore(ws)
    try:
        live_runs = set()
        repos: set[str] = set()
        for run in store.list(statuses=ACTIVE, limit=10_000):
            if pid_alive(run.pid):
                live_runs.add(run.id)
                continue
            sessions = Sessions(ws.root)
            for agent in run.agents:
                if agent.session and sessions.kill(agent.session):
                    report.killed_sessions.append(agent.session)
                if agent.worktree and Path(agent.worktree).exists():
                    commit = wt.commit_all(
                        Path(agent.worktree),
                        f"agentos: {agent.agent} (run {run.id}), saved by gc after the "
                        "orchestrator died\n",
                        agent.agent,
                    )
                    if commit:
                        report.saved_commits.append(f"{agent.branch}@{commit[:12]}")
                    wt.remove_worktree(Path(run.repo), Path(agent.worktree))
                    report.removed_worktrees.append(agent.worktree)
                store.update_agent(run.id, agent.agent, status="aborted")
            store.update(
                run.id,
                status="aborted",
                ended_at=time.time(),
                message="the orchestrator died; gc aborted the run "
                "(agents' work kept on their branches)",
            )
            report.aborted_runs.append(run.id)
            repos.add(run.repo)
            _receipt(ws, run.id, report)
        _orphan_sessions(ws, live_runs, report)
        _orphan_worktrees(ws, live_runs, report)
        for repo in repos:
            if Path(repo).is_dir():
                wt.prune(Path(repo))
        staging = ws.hub_dir / ".staging"
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        store.close()
    return report


def _receipt(ws: Workspace, run_id: str, report: GcReport) -> None:
    from agentos.receipts import write_receipt

    write_receipt(
        ws,
        "run",
        {"status": "aborted", "by": "gc", "saved_commits": report.saved_commits},
        run_id=run_id,
    )


def _orphan_sessions(ws: Workspace, live_runs: set[str], report: GcReport) -> None:
    sessions = Sessions(ws.root)
    for name in sessions.names():
        run_part = name.removeprefix(SESSION_PREFIX)
        orphan = not any(run_part.startswith(run_id + "-") for run_id in live_runs)
        if orphan and sessions.kill(name):
            report.killed_sessions.append(name)
    sessions.kill_server_if_idle()


def _orphan_worktrees(ws: Workspace, live_runs: set[str], report: GcReport) -> None:
    if not ws.worktrees_dir.is_dir():
        return
    for run_dir in ws.worktrees_dir.iterdir():
        if run_dir.name in live_runs:
            continue
        for worktree in run_dir.iterdir() if run_dir.is_dir() else []:
            common = wt.common_repo(worktree)
            if common is not None:
                wt.commit_all(worktree, "agentos: work saved by gc\n", worktree.name)
                wt.remove_worktree(common, worktree)
            shutil.rmtree(worktree, ignore_errors=True)
            report.removed_worktrees.append(str(worktree))
        shutil.rmtree(run_dir, ignore_errors=True)
    runs_dir = ws.state_dir / "runs"
    for run_dir in runs_dir.iterdir() if runs_dir.is_dir() else []:
        if run_dir.name not in live_runs:
            shutil.rmtree(run_dir, ignore_errors=True)
